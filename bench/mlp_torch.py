"""PyTorch (CPU) twins of Ember's benchmarks, run by bench/run.sh in the same
invocation as the C benchmarks so the two can be compared side by side.

  mlp        the MLP 784-512-512-10 of bench_mlp.c: nn.Linear layers with
             ReLU, F.cross_entropy (sparse labels, mean over the batch),
             forward + backward + torch.optim.SGD step, batch 64 and 256,
             random data; samples per second.
  groupconv  bench_groupconv.c's depthwise convolution: x [1,32,128,128],
             w [32,1,5,5], groups=32, padding 2 (same), stride 1, no bias,
             forward only under torch.no_grad(); milliseconds per call.
  conv       bench_conv.c's layer: nn.Conv2d(64, 64, 3, padding=1, bias=False)
             on x [8,64,56,56]: forward under no_grad ("fwd"), and forward
             + backward to x and the weight ("fwdbwd"); milliseconds.
  softmax_ce bench_softmax_ce.c's loss: logits [64,32000] f32 (requires
             grad), sparse labels, F.cross_entropy (mean), forward and
             backward to the logits; milliseconds per call.

Prints "R key value" lines like the C benchmarks (bench/bench_common.h).
Usage: python3 bench/mlp_torch.py {mlp|groupconv|conv|softmax_ce} [--threads N] [--quick]
"""
import argparse
import warnings
import sys
import time


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["mlp", "groupconv", "conv", "softmax_ce", "info"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    return p.parse_args()


def emit(key, value):
    print(f"R {key} {value}", flush=True)


def setup_threads(torch, threads):
    if threads > 0:
        torch.set_num_threads(threads)
    emit("torch.threads", torch.get_num_threads())


def info(torch):
    emit("torch.version", torch.__version__)
    cfg = torch.__config__.show()
    for line in cfg.splitlines():
        line = line.strip()
        if "MKL-DNN" in line or "CPU capability" in line:
            emit("torch.config", line.lstrip("- "))
        if line.startswith("- Build settings"):
            for item in line.split(":", 1)[1].split(","):
                item = item.strip()
                if item.startswith(("BLAS_INFO", "USE_MKLDNN", "USE_OPENMP")):
                    emit("torch.config", item)


def mlp(torch, args):
    nn, F = torch.nn, torch.nn.functional
    torch.manual_seed(0)
    n_batches = 8
    lr = 0.01
    for batch, steps in ((64, 20), (256, 8)):
        reps = 3  # per process: run.sh repeats the process in rounds
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        gen = torch.Generator().manual_seed(1000 + batch)
        xs = [torch.rand(batch, 784, generator=gen) * 2 - 1 for _ in range(n_batches)]
        ls = [torch.randint(0, 10, (batch,), generator=gen) for _ in range(n_batches)]

        def step(opt, x, labels):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), labels)
            loss.backward()
            opt.step()
            return loss.item()

        # Training works (and warm-up): 30 steps on one batch lower the loss.
        check = torch.optim.SGD(model.parameters(), lr=0.1)
        first = last = None
        for i in range(30):
            last = step(check, xs[0], ls[0])
            first = last if first is None else first
        emit(f"mlp.{batch}.torch.check_loss_first", f"{first:.5f}")
        emit(f"mlp.{batch}.torch.check_loss_last", f"{last:.5f}")
        if not last < first:
            sys.exit(f"mlp_torch: 30 SGD steps did not lower the loss ({first} -> {last})")

        opt = torch.optim.SGD(model.parameters(), lr=lr)
        k = 0
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(steps):
                step(opt, xs[k % n_batches], ls[k % n_batches])
                k += 1
            dt = time.perf_counter() - t0
            emit(f"mlp.{batch}.torch.sps", f"{batch * steps / dt:.2f}")


def groupconv(torch, args):
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(7)
    x = torch.rand(1, 32, 128, 128, generator=gen) * 2 - 1
    w = torch.rand(32, 1, 5, 5, generator=gen) * 2 - 1
    batches, calls = (3, 10) if args.quick else (3, 20)
    with torch.no_grad():
        for _ in range(5):
            y = F.conv2d(x, w, padding=2, groups=32)
        assert tuple(y.shape) == (1, 32, 128, 128)
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(calls):
                F.conv2d(x, w, padding=2, groups=32)
            emit("groupconv.torch.ms", f"{(time.perf_counter() - t0) / calls * 1e3:.4f}")


def conv(torch, args):
    gen = torch.Generator().manual_seed(31)
    x = (torch.rand(8, 64, 56, 56, generator=gen) * 2 - 1).requires_grad_()
    layer = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
    batches, calls = (3, 2) if args.quick else (3, 5)

    def fwd():
        with torch.no_grad():
            layer(x)

    def fwdbwd():
        x.grad = None
        layer.weight.grad = None
        layer(x).sum().backward()

    for name, fn in (("fwd", fwd), ("fwdbwd", fwdbwd)):
        for _ in range(2):
            fn()
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            emit(f"conv.{name}.torch.ms", f"{(time.perf_counter() - t0) / calls * 1e3:.4f}")


def softmax_ce(torch, args):
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(21)
    x = (torch.rand(64, 32000, generator=gen) * 16 - 8).requires_grad_()
    labels = torch.randint(0, 32000, (64,), generator=gen)
    batches, calls = (3, 5) if args.quick else (3, 10)

    def step():
        x.grad = None
        F.cross_entropy(x, labels).backward()

    for _ in range(3):
        step()
    assert tuple(x.grad.shape) == (64, 32000)
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        emit("softmax_ce.torch.ms", f"{(time.perf_counter() - t0) / calls * 1e3:.4f}")


def main():
    args = parse()
    # A wheel without NumPy beside it warns on import; nothing here uses NumPy.
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    try:
        import torch
    except Exception as e:  # ImportError, or OSError from a broken install
        emit("torch.unavailable", str(e).replace("\n", " "))
        return 0
    setup_threads(torch, args.threads)
    if args.what == "info":
        info(torch)
    elif args.what == "mlp":
        mlp(torch, args)
    elif args.what == "conv":
        conv(torch, args)
    elif args.what == "softmax_ce":
        softmax_ce(torch, args)
    else:
        groupconv(torch, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
