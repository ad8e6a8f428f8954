"""bench/run_fast.sh's report: the "R key value" lines of bench_fast (Ember)
and fast_torch.py (PyTorch, keys prefixed torch_) from one or more rounds ->
the Markdown result file of issue 13's GPU benchmarks.

Every ratio is Ember's speed over PyTorch's (TFLOP/s over TFLOP/s, samples/s
over samples/s, PyTorch's ms over Ember's ms): above 1, Ember is faster. With
several rounds a value is the median over rounds and a ratio the median of the
per-round ratios.

usage: fast_report.py OUT DATE COMMIT DRY(0|1) "INFO" EMBER_1 TORCH_1 [EMBER_2 TORCH_2 ...]
"""
import statistics
import sys

out, date, commit, dry, info = sys.argv[1:6]
dry = dry == "1"
files = sys.argv[6:]
rounds = [(files[i], files[i + 1]) for i in range(0, len(files) - 1, 2)]


def read(path):
    r = {}
    try:
        for line in open(path, errors="replace"):
            p = line.rstrip("\n").split(None, 2)
            if len(p) >= 2 and p[0] == "R":
                v = p[2].strip() if len(p) == 3 else ""
                r[p[1]] = r[p[1]] + "; " + v if p[1] in r else v  # repeated keys: samples, modules
    except OSError:
        pass
    return r


E = [read(e) for e, _ in rounds]
T = [read(t) for _, t in rounds]


def num(d, k):
    try:
        return float(d[k])
    except (KeyError, ValueError):
        return None


def med(ds, k):
    v = [x for x in (num(d, k) for d in ds) if x is not None]
    return statistics.median(v) if v else None


def text(ds, k, default="-"):
    for d in ds:
        if k in d:
            return d[k]
    return default


def ratio(ek, tk, inverse=False):
    """Median over rounds of Ember/PyTorch (inverse: PyTorch/Ember, for times)."""
    v = []
    for e, t in zip(E, T):
        a, b = num(e, ek), num(t, tk)
        if a and b:
            v.append(b / a if inverse else a / b)
    return statistics.median(v) if v else None


def show(v, fmt="{:.3f}"):
    return "-" if v is None else fmt.format(v)


def verdict(r, target):
    if dry:
        return "(dry run)"  # a double's or a CPU's numbers judge nothing
    return "-" if r is None else ("yes" if r >= target else "**no**")


L = ["# Fast-mode GPU benchmarks (issue 13)", ""]
if dry:
    L += ["> **DRY RUN — not a measurement.** Made against the libcuda/cuBLAS/cuDNN test doubles (kernels run on",
          "> the host) and/or PyTorch on the CPU, at toy sizes, to check that every code path and this report run.",
          "> The numbers below mean nothing; never commit this file under bench/results/.", ""]
L += [f"- date: {date}", f"- commit: {commit}",
      f"- GPU: {text(E, 'gpu')} (CC {text(E, 'cc')}, {text(E, 'sm_count')} SMs), driver CUDA {text(E, 'driver_cuda')}",
      f"- Ember's cuBLAS: {text(E, 'cublas_why')}; cuDNN: {text(E, 'cudnn_why')}",
      f"- PyTorch: {text(T, 'torch_version', 'unavailable')} (CUDA {text(T, 'torch_cuda')}, cuDNN "
      f"{text(T, 'torch_cudnn')}) on {text(T, 'torch_device')}",
      f"- sizes: {text(E, 'size')}; rounds: {len(rounds)} (Ember and PyTorch as separate processes, back to back, "
      "the first alternating)"]
L += [f"- {line}" for line in info.split("\n") if line]
for lib in ("cublas", "cudnn"):
    if text(E, f"{lib}_used", "1") != "1":
        L += [f"- **Ember did not use {lib}** ({text(E, f'{lib}_why')}): its rows measure Ember's own kernels"]
if any(d.get("torch") in ("unavailable", "no_cuda") for d in T):
    L += ["- **PyTorch did not run** (" + text(T, "torch") + "): no ratios"]

fails = sorted({k for d in E + T for k, v in d.items() if (k.endswith("_check") and v == "FAIL") or k.endswith("_error")})
if fails:
    L += ["", "## Failed checks and errors", ""]
    L += [f"- `{k}`: {text(E + T, k)}" for k in fails]

# --------------------------------------------------------------- GEMM ---
gemm = sorted({int(k.split("_")[2]) for d in E for k in d if k.startswith("gemm_") and k.endswith("_tflops")})
if gemm:
    L += ["", "## GEMM (TFLOP/s, C = A B square N x N, one matmul through the executor)", "",
          "f32: TF32 off on both sides; tf32: em_exec_set_tf32 / allow_tf32; bf16, f16: half inputs and output, f32 "
          "accumulation (PyTorch's reduced-precision reductions off); bf16tf32: Ember's bf16 with TF32 allowed, "
          "against PyTorch's bf16. Target: Ember / PyTorch >= 0.97.", "",
          "| N | variant | Ember | PyTorch | Ember / PyTorch | >= 0.97 | Ember's path | Ember's rel. error |",
          "|---|---|---|---|---|---|---|---|"]
    for n in gemm:
        for v in ("f32", "tf32", "bf16", "f16", "bf16tf32"):
            k = f"gemm_{v}_{n}"
            if f"{k}_tflops" not in E[0]:
                continue
            tk = f"torch_gemm_{'bf16' if v == 'bf16tf32' else v}_{n}_tflops"
            r = ratio(f"{k}_tflops", tk)
            L.append(f"| {n} | {v} | {show(med(E, k + '_tflops'), '{:.4g}')} | {show(med(T, tk), '{:.4g}')} | {show(r, '{:.2f}')} | "
                     f"{verdict(r, 0.97)} | {text(E, k + '_path')} | {text(E, k + '_relerr')} |")

# --------------------------------------------------------------- conv ---
convs = []
for k in E[0]:
    if k.startswith("conv_") and k.endswith("_ms"):
        convs.append(k[5:-3])
if convs:
    L += ["", "## Convolution (ms per call; PyTorch: F.conv2d, cudnn.benchmark)", "",
          "fwd: y = conv(x, w); fwdbwd: y, dx and dw from a fed dy (torch.autograd.grad(y, (x, w), dy)). "
          "ResNet-20's 3x3 layers at batch 128; cntk_group: x [1,32,128,128], 32 groups, 5x5, pad 2 (CNTK 2.6's "
          "release notes: 6.581 ms forward on their GPU, 9.963 ms on their CPU; other machines, indicative only). "
          "No target stated; the ratio is PyTorch's ms / Ember's.", "",
          "| case | pass | dtype | Ember | PyTorch | Ember speed / PyTorch | Ember's path (forward) | rel. error |",
          "|---|---|---|---|---|---|---|---|"]
    for c in convs:
        case, rest = c.rsplit("_fwd", 1)
        pas, dt = ("fwd" + rest).split("_")
        r = ratio(f"conv_{c}_ms", f"torch_conv_{c}_ms", inverse=True)
        L.append(f"| {case} | {pas} | {dt} | {show(med(E, f'conv_{c}_ms'), '{:.4f}')} | "
                 f"{show(med(T, f'torch_conv_{c}_ms'), '{:.4f}')} | {show(r, '{:.2f}')} | "
                 f"{text(E, f'conv_{c}_path')} | {text(E, f'conv_{c}_relerr')} |")

# -------------------------------------------------------------- train ---
trains = [k[6:-4] for k in E[0] if k.startswith("train_") and k.endswith("_sps")]
if trains:
    L += ["", "## Training step (samples/s; trainer + Adam vs PyTorch eager + Adam)", "",
          "Targets: MLP 784-512-512-10 >= 2x PyTorch eager, ResNet-20 >= 1x. fp16: Ember's dynamic loss scaling vs "
          "autocast + GradScaler; bf16: autocast without a scaler. Both read each step's loss back. CUDA graphs: "
          "Ember's step replayed as one graph (em_exec_set_graphs), against the same PyTorch eager run; replays: "
          "the steps that did replay.", "",
          "| model | batch | precision | CUDA graphs (replays) | Ember | PyTorch | Ember / PyTorch | target | met | "
          "loss first -> last (Ember) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for t in trains:
        model, b, prec = t.split("_")
        base = prec.split("+")[0]  # "fp32+graphs": PyTorch's side is its eager fp32 run
        graphs = f"yes ({text(E, f'train_{t}_replays')})" if "+graphs" in prec else "no"
        target = 2.0 if model == "mlp" else 1.0
        r = ratio(f"train_{t}_sps", f"torch_train_{model}_{b}_{base}_sps")
        L.append(f"| {model} | {b[1:]} | {base} | {graphs} | {show(med(E, f'train_{t}_sps'), '{:.0f}')} | "
                 f"{show(med(T, f'torch_train_{model}_{b}_{base}_sps'), '{:.0f}')} | {show(r, '{:.2f}')} | "
                 f"{target:g}x | {verdict(r, target)} | {text(E, f'train_{t}_loss_first')} -> "
                 f"{text(E, f'train_{t}_loss_last')} |")

# -------------------------------------------------------------- start ---
if "start_first_kernel_ms" in E[0]:
    fk = med(E, "start_first_kernel_ms")
    L += ["", "## Process start to first kernel (ms, median over fresh processes)", "",
          "Ember: bench_fast re-executed (EMBER_FORCE=cubin, empty EMBER_CACHE_DIR), a relu of one float planned, run "
          "and waited for; PyTorch: `python3 -c` importing torch and doing the same. Target (Ember, cubin path): "
          "<= 100 ms.", "",
          "| | Ember | PyTorch |", "|---|---|---|",
          f"| exec to first kernel done | {show(fk, '{:.1f}')} | {show(med(T, 'torch_start_first_kernel_ms'), '{:.1f}')} |",
          f"| exec to main / interpreter | {show(med(E, 'start_exec_to_main_ms'), '{:.1f}')} | "
          f"{show(med(T, 'torch_start_exec_to_main_ms'), '{:.1f}')} |",
          f"| import torch | - | {show(med(T, 'torch_start_import_ms'), '{:.1f}')} |",
          f"| driver: libcuda, cuInit | {show(med(E, 'start_driver_init_ms'), '{:.1f}')} | (in the next row) |",
          f"| context (the first allocation) | {show(med(E, 'start_context_ms'), '{:.1f}')} | "
          f"{show(med(T, 'torch_start_context_ms'), '{:.1f}')} |",
          f"| plan, module load, run, wait | {show(med(E, 'start_plan_load_run_ms'), '{:.1f}')} | "
          f"{show(med(T, 'torch_start_plan_load_run_ms'), '{:.1f}')} |", "",
          f"Target met: {verdict(None if fk is None else 100.0 / fk, 1.0)}. Modules loaded: "
          + ", ".join(f"`{m}`" for m in sorted({m for e in E for m in e.get("start_module", "").split("; ") if m}))
          + " (module, path, load ms).",
          "", "### cuDNN algorithm search: time from exec to the first convolution result (ms)", "",
          "ResNet-20's 16 -> 16 layer at batch 128, forward, in a fresh process. Ember: the first process on an empty "
          "EMBER_CACHE_DIR searches and caches, the second reads the cache. PyTorch keeps no cache across processes.",
          "", "| | Ember | PyTorch |", "|---|---|---|",
          f"| first process | {show(med(E, 'start_cudnn_cold_ms'), '{:.1f}')} | "
          f"{show(med(T, 'torch_start_cudnn_cold_ms'), '{:.1f}')} |",
          f"| second process | {show(med(E, 'start_cudnn_warm_ms'), '{:.1f}')} | "
          f"{show(med(T, 'torch_start_cudnn_warm_ms'), '{:.1f}')} |",
          f"| of which planning + first run (first / second) | {show(med(E, 'start_cudnn_cold_plan_run_ms'), '{:.1f}')}"
          f" / {show(med(E, 'start_cudnn_warm_plan_run_ms'), '{:.1f}')} | - |",
          f"| a later run of the same convolution | {show(med(E, 'start_cudnn_steady_run_ms'), '{:.2f}')} | "
          f"{show(med(T, 'torch_start_cudnn_steady_run_ms'), '{:.2f}')} |", "",
          f"Ember's cache after the first process: {text(E, 'start_cudnn_cache_files')} file(s); algorithm: "
          f"{text(E, 'start_cudnn_cold_path')} (first), {text(E, 'start_cudnn_warm_path')} (second)."]

L += ["", "## Raw output", ""]
for i, (e, t) in enumerate(zip(E, T)):
    L += [f"<details><summary>round {i + 1}</summary>", "", "```"]
    L += [f"{k} {v}" for k, v in e.items()] + [f"{k} {v}" for k, v in t.items()]
    L += ["```", "", "</details>", ""]
open(out, "w").write("\n".join(L) + "\n")
print(f"written: {out}")
