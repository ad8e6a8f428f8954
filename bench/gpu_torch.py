"""PyTorch's side of bench/bench_gpu.c: the same workloads on the same GPU,
printed as "R torch_<key> value" lines. TF32 is off (torch.backends.cuda.
matmul.allow_tf32 = False), so matmul is plain FP32 like Ember's GEMM; the
MLP step is forward + backward (loss and gradients), no optimiser step.
usage: gpu_torch.py [--device N] [--quick]"""
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("R torch unavailable")
    sys.exit(0)

quick = "--quick" in sys.argv
dev = torch.device("cuda", int(sys.argv[sys.argv.index("--device") + 1]) if "--device" in sys.argv else 0)
if not torch.cuda.is_available():
    print("R torch no_cuda")
    sys.exit(0)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
print(f"R torch_version {torch.__version__}")


def timed(fn, reps):
    fn()
    torch.cuda.synchronize(dev)
    t = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize(dev)
        t.append((time.perf_counter() - t0) / reps)
    return statistics.median(t)


n = (16 if quick else 64) << 20
x = torch.rand(n, device=dev) * 2 - 1
y = torch.rand(n, device=dev) * 2 - 1
z = torch.empty_like(x)
nbytes = 4 * n
print(f"R torch_bw_copy_gbs {2 * nbytes / timed(lambda: z.copy_(x), 10) / 1e9:.2f}")
for name, fn, moved in [("relu", lambda: torch.relu(x), 2), ("exp", lambda: torch.exp(x), 2),
                        ("add", lambda: x + y, 3), ("mul", lambda: x * y, 3), ("reduce_sum", lambda: x.sum(), 1)]:
    print(f"R torch_bw_{name}_gbs {moved * nbytes / timed(fn, 10) / 1e9:.2f}")
del x, y, z

for size in [1024, 2048] if quick else [1024, 2048, 4096, 8192]:
    a = torch.rand(size, size, device=dev)
    b = torch.rand(size, size, device=dev)
    s = timed(lambda: a @ b, 3 if size >= 4096 else 10)
    print(f"R torch_gemm_{size}_tflops {2 * size ** 3 / s / 1e12:.3f}")
    del a, b

x1 = torch.rand(1, device=dev)


def chain():
    v = x1
    for _ in range(256):
        v = -v
    return v


print(f"R torch_host_us_per_op {timed(chain, 20) / 256 * 1e6:.3f}")

for batch in [64, 256]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(dev)
    xb = torch.rand(batch, 784, device=dev) * 2 - 1
    lb = torch.randint(0, 10, (batch,), device=dev)
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        model.zero_grad(set_to_none=True)
        lossf(model(xb), lb).backward()

    print(f"R torch_mlp_b{batch}_ms {timed(step, 20) * 1e3:.4f}")
