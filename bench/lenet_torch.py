"""PyTorch (CPU) twin of bench/bench_lenet.c, run by bench/run.sh in the same
invocation so the two compare side by side (issue 11).

  lenet  Conv2d(1, 32, 5, padding=2), ReLU, MaxPool2d(2), Conv2d(32, 64, 5),
         ReLU, MaxPool2d(2), Flatten, Linear(1600, 256), ReLU,
         Linear(256, 128), ReLU, Linear(128, 10)   (Ember's em_model_lenet)
  mlp    Linear(784, 512), ReLU, Linear(512, 512), ReLU, Linear(512, 10)
         on the images flattened                    (em_model_mlp, hidden 512, 512)

One step: F.cross_entropy (mean over the batch), backward(),
torch.optim.SGD(lr=0.01, momentum=0.9) step, batch 64, the first 16
minibatches of Fashion-MNIST's training set (pixels / 255) cycled, or random
data when the files are missing; torch.set_num_threads(N). Before timing, 30
steps on one minibatch must lower the loss.

Prints "R train.<model>.64.torch.ms <ms per step>" lines (bench_common.h's format).
Usage: python3 bench/lenet_torch.py [--threads N] [--quick]
"""
import argparse
import gzip
import os
import sys
import time
import warnings

BATCH = 64
N_BATCHES = 16
FMNIST = "/usr/share/datasets/fashion-mnist"


def emit(key, value):
    print(f"R {key} {value}", flush=True)


def idx_bytes(path, skip):
    with gzip.open(path, "rb") as f:
        data = f.read()
    return data[skip:]


def load_data(torch):
    n = BATCH * N_BATCHES
    img = os.path.join(FMNIST, "train-images-idx3-ubyte.gz")
    lab = os.path.join(FMNIST, "train-labels-idx1-ubyte.gz")
    if os.path.exists(img) and os.path.exists(lab):
        px = idx_bytes(img, 16)[: n * 784]
        lb = idx_bytes(lab, 8)[:n]
        x = torch.frombuffer(bytearray(px), dtype=torch.uint8).float().div_(255.0).reshape(n, 1, 28, 28)
        y = torch.frombuffer(bytearray(lb), dtype=torch.uint8).long()
        emit("train.data.torch", "fashion-mnist")
    else:
        gen = torch.Generator().manual_seed(12345)
        x = torch.rand(n, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (n,), generator=gen)
        emit("train.data.torch", "random")
    return [(x[k * BATCH:(k + 1) * BATCH].contiguous(), y[k * BATCH:(k + 1) * BATCH].contiguous())
            for k in range(N_BATCHES)]


def model_of(torch, name):
    nn = torch.nn
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1600, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def bench_model(torch, name, data, reps, steps):
    F = torch.nn.functional
    torch.manual_seed(1)
    model = model_of(torch, name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, labels):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        return loss.item()

    first = last = None
    for _ in range(30):  # training works; also the warm-up
        last = step(*data[0])
        first = last if first is None else first
    emit(f"train.{name}.{BATCH}.torch.check_loss_first", f"{first:.5f}")
    emit(f"train.{name}.{BATCH}.torch.check_loss_last", f"{last:.5f}")
    if not last < first:
        sys.exit(f"lenet_torch: 30 momentum steps did not lower {name}'s loss ({first} -> {last})")
    k = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(*data[k % N_BATCHES])
            k += 1
        emit(f"train.{name}.{BATCH}.torch.ms", f"{(time.perf_counter() - t0) / steps * 1e3:.4f}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    try:
        import torch
    except Exception as e:  # ImportError, or OSError from a broken install
        emit("torch.unavailable", str(e).replace("\n", " "))
        return 0
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    emit("torch.threads", torch.get_num_threads())
    data = load_data(torch)
    bench_model(torch, "lenet", data, 2 if args.quick else 5, 10 if args.quick else 20)
    bench_model(torch, "mlp", data, 2 if args.quick else 5, 20 if args.quick else 40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
