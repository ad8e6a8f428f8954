"""Turns the "R key value" lines of one bench/run.sh invocation into the
Markdown result file (bench/results/cpu-<date>-<commit>.md).

Usage: python3 bench/report.py RAW_FILE OUT_FILE
Needs only the standard library (any python3).

Every sample is kept in the file (the "Raw samples" section); tables give
medians and ratios of medians. Goals (issue 4): GEMM Ember/OpenBLAS >= 0.95;
MLP Ember/PyTorch >= 1.2 at batch 64 and >= 1.0 at batch 256.
"""
import re
import statistics
import sys
from collections import OrderedDict

CNTK_GROUPCONV_MS = 9.963
CNTK_SOURCE = ("CNTK v2.6 release notes, \"Efficient group convolution\" "
               "(https://learn.microsoft.com/en-us/previous-versions/cognitive-toolkit/releasenotes/"
               "cntk_2_6_release_notes; also Documentation/current_iteration.md in microsoft/CNTK, mid-2018): "
               "GPU 6.581 ms, CPU 9.963 ms per call (1000-run average; old implementation 41.921 ms), "
               "MKL 2017 on an unnamed CPU")


def load(path):
    data = OrderedDict()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("R "):
                continue
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) < 3:
                continue
            data.setdefault(parts[1], []).append(parts[2])
    return data


ROUND = re.compile(r"^r(\d+)\.(.*)$")


def values(data, key):
    """The samples of key, pooled over the rounds (keys r<N>.key) and untagged."""
    out = list(data.get(key, []))
    for k, v in data.items():
        m = ROUND.match(k)
        if m and m.group(2) == key:
            out.extend(v)
    return out


def nums(data, key):
    out = []
    for v in values(data, key):
        try:
            out.append(float(v))
        except ValueError:
            pass
    return out


def med(data, key):
    v = nums(data, key)
    return statistics.median(v) if v else None


def best_ratio(data, num, den, higher_better=True):
    """Ratio of the best samples (max for rates, min for times): interference
    only slows a run down, so the best is the least disturbed."""
    a, b = nums(data, num), nums(data, den)
    if not a or not b:
        return None
    pick = max if higher_better else min
    return ratio(pick(a), pick(b))


def paired(data, num, den):
    """Median over rounds of (median of num in the round) / (median of den in
    the round), and the number of rounds: each round ran both sides back to
    back, so the pairing cancels slow load changes."""
    rounds = sorted({int(m.group(1)) for m in map(ROUND.match, data) if m})
    rs = []
    for r in rounds:
        a, b = med(data, f"r{r}.{num}"), med(data, f"r{r}.{den}")
        if a is not None and b:
            rs.append(a / b)
    return (statistics.median(rs), len(rs)) if rs else (None, 0)


def round_ratios(data, num, den):
    """The per-round ratios, as text."""
    rounds = sorted({int(m.group(1)) for m in map(ROUND.match, data) if m})
    out = []
    for r in rounds:
        a, b = med(data, f"r{r}.{num}"), med(data, f"r{r}.{den}")
        if a is not None and b:
            out.append(f"{a / b:.2f}")
    return " ".join(out) or "n/a"


def first(data, key, default="?"):
    v = values(data, key)
    return v[0] if v else default


def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def goal_text(r, goal):
    if r is None:
        return "not measured"
    return f"met (>= {goal})" if r >= goal else f"NOT met (goal >= {goal})"


def spread(data, key, digits=1):
    v = nums(data, key)
    if not v:
        return "n/a"
    return f"{fmt(min(v), digits)} .. {fmt(max(v), digits)} (n={len(v)})"


def header(d, out):
    out.append(f"# CPU benchmarks — {first(d, 'meta.date')} — commit {first(d, 'meta.commit')}")
    out.append("")
    out.append("Produced by `bash bench/run.sh " + first(d, "meta.args", "") + "` (see bench/README.md). "
               "Medians over repetitions, ratios of medians. The machine is shared with other builds: "
               "absolute numbers are noisy, ratios measured in the same run are what to read.")
    out.append("")
    out.append("| | |")
    out.append("| --- | --- |")
    for key, label in (("meta.date", "date (UTC)"), ("meta.commit", "commit"), ("meta.dirty", "working tree"),
                       ("meta.cpu", "CPU"), ("meta.cores", "online CPUs"), ("meta.mem", "memory"),
                       ("meta.threads", "threads (Ember, OpenBLAS, PyTorch)"),
                       ("meta.omp_wait", "OpenMP wait policies run (tags)"), ("meta.cc", "compiler"),
                       ("openblas.config", "OpenBLAS (runtime)"), ("meta.openblas_pkg", "OpenBLAS package"),
                       ("meta.python", "python for PyTorch"), ("torch.version", "PyTorch"),
                       ("meta.load_start", "load average at start"), ("meta.load_end", "load average at end")):
        if key in d:
            out.append(f"| {label} | {d[key][0]} |")
    for k in d:
        if k.endswith(".openblas.config"):
            out.append(f"| OpenBLAS (runtime) | {d[k][0]} |")
            break
    if "torch.config" in d:
        out.append("| PyTorch build | " + "; ".join(d["torch.config"]) + " |")
    if "torch.unavailable" in d:
        out.append("| PyTorch | **PyTorch unavailable**: " + d["torch.unavailable"][0] + " |")
    out.append("")


def has(d, prefix):
    return any(k.startswith(prefix) or (ROUND.match(k) and ROUND.match(k).group(2).startswith(prefix)) for k in d)


def gemm(d, out):
    if not has(d, "gemm."):
        return
    out.append("### 1. GEMM: Ember matmul (graph + executor) vs cblas_sgemm")
    out.append("")
    out.append("C = A·B, square f32, row-major. Ember: one `em_exec_run` of a graph `matmul(a, b)` (inputs fed, "
               "output tensor allocated and released). OpenBLAS: `cblas_sgemm` directly on the same input buffers, "
               "same thread count. Alternated repetition by repetition, the process repeated in rounds. GFLOP/s = 2n³ / time. "
               "Each repetition starts after a 0.3 s pause; its first call is timed alone (\"first call\" column: all "
               "threads were asleep, and a woken worker may share its waker's CPU for a few ms until the kernel "
               "moves it), then several calls back to back give the steady-state rate the goal is judged on: "
               "Ember/OpenBLAS >= 0.95. "
               "The last column (OpenBLAS on one thread, same run) shows what the extra threads bring on this machine.")
    out.append("")
    out.append("| n | Ember GFLOP/s | OpenBLAS GFLOP/s | Ember/OpenBLAS (median of per-round ratios) | goal | Ember range | OpenBLAS range "
               "| first call: Ember/OpenBLAS | OpenBLAS 1 thread GFLOP/s |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in (1024, 2048, 4096):
        e, b = med(d, f"gemm.{n}.ember.gflops"), med(d, f"gemm.{n}.blas.gflops")
        if e is None and b is None:
            continue
        r, nr = paired(d, f"gemm.{n}.ember.gflops", f"gemm.{n}.blas.gflops")
        if r is None:
            r, nr = ratio(e, b), 1
        out.append(f"| {n} | {fmt(e)} | {fmt(b)} | {fmt(r, 3)} (n={nr}: "
                   f"{round_ratios(d, f'gemm.{n}.ember.gflops', f'gemm.{n}.blas.gflops')}) | {goal_text(r, 0.95)} | "
                   f"{spread(d, f'gemm.{n}.ember.gflops')} | {spread(d, f'gemm.{n}.blas.gflops')} | "
                   f"{fmt(paired(d, f'gemm.{n}.ember.cold.gflops', f'gemm.{n}.blas.cold.gflops')[0], 3)} | "
                   f"{fmt(med(d, f'gemm.{n}.blas1.gflops'))} |")
    diffs = [f"{n}: {max(nums(d, f'gemm.{n}.maxreldiff')):.3g}" for n in (1024, 2048, 4096)
             if nums(d, f"gemm.{n}.maxreldiff")]
    if diffs:
        out.append("")
        out.append("Largest |Ember − OpenBLAS| / max|OpenBLAS| (checked before timing): " + ", ".join(diffs) + ".")
    e, b = med(d, "gemm.small64.ember.us"), med(d, "gemm.small64.blas.us")
    if e is not None:
        out.append("")
        out.append(f"Executor overhead, 64×64 matmul (no goal): Ember run {fmt(e, 2)} µs, bare cblas_sgemm "
                   f"{fmt(b, 2)} µs per call → {fmt(None if b is None else e - b, 2)} µs per run on top of the "
                   f"product (median of per-batch means over 2000 calls).")
    out.append("")


def tiles(d, out):
    if not has(d, "tiles."):
        return
    out.append("### 1b. What tiling costs OpenBLAS (bench/gemm_tiles.c, 1 thread)")
    out.append("")
    out.append("The same square product computed tile after tile with single-threaded cblas_sgemm, one call per tile "
               "(as Ember's matmul does, with its 128x256-ish tiles marked `(ember)`), against one call for the whole "
               "matrix. Median GFLOP/s; in brackets the ratio to the whole-matrix call.")
    out.append("")
    for n in (1024, 2048, 4096):
        keys = [k for k in d if k.startswith(f"tiles.{n}.") and k.endswith(".gflops")]
        if not keys:
            continue
        whole = med(d, f"tiles.{n}.{n}x{n}.gflops")
        cells = []
        for k in keys:
            shape = k[len(f"tiles.{n}."):-len(".gflops")]
            m = med(d, k)
            cells.append(f"{shape}: {fmt(m)} ({fmt(ratio(m, whole), 2)})")
        out.append(f"- n = {n}: " + "; ".join(cells))
    out.append("")


def mlp(d, out):
    if not has(d, "mlp."):
        return
    out.append("### 2. MLP training step: Ember vs PyTorch")
    out.append("")
    out.append("MLP 784-512-512-10 (ReLU), loss = mean over the batch of cross_entropy_with_softmax with sparse "
               "labels; one step = forward + backward (gradients of all 6 parameters) + SGD (lr 0.01). Ember: "
               "one executor run producing the loss and the 6 gradients, then p -= lr·g written into each "
               "parameter's storage tensor (`em_parameter_value`), an OpenMP loop in the benchmark. PyTorch: "
               "nn.Linear ×3, F.cross_entropy, loss.backward(), torch.optim.SGD, same thread count. "
               "Random data, 8 batches cycled. Goals: Ember/PyTorch >= 1.2 (batch 64), >= 1.0 (batch 256).")
    out.append("")
    out.append("| batch | Ember samples/s | PyTorch samples/s | Ember/PyTorch (pooled medians) | "
               "Ember/PyTorch (median of per-round ratios) | goal | per-round ratios | Ember range | PyTorch range |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for batch, goal in ((64, 1.2), (256, 1.0)):
        e, t = med(d, f"mlp.{batch}.ember.sps"), med(d, f"mlp.{batch}.torch.sps")
        if e is None and t is None:
            continue
        pr, n = paired(d, f"mlp.{batch}.ember.sps", f"mlp.{batch}.torch.sps")
        out.append(f"| {batch} | {fmt(e)} | {fmt(t) if t is not None else 'PyTorch unavailable'} | {fmt(ratio(e, t), 3)} | "
                   f"{fmt(pr, 3)} (n={n}) | {goal_text(pr, goal)} | "
                   f"{round_ratios(d, f'mlp.{batch}.ember.sps', f'mlp.{batch}.torch.sps')} | {spread(d, f'mlp.{batch}.ember.sps')} | "
                   f"{spread(d, f'mlp.{batch}.torch.sps')} |")
    checks = []
    for batch in (64, 256):
        for who in ("ember", "torch"):
            a, b = first(d, f"mlp.{batch}.{who}.check_loss_first", None), first(d, f"mlp.{batch}.{who}.check_loss_last", None)
            if a is not None:
                checks.append(f"{who} batch {batch}: {a} → {b}")
    if checks:
        out.append("")
        out.append("Training check (30 SGD steps, lr 0.1, on one fixed batch; the loss must fall): " + "; ".join(checks) + ".")
    out.append("")


def profile(d, out):
    batches = [b for b in (64, 256) if f"prof.{b}.exec_us" in d]
    if not batches:
        return
    out.append("### 2b. Where Ember's MLP step spends its time (bench/mlp_profile.c)")
    out.append("")
    out.append("Each step of the executor's plan replayed alone (same op, attributes, shapes and input values, "
               "one graph per step, median µs per run). `executor` = whole run; `sum of steps` = the replays "
               "added up (each replay includes one executor run of fixed cost `fixed`); `sgd` = the update loop.")
    for b in batches:
        ex, ss = med(d, f"prof.{b}.exec_us"), med(d, f"prof.{b}.steps_sum_us")
        out.append("")
        out.append(f"**batch {b}**: executor {fmt(ex)} µs, sum of steps {fmt(ss)} µs, "
                   f"fixed {fmt(med(d, f'prof.{b}.exec_fixed_us'), 2)} µs/run, sgd {fmt(med(d, f'prof.{b}.sgd_us'))} µs.")
        out.append("")
        out.append("| op | steps | µs | share of sum |")
        out.append("| --- | --- | --- | --- |")
        rows = []
        for v in d.get(f"prof.{b}.op", []):
            name, count, us = v.split("|")
            rows.append((float(us), name, count))
        for us, name, count in sorted(rows, reverse=True):
            out.append(f"| {name} | {count} | {fmt(us)} | {fmt(100 * us / ss if ss else None)} % |")
        out.append("")
        out.append("<details><summary>per step</summary>")
        out.append("")
        out.append("| step | op | attributes | inputs | µs |")
        out.append("| --- | --- | --- | --- | --- |")
        for v in d.get(f"prof.{b}.step", []):
            s, op, attrs, ins, us = v.split("|")
            out.append(f"| {s} | {op} | {attrs} | {ins} | {us} |")
        out.append("")
        out.append("</details>")
    out.append("")


def conv(d, out):
    if not has(d, "conv."):
        return
    out.append("### 4. Convolution, a ResNet layer")
    out.append("")
    out.append("3×3 convolution 64 → 64 channels on x [8,64,56,56] f32, padding 1, no bias (no goal). Forward alone, "
               "and forward with the gradients for x and w. Ember: executor runs of `convolution` (and `em_gradients` "
               "of its sum); PyTorch: `nn.Conv2d(64, 64, 3, padding=1, bias=False)` (oneDNN). ms per call.")
    out.append("")
    out.append("| | Ember ms | PyTorch ms | PyTorch time / Ember time (median of per-round ratios; above 1: Ember faster) |")
    out.append("| --- | --- | --- | --- |")
    for name, label in (("fwd", "forward"), ("fwdbwd", "forward + backward")):
        e, t = med(d, f"conv.{name}.ember.ms"), med(d, f"conv.{name}.torch.ms")
        r, n = paired(d, f"conv.{name}.torch.ms", f"conv.{name}.ember.ms")
        out.append(f"| {label} | {fmt(e, 2)} ({spread(d, f'conv.{name}.ember.ms', 2)}) | "
                   f"{fmt(t, 2) if t is not None else 'PyTorch unavailable'} | {fmt(r, 2)} (n={n}: "
                   f"{round_ratios(d, f'conv.{name}.torch.ms', f'conv.{name}.ember.ms')}) |")
    out.append("")
    out.append(f"Ember's forward matched a double-precision loop on 2000 sampled outputs to {first(d, 'conv.ember.maxabsdiff')}.")
    out.append("")


def ms_side_by_side(d, key, out, extra_rows=()):
    """The Ember / PyTorch table of a per-call time (ms) under `key`, and the
    median of the per-round ratios; returns Ember's median."""
    e, t = med(d, f"{key}.ember.ms"), med(d, f"{key}.torch.ms")
    out.append("| | ms per call | range |")
    out.append("| --- | --- | --- |")
    out.append(f"| Ember | {fmt(e, 3)} | {spread(d, f'{key}.ember.ms', 3)} |")
    out.append(f"| PyTorch | {fmt(t, 3) if t is not None else 'PyTorch unavailable'} | {spread(d, f'{key}.torch.ms', 3)} |")
    out.extend(extra_rows)
    r, n = paired(d, f"{key}.torch.ms", f"{key}.ember.ms")
    out.append("")
    out.append(f"PyTorch time / Ember time = {fmt(r, 2)} (median of {n} per-round ratios: "
               f"{round_ratios(d, f'{key}.torch.ms', f'{key}.ember.ms')}; above 1: Ember faster).")
    return e


def softmax_ce(d, out):
    if not has(d, "softmax_ce."):
        return
    out.append("### 5. Softmax cross entropy, large vocabulary")
    out.append("")
    out.append("Logits [64, 32000] f32, sparse labels, cross entropy averaged over the batch, forward and backward to "
               "the logits (no goal). Ember: one executor run of `reduce_mean(cross_entropy_with_softmax(x, l))` and its "
               "gradient; PyTorch: `F.cross_entropy(x, labels).backward()`. ms per call.")
    out.append("")
    ms_side_by_side(d, "softmax_ce", out)
    out[-1] += (f" Ember's gradient matched a double-precision reference to "
                f"{first(d, 'softmax_ce.ember.maxabsdiff')}.")
    out.append("")


def training(d, out):
    if not has(d, "train."):
        return
    out.append("### 6. Training steps with a learner (issue 11): LeNet and the MLP")
    out.append("")
    out.append("bench/bench_lenet.c vs bench/lenet_torch.py, batch 64, the first 16 minibatches of Fashion-MNIST "
               f"(data: Ember {first(d, 'train.data.ember')}, PyTorch {first(d, 'train.data.torch')}). One step: "
               "forward, loss = mean cross entropy with softmax, backward, and SGD with momentum 0.9 (lr 0.01). "
               "Ember: the model zoo's em_model_lenet / em_model_mlp (hidden 512, 512), em_gradients and the "
               "momentum learner attached to the graph, one executor run per step (what `ember train` runs); "
               "PyTorch: the same layers in nn.Sequential, F.cross_entropy, backward(), "
               "torch.optim.SGD(momentum=0.9). ms per step; the ratio is PyTorch's time over Ember's (Ember's "
               "throughput relative to PyTorch's). Goals: LeNet >= 1.0, MLP >= 1.2.")
    out.append("")
    out.append("| model | Ember ms/step | PyTorch ms/step | PyTorch/Ember (pooled medians) | "
               "PyTorch/Ember (median of per-round ratios) | goal | per-round ratios | Ember range | PyTorch range |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, label, goal in (("lenet", "LeNet", 1.0), ("mlp", "MLP 784-512-512-10", 1.2)):
        ek, tk = f"train.{model}.64.ember.ms", f"train.{model}.64.torch.ms"
        e, t = med(d, ek), med(d, tk)
        if e is None and t is None:
            continue
        pr, n = paired(d, tk, ek)
        out.append(f"| {label} | {fmt(e, 2)} | {fmt(t, 2) if t is not None else 'PyTorch unavailable'} | "
                   f"{fmt(ratio(t, e), 3)} | {fmt(pr, 3)} (n={n}) | {goal_text(pr, goal)} | {round_ratios(d, tk, ek)} | "
                   f"{spread(d, ek, 2)} | {spread(d, tk, 2)} |")
    checks = []
    for model in ("lenet", "mlp"):
        for who in ("ember", "torch"):
            a = first(d, f"train.{model}.64.{who}.check_loss_first", None)
            b = first(d, f"train.{model}.64.{who}.check_loss_last", None)
            if a is not None:
                checks.append(f"{who} {model}: {a} → {b}")
    if checks:
        out.append("")
        out.append("Training check (30 momentum steps on one minibatch; the loss must fall): " + "; ".join(checks) + ".")
    out.append("")


def groupconv(d, out):
    if not has(d, "groupconv."):
        return
    out.append("### 3. Group (depthwise) convolution, CNTK 2.6's case")
    out.append("")
    out.append("x [1,32,128,128], w [32,1,5,5], 32 groups, stride 1, padding 2 (same), no bias, forward only. "
               "Ember: one executor run of `convolution` (group 32, pads 2,2,2,2); PyTorch: "
               "`F.conv2d(x, w, padding=2, groups=32)` under no_grad. ms per call.")
    out.append("")
    e = ms_side_by_side(d, "groupconv", out,
                        [f"| CNTK 2.6 (its own machine, not measured here) | {CNTK_GROUPCONV_MS} | — |"])
    out[-1] += (f" CNTK's published 9.963 ms / Ember's time = {fmt(ratio(CNTK_GROUPCONV_MS, e), 2)} (different "
                f"machines and CPUs: indicative only). Ember's output matched a double-precision reference loop to "
                f"{first(d, 'groupconv.ember.maxabsdiff')}.")
    out.append("")
    out.append("Source of 9.963 ms: " + CNTK_SOURCE + ".")
    out.append("")


TAG_TITLES = {
    "passive": "OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep at once)",
    "spin": "libgomp's default wait policy (idle OpenMP threads spin first)",
}


def split_tags(d):
    """{tag: data with the tag stripped from the keys} for each wait policy present."""
    parts = OrderedDict()
    for tag in TAG_TITLES:
        sub = OrderedDict((k[len(tag) + 1:], v) for k, v in d.items() if k.startswith(tag + "."))
        if sub:
            parts[tag] = sub
    return parts


def summary(parts, out):
    out.append("## Summary")
    out.append("")
    tags = list(parts)
    out.append("| measure | goal | " + " | ".join(TAG_TITLES[t].split(" (")[0] for t in tags) + " |")
    out.append("| --- | --- | " + " | ".join("---" for _ in tags) + " |")
    rows = [(f"GEMM {n}: Ember/OpenBLAS", 0.95, f"gemm.{n}.ember.gflops", f"gemm.{n}.blas.gflops", False)
            for n in (1024, 2048, 4096)]
    rows += [("MLP batch 64: Ember/PyTorch samples/s", 1.2, "mlp.64.ember.sps", "mlp.64.torch.sps", False),
             ("MLP batch 256: Ember/PyTorch samples/s", 1.0, "mlp.256.ember.sps", "mlp.256.torch.sps", False),
             ("group conv: PyTorch ms / Ember ms", None, "groupconv.torch.ms", "groupconv.ember.ms", False),
             ("conv 3x3 64->64 fwd: PyTorch ms / Ember ms", None, "conv.fwd.torch.ms", "conv.fwd.ember.ms", False),
             ("conv 3x3 64->64 fwd+bwd: PyTorch ms / Ember ms", None, "conv.fwdbwd.torch.ms", "conv.fwdbwd.ember.ms", False),
             ("softmax CE [64,32000]: PyTorch ms / Ember ms", None, "softmax_ce.torch.ms", "softmax_ce.ember.ms", False),
             ("LeNet training step, batch 64: PyTorch ms / Ember ms", 1.0, "train.lenet.64.torch.ms",
              "train.lenet.64.ember.ms", False),
             ("MLP 784-512-512-10 step + momentum, batch 64: PyTorch ms / Ember ms", 1.2, "train.mlp.64.torch.ms",
              "train.mlp.64.ember.ms", False)]
    for label, goal, num, den, _ in rows:
        if not any(has(parts[t], num) or has(parts[t], den) for t in tags):
            continue  # not run (--only)
        cells = []
        for t in tags:
            r = paired(parts[t], num, den)[0]
            if r is None:
                r = ratio(med(parts[t], num), med(parts[t], den))
            mark = "" if r is None or goal is None else (" ✓" if r >= goal else " ✗")
            b = best_ratio(parts[t], num, den, higher_better=not num.endswith(".ms"))
            cells.append(fmt(r, 3) + mark + f" (best-of: {fmt(b, 3)})")
        out.append(f"| {label} | {'>= ' + str(goal) if goal else '—'} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("Each: the median over rounds of the per-round ratio of medians (GEMM: Ember and OpenBLAS alternate "
               "inside one process; MLP and group convolution: Ember and PyTorch processes back to back, the first "
               "alternating). ✓ goal met, ✗ not met. In brackets: the ratio of the best samples (highest rate, "
               "lowest time) of each side over the whole run — the least disturbed runs, a check on the medians when "
               "the machine is busy.")
    out.append("")


def raw(d, out):
    out.append("## Raw samples")
    out.append("")
    out.append("```")
    for k, vs in d.items():
        if ".prof." in k or k.startswith(("meta.", "torch.config")) or k.endswith((".openblas.config", ".openblas.core")):
            continue
        out.append(f"{k}: {' '.join(vs)}")
    out.append("```")
    out.append("")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: report.py RAW_FILE OUT_FILE")
    d = load(sys.argv[1])
    parts = split_tags(d)
    out = []
    header(d, out)
    summary(parts, out)
    for tag, sub in parts.items():
        out.append(f"## Under {TAG_TITLES[tag]}")
        out.append("")
        gemm(sub, out)
        tiles(sub, out)
        mlp(sub, out)
        profile(sub, out)
        groupconv(sub, out)
        conv(sub, out)
        softmax_ce(sub, out)
        training(sub, out)
    if "meta.notes" in d:
        out.append("## Notes")
        out.append("")
        for n in d["meta.notes"]:
            out.append(f"- {n}")
        out.append("")
    raw(d, out)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
