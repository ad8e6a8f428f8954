#!/usr/bin/env bash
# Runs the GPU benchmarks of issue 10 side by side (bench/bench_gpu.c and its
# PyTorch twin bench/gpu_torch.py) on one GPU and writes
# bench/results/gpu-<date>-<commit>.md with the ratios the issue asks for.
#   bash bench/run_gpu.sh [BUILD] [--quick] [--device N]
# BUILD (default build) holds lib/libember.a, or is an unpacked `make gpu-bundle`
# with bin/bench_gpu already built.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
build=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then build=$1; shift; fi
args=("$@")
bin=$build/bin/bench_gpu
if [ ! -x "$bin" ]; then
  mkdir -p "$build/bin"
  ${CC:-gcc} -std=c11 -O2 -Iinclude bench/bench_gpu.c "$build/lib/libember.a" -fopenmp -lelf -lzstd -llz4 \
    -lprotobuf-c -ldl -lpthread -lm -o "$bin" || exit 1
fi
export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" "${args[@]}" | tee "$tmp/ember.txt" || exit 1
python3 bench/gpu_torch.py "${args[@]}" | tee "$tmp/torch.txt"
date=$(date -u +%Y-%m-%d)
# A bundle names the commit it was built from; a checkout on a lent machine
# may carry a stale .git, so the bundle's word comes first.
commit=$(sed -n 's/.* from commit \([0-9a-f]*\).*/\1/p' "$build/BUNDLE.txt" 2>/dev/null)
[ -n "$commit" ] || commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
out=bench/results/gpu-$date-$commit.md
python3 - "$tmp/ember.txt" "$tmp/torch.txt" "$out" "$date" "$commit" <<'PY'
import sys
def read(path):
    r = {}
    for line in open(path):
        p = line.split(None, 2)
        if len(p) == 3 and p[0] == "R":
            r[p[1]] = p[2].strip()
    return r
e, t = read(sys.argv[1]), read(sys.argv[2])
out, date, commit = sys.argv[3:6]
def f(d, k):
    try: return float(d[k])
    except (KeyError, ValueError): return None
def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"
L = [f"# GPU benchmarks (issue 10)", "", f"- date: {date}", f"- GPU: {e.get('gpu', '?')} (CC {e.get('cc', '?')})",
     f"- driver CUDA version: {e.get('driver_cuda', '?')}", f"- commit: {commit}",
     f"- PyTorch: {t.get('torch_version', 'unavailable')}", "",
     "## Bandwidth over 256 MB (GB/s, read + write)", "", "| op | Ember | of Ember's d2d copy | PyTorch |", "|---|---|---|---|"]
copy = f(e, "bw_copy_gbs")
L.append(f"| d2d copy | {e.get('bw_copy_gbs', '-')} | 1.00 | {t.get('torch_bw_copy_gbs', '-')} |")
for op in ["relu", "exp", "add", "mul", "reduce_sum"]:
    L.append(f"| {op} | {e.get('bw_'+op+'_gbs', '-')} | {ratio(f(e, 'bw_'+op+'_gbs'), copy)} | {t.get('torch_bw_'+op+'_gbs', '-')} |")
L += ["", "## FP32 GEMM, no TF32 (TFLOP/s)", "", "| N | Ember | cuBLAS | Ember / cuBLAS | torch.matmul | Ember / torch |", "|---|---|---|---|---|---|"]
for n in [1024, 2048, 4096, 8192]:
    k = f"gemm_ember_{n}_tflops"
    if k not in e: continue
    L.append(f"| {n} | {e[k]} | {e.get(f'gemm_cublas_{n}_tflops', '-')} | {ratio(f(e, k), f(e, f'gemm_cublas_{n}_tflops'))} | "
             f"{t.get(f'torch_gemm_{n}_tflops', '-')} | {ratio(f(e, k), f(t, f'torch_gemm_{n}_tflops'))} |")
L += ["", "## Host cost per op (us, a chain of 256 tiny ops)", "",
      f"Ember {e.get('host_us_per_op', '-')}, PyTorch eager {t.get('torch_host_us_per_op', '-')}", "",
      "## MLP 784-512-512-10, loss + gradients (ms per step)", "",
      "| batch | Ember fast | Ember portable | portable / fast | PyTorch | Ember fast / PyTorch |", "|---|---|---|---|---|---|"]
for b in [64, 256]:
    fa, po, to = f(e, f"mlp_b{b}_fast_ms"), f(e, f"mlp_b{b}_portable_ms"), f(t, f"torch_mlp_b{b}_ms")
    show = lambda v: "-" if v is None else f"{v:.3f}"
    L.append(f"| {b} | {show(fa)} | {show(po)} | {ratio(po, fa)} | {show(to)} | {ratio(fa, to)} |")
open(out, "w").write("\n".join(L) + "\n")
print(f"\nwritten: {out}")
PY
