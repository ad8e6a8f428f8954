"""PyTorch twin of `ember train` for the training-throughput benchmark
(bench/train_bench.sh, issue 11): the same models, data, minibatch size,
learner and device, timed per epoch the way `ember train --json` reports it.

  mlp       Flatten, Linear(784, 256), ReLU, Linear(256, 128), ReLU,
            Linear(128, 10)                          (the zoo's default mlp)
  lenet     Conv2d(1, 32, 5, padding=2), ReLU, MaxPool2d(2), Conv2d(32, 64, 5),
            ReLU, MaxPool2d(2), Flatten, Linear(1600, 256), ReLU,
            Linear(256, 128), ReLU, Linear(128, 10)  (em_model_lenet)
  resnet20  He et al. 2016 section 4.2 on 1x28x28: conv 3x3 16 + BN + ReLU,
            3 stages x 3 basic blocks at 16/32/64 channels (stride 2 at the
            start of stages 2 and 3, option A shortcuts: subsampling and zero
            channels), global average pool, Linear(64, 10); bias-free convs
                                                     (em_model_resnet20)

Data: Fashion-MNIST's IDX files in --data (gzipped), the first --samples
training images, pixels / 255 standardised with the subset's own mean and
standard deviation (as `ember train` does), reshuffled each epoch, each
minibatch gathered on the CPU and copied to the device (Ember's minibatch
source does the same work in its prefetch thread). One step:
F.cross_entropy (mean), backward(), torch.optim.SGD(lr, momentum=0.9) step,
the loss read back (`ember train` reads each step's loss too).

Prints "R <model>.<device>.torch.epoch<k>.samples_per_s <x>" per epoch and
"R <model>.<device>.torch.loss_first/last" (a check that it trains).
Usage: python3 bench/train_torch.py --model M --device cpu|cuda:0
       [--samples N] [--epochs E] [--batch B] [--lr X] [--threads T] [--data DIR]
"""
import argparse
import gzip
import os
import sys
import time
import warnings

import torch_models


def emit(key, value):
    print(f"R {key} {value}", flush=True)


def idx(path, skip):
    with gzip.open(path, "rb") as f:
        return f.read()[skip:]


def model_of(torch, name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(1600, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "resnet20":
        return torch_models.resnet20(torch, 1)
    sys.exit(f"train_torch: unknown model {name}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--samples", type=int, default=60000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    try:
        import torch
    except Exception as e:  # ImportError, or OSError from a broken install
        emit("torch.unavailable", str(e).replace("\n", " "))
        return 0
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        emit("torch.unavailable", "torch.cuda.is_available() is False")
        return 0
    emit("torch.version", torch.__version__)
    n = a.samples
    px = idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"), 16)[: n * 784]
    lb = idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"), 8)[:n]
    images = torch.frombuffer(bytearray(px), dtype=torch.uint8).reshape(n, 1, 28, 28)
    labels = torch.frombuffer(bytearray(lb), dtype=torch.uint8).long()
    x01 = images.double() / 255.0
    mean, std = x01.mean().item(), x01.std(unbiased=False).item()
    torch.manual_seed(1)
    model = model_of(torch, a.model).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    F = torch.nn.functional
    key = f"{a.model}.{dev.type}.torch"
    first = last = None
    for epoch in range(1, a.epochs + 1):
        order = torch.randperm(n)
        model.train()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(0, n, a.batch):
            idx_b = order[k:k + a.batch]
            xb = ((images[idx_b].float() / 255.0 - mean) / std).to(dev, non_blocking=True)
            yb = labels[idx_b].to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            last = loss.item()  # the step's loss on the host, as ember train reads it
            first = last if first is None else first
        if dev.type == "cuda":
            torch.cuda.synchronize()
        emit(f"{key}.epoch{epoch}.samples_per_s", f"{n / (time.perf_counter() - t0):.1f}")
    emit(f"{key}.loss_first", f"{first:.5f}")
    emit(f"{key}.loss_last", f"{last:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
