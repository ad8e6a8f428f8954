"""PyTorch's side of bench/bench_fast.c (issue 13, the fast mode): the same
workloads on the same GPU, printed as "R torch_<key> value" lines whose keys
match bench_fast's "R <key> value", so bench/run_fast.sh can pair them.

  gemm   torch.matmul on square N x N: f32 with TF32 off
         (torch.backends.cuda.matmul.allow_tf32 = False), tf32 (True), bf16
         and f16 tensors. Reduced-precision reductions of half products are
         turned off (allow_bf16/fp16_reduced_precision_reduction = False):
         Ember's half products accumulate in f32, so the two compute the same
         thing. TFLOP/s.
  conv   F.conv2d on bench_fast's cases (ResNet-20 at batch 128, CNTK's group
         convolution), forward and forward + torch.autograd.grad(y, (x, w),
         dy), in f32 (cudnn.allow_tf32 False), tf32 (True) and f16 tensors,
         torch.backends.cudnn.benchmark = True (Ember searches algorithms
         too). ms per call.
  train  eager training steps: the MLP 784-512-512-10 at batch 64 and 256,
         ResNet-20 (option A, 3x32x32) at batch 128; F.cross_entropy (mean),
         torch.optim.Adam(lr=1e-3), the loss read back each step (Ember's
         trainer reads it too); fp32 (TF32 off), fp16 (torch.autocast +
         torch.amp.GradScaler), bf16 (autocast, no scaler). Samples/s.
  start  a fresh `python3 -c` process: exec -> interpreter -> import torch ->
         the context (the first allocation) -> a relu of one float on the
         GPU, synchronized; and the first
         convolution result (cudnn.benchmark, ResNet-20's 16 -> 16 layer) in
         two fresh processes (PyTorch keeps no algorithm cache across
         processes: both search).

Timing as bench_fast: one warm-up call, then batches of `reps` calls with
torch.cuda.synchronize() before the clock stops; the median of the batches.
Without a GPU it prints "R torch no_cuda" and stops (as gpu_torch.py), unless
--dry-cpu: then everything runs on the CPU at --tiny sizes, to exercise this
script's code paths; those numbers mean nothing.

usage: fast_torch.py [--device N] [--quick | --tiny] [--only gemm,conv,train,start] [--dry-cpu]
"""
import os
import statistics
import subprocess
import sys
import time

import torch_models


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


quick = "--quick" in sys.argv
tiny = "--tiny" in sys.argv
dry_cpu = "--dry-cpu" in sys.argv
only = arg("--only", "gemm,conv,train,start").split(",")
ordinal = int(arg("--device", "0"))


def emit(key, value):
    print(f"R torch_{key} {value}", flush=True)


try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("R torch unavailable")
    sys.exit(0)

if torch.cuda.is_available():
    dev = torch.device("cuda", ordinal)
elif dry_cpu:
    dev = torch.device("cpu")
    tiny = True
else:
    print("R torch no_cuda")
    sys.exit(0)
cuda = dev.type == "cuda"
batches = 2 if tiny else 5


def sync():
    if cuda:
        torch.cuda.synchronize(dev)


emit("version", torch.__version__)
emit("device", torch.cuda.get_device_name(dev) if cuda else "cpu (dry run)")
emit("cuda", torch.version.cuda)
emit("cudnn", torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None)
emit("size", "tiny" if tiny else "quick" if quick else "full")
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def timed(fn, reps):
    fn()
    sync()
    t = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        t.append((time.perf_counter() - t0) / reps)
    return statistics.median(t)


def guarded(key, fn):
    """One measurement; a failure is reported and the run goes on."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any failure of one case is reported, not fatal
        emit(f"{key}_error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


# ---------------------------------------------------------------- gemm ---
VARIANTS = {"f32": (torch.float32, False), "tf32": (torch.float32, True),
            "bf16": (torch.bfloat16, False), "f16": (torch.float16, False)}


def bench_gemm():
    sizes = [64, 128] if tiny else [1024, 2048] if quick else [1024, 2048, 4096, 8192]
    for n in sizes:
        reps = 1 if tiny else 3 if n >= 8192 else 5 if n >= 4096 else 20
        for name, (dt, tf32) in VARIANTS.items():
            key = f"gemm_{name}_{n}"

            def run():
                set_tf32(tf32)
                gen = torch.Generator().manual_seed(10)
                a = (torch.rand(n, n, generator=gen) * 2 - 1).to(dev, dt)
                b = (torch.rand(n, n, generator=gen) * 2 - 1).to(dev, dt)
                emit(f"{key}_tflops", f"{2 * n ** 3 / timed(lambda: a @ b, reps) / 1e12:.4g}")

            guarded(key, run)
    set_tf32(False)


# ---------------------------------------------------------------- conv ---
# (name, n, c, h, w, m, k, stride, pad, group): bench_fast.c's conv_cases
CONV_CASES = [("r20_stem", 128, 3, 32, 32, 16, 3, 1, 1, 1), ("r20_s1", 128, 16, 32, 32, 16, 3, 1, 1, 1),
              ("r20_s2down", 128, 16, 32, 32, 32, 3, 2, 1, 1), ("r20_s2", 128, 32, 16, 16, 32, 3, 1, 1, 1),
              ("r20_s3down", 128, 32, 16, 16, 64, 3, 2, 1, 1), ("r20_s3", 128, 64, 8, 8, 64, 3, 1, 1, 1),
              ("cntk_group", 1, 32, 128, 128, 32, 5, 1, 2, 32)]


def shrink(case):
    """bench_fast's toy sizes for --tiny: batch 2, a quarter of each side."""
    name, n, c, h, w, m, k, s, p, g = case
    return (name, min(n, 2), c, h // 4, w // 4, m, k, s, p, g) if tiny else case


def bench_conv():
    reps = 1 if tiny else 10 if quick else 20
    for case in CONV_CASES:
        name, n, c, h, w, m, k, s, p, g = shrink(case)
        for bwd in (False, True):
            for vname, (dt, tf32) in VARIANTS.items():
                if vname == "bf16":
                    continue  # bench_fast times f32, tf32 and f16 convolutions
                key = f"conv_{name}_{'fwdbwd' if bwd else 'fwd'}_{vname}"

                def run():
                    set_tf32(tf32)
                    gen = torch.Generator().manual_seed(20)
                    x = (torch.rand(n, c, h, w, generator=gen) * 2 - 1).to(dev, dt)
                    wt = (torch.rand(m, c // g, k, k, generator=gen) * 2 - 1).to(dev, dt)
                    if not bwd:
                        f = lambda: F.conv2d(x, wt, stride=s, padding=p, groups=g)  # noqa: E731
                    else:
                        x.requires_grad_(True)
                        wt.requires_grad_(True)
                        dy = torch.rand_like(F.conv2d(x.detach(), wt.detach(), stride=s, padding=p, groups=g)) * 2 - 1

                        def f():
                            y = F.conv2d(x, wt, stride=s, padding=p, groups=g)
                            return torch.autograd.grad(y, (x, wt), dy)
                    emit(f"{key}_ms", f"{timed(f, reps) * 1e3:.4f}")

                guarded(key, run)
    set_tf32(False)


# --------------------------------------------------------------- train ---
def bench_train_one(model_name, batch, prec):
    key = f"train_{model_name}_b{batch}_{prec}"
    set_tf32(False)
    torch.manual_seed(1)
    nn = torch.nn
    resnet = model_name == "resnet20"
    side = 8 if tiny else 32
    if resnet:
        model = torch_models.resnet20(torch, 3).to(dev)
        shape = (batch, 3, side, side)
    else:
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10)).to(dev)
        shape = (batch, 784)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(prec)
    scaler = torch.amp.GradScaler(dev.type) if prec == "fp16" else None
    gen = torch.Generator().manual_seed(7)
    data = [((torch.rand(shape, generator=gen) * 2 - 1).to(dev),
             torch.randint(0, 10, (batch,), generator=gen).to(dev)) for _ in range(8)]

    def step(xb, lb):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=half, enabled=half is not None):
            loss = F.cross_entropy(model(xb), lb)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.item()

    check = 5 if tiny else 20
    losses = [step(*data[0]) for _ in range(check)]  # trains; also the warm-up
    emit(f"{key}_loss_first", f"{losses[0]:.5f}")
    emit(f"{key}_loss_last", f"{losses[-1]:.5f}")
    if not losses[-1] < losses[0]:
        emit(f"{key}_check", "FAIL")
    steps = 2 if tiny else 10 if quick else 20 if resnet else 50
    k = 0
    t = []
    for _ in range(batches):
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step(*data[k % len(data)])
            k += 1
        sync()
        t.append((time.perf_counter() - t0) / steps)
    emit(f"{key}_sps", f"{batch / statistics.median(t):.1f}")


def bench_train():
    for prec in ("fp32", "fp16", "bf16"):
        for model_name, batch in ([("mlp", 8), ("resnet20", 4)] if tiny else
                                  [("mlp", 64), ("mlp", 256), ("resnet20", 128)]):
            key = f"train_{model_name}_b{batch}_{prec}"
            guarded(key, lambda: bench_train_one(model_name, batch, prec))


# --------------------------------------------------------------- start ---
CHILD_FIRST = """
import time
t_main = time.clock_gettime(time.CLOCK_MONOTONIC)
import torch
t_import = time.clock_gettime(time.CLOCK_MONOTONIC)
dev = torch.device({dev!r})
x = torch.empty(1, device=dev)  # the first allocation creates the context
t_ctx = time.clock_gettime(time.CLOCK_MONOTONIC)
y = torch.relu(x.fill_(1))
if dev.type == "cuda":
    torch.cuda.synchronize(dev)
t_first = time.clock_gettime(time.CLOCK_MONOTONIC)
print("C", t_main, t_import, t_ctx, t_first, flush=True)
"""

CHILD_CONV = """
import time
t_main = time.clock_gettime(time.CLOCK_MONOTONIC)
import torch
import torch.nn.functional as F
t_import = time.clock_gettime(time.CLOCK_MONOTONIC)
dev = torch.device({dev!r})
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = False
x = (torch.rand({n}, {c}, {h}, {w}) * 2 - 1).to(dev)
wt = (torch.rand({m}, {c}, 3, 3) * 2 - 1).to(dev)
def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
y = F.conv2d(x, wt, padding=1)
sync()
t_first = time.clock_gettime(time.CLOCK_MONOTONIC)
y = F.conv2d(x, wt, padding=1)
sync()
t_second = time.clock_gettime(time.CLOCK_MONOTONIC)
print("C", t_main, t_import, t_first, t_second, flush=True)
"""


def spawn(code):
    """Runs code in a fresh interpreter; returns the spawn time and the child's clock readings."""
    t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("C ")][-1]
    return t0, [float(v) for v in line.split()[1:]]


def bench_start():
    runs = 2 if tiny else 3 if quick else 7
    total, to_main, imp, ctx, first = [], [], [], [], []
    for _ in range(runs):
        t0, (t_main, t_import, t_ctx, t_first) = spawn(CHILD_FIRST.format(dev=str(dev)))
        total.append((t_first - t0) * 1e3)
        to_main.append((t_main - t0) * 1e3)
        imp.append((t_import - t_main) * 1e3)
        ctx.append((t_ctx - t_import) * 1e3)
        first.append((t_first - t_ctx) * 1e3)
        emit("start_first_kernel_sample_ms", f"{total[-1]:.2f}")
    emit("start_first_kernel_ms", f"{statistics.median(total):.2f}")
    emit("start_exec_to_main_ms", f"{statistics.median(to_main):.2f}")
    emit("start_import_ms", f"{statistics.median(imp):.2f}")
    emit("start_context_ms", f"{statistics.median(ctx):.2f}")
    emit("start_plan_load_run_ms", f"{statistics.median(first):.2f}")
    name, n, c, h, w, m, k, s, p, g = shrink(CONV_CASES[1])
    code = CHILD_CONV.format(dev=str(dev), n=n, c=c, h=h, w=w, m=m)
    a, b, steady = [], [], []
    for _ in range(1 if tiny else 2 if quick else 3):  # bench_fast's pairs
        t0, (t_main, t_import, t_first, t_second) = spawn(code)
        a.append((t_first - t0) * 1e3)
        steady.append((t_second - t_first) * 1e3)
        t0, (t_main, t_import, t_first, t_second) = spawn(code)
        b.append((t_first - t0) * 1e3)
    emit("start_cudnn_cold_ms", f"{statistics.median(a):.2f}")
    emit("start_cudnn_warm_ms", f"{statistics.median(b):.2f}")
    emit("start_cudnn_steady_run_ms", f"{statistics.median(steady):.2f}")


for section, fn in (("gemm", bench_gemm), ("conv", bench_conv), ("train", bench_train), ("start", bench_start)):
    if section in only:
        guarded(section, fn)
