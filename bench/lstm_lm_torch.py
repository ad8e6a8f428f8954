"""PyTorch (CPU) twin of bench/bench_lstm_lm.c, run by bench/lstm_lm.sh in
the same invocation so the two compare side by side (issue 12).

tokens [T, N] -> nn.Embedding(V, E) -> nn.LSTM(E, H, num_layers=L)
(time-major, torch's fused CPU LSTM) -> nn.Linear(H, V) -> F.cross_entropy
over every step (mean) -> backward() -> torch.optim.SGD(lr=0.1) step;
random tokens, 8 minibatches cycled, torch.set_num_threads(N). Before
timing, 20 steps on one minibatch must lower the loss.

Prints "R lstm_lm.torch.ms <ms per step>" lines (bench_common.h's format).
Usage: python3 bench/lstm_lm_torch.py [--threads N] [--quick] [--vocab V] [--embed E]
       [--hidden H] [--layers L] [--steps T] [--batch N]
"""
import argparse
import sys
import time
import warnings

N_BATCHES = 8


def emit(key, value):
    print(f"R {key} {value}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--vocab", type=int, default=10000)
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--steps", type=int, default=35)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    try:
        import torch
    except Exception as e:  # ImportError, or OSError from a broken install
        emit("torch.unavailable", str(e).replace("\n", " "))
        return 0
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    emit("torch.threads", torch.get_num_threads())
    emit("torch.version", torch.__version__)
    nn, F = torch.nn, torch.nn.functional
    torch.manual_seed(7)
    gen = torch.Generator().manual_seed(12345)
    data = []
    for _ in range(N_BATCHES):
        s = torch.randint(0, a.vocab, (a.steps + 1, a.batch), generator=gen)
        data.append((s[:-1].contiguous(), s[1:].contiguous()))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(a.vocab, a.embed)
            self.lstm = nn.LSTM(a.embed, a.hidden, num_layers=a.layers)
            self.decoder = nn.Linear(a.hidden, a.vocab)

        def forward(self, x):
            y, _ = self.lstm(self.embed(x))
            return self.decoder(y)

    model = LM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, labels):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, a.vocab), labels.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()

    first = last = None
    for _ in range(20):  # training works; also the warm-up
        last = step(*data[0])
        first = last if first is None else first
    emit("lstm_lm.torch.check_loss_first", f"{first:.5f}")
    emit("lstm_lm.torch.check_loss_last", f"{last:.5f}")
    if not last < first:
        sys.exit(f"lstm_lm_torch: 20 SGD steps did not lower the loss ({first} -> {last})")
    reps, steps = (3, 3) if a.quick else (5, 6)
    k = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(*data[k % N_BATCHES])
            k += 1
        emit("lstm_lm.torch.ms", f"{(time.perf_counter() - t0) / steps * 1e3:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
