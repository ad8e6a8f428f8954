#!/usr/bin/env bash
# Runs the fast-mode GPU benchmarks of issue 13 side by side (bench/bench_fast.c
# and its PyTorch twin bench/fast_torch.py) on one GPU and writes
# bench/results/fast-<date>-<commit>.md with the ratios (bench/fast_report.py).
#   bash bench/run_fast.sh [BUILD] [--quick] [--device N] [--only gemm,conv,train,start]
#                          [--rounds R] [--dry-run]
# BUILD (default build) holds lib/libember.a, or is an unpacked `make gpu-bundle`
# with bin/bench_fast already built. Each round runs Ember and PyTorch as
# separate processes back to back, the first alternating.
#
# --dry-run (implied when EMBER_LIBCUDA names a libcuda, i.e. the test double):
# toy sizes (bench_fast --tiny; PyTorch on the CPU when it has no GPU), to
# check that every path and the report run. Its file goes to
# BUILD/bench/fast-dryrun-*.md, never to bench/results/: the doubles execute
# kernels on the host and their timings are not measurements.
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
build=build
orig_args="$*"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then build=$1; shift; fi
ember_args=() torch_args=() rounds=1 dry=0 suffix=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) ember_args+=(--quick) torch_args+=(--quick) suffix=$suffix-quick ;;
    --device | --only)
      [ $# -ge 2 ] || { echo "run_fast: $1 needs a value" >&2; exit 2; }
      ember_args+=("$1" "$2") torch_args+=("$1" "$2")
      [ "$1" = --only ] && suffix=$suffix-partial
      shift ;;
    --rounds) rounds=${2:?}; shift ;;
    --dry-run) dry=1 ;;
    *) echo "usage: run_fast.sh [BUILD] [--quick] [--device N] [--only LIST] [--rounds R] [--dry-run]" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "${EMBER_LIBCUDA:-}" ] && [ $dry = 0 ]; then
  echo "run_fast: EMBER_LIBCUDA is set ($EMBER_LIBCUDA): a dry run, not a measurement" >&2
  dry=1
fi
[ $dry = 1 ] && ember_args+=(--tiny) torch_args+=(--tiny --dry-cpu)

bin=$build/bin/bench_fast
if [ ! -x "$bin" ]; then
  mkdir -p "$build/bin"
  ${CC:-gcc} -std=c11 -O2 -Iinclude bench/bench_fast.c "$build/lib/libember.a" -fopenmp -lelf -lzstd -llz4 -lz \
    -ljansson -lprotobuf-c -ldl -lpthread -lm -o "$bin" || exit 1
fi

# PyTorch: the first python3 that imports it (a lent GPU machine's python3 has
# it; here, .tools/torch on PYTHONPATH).
py=""
for p in python3 /usr/bin/python3; do
  for extra in "" "$ROOT/.tools/torch"; do
    if PYTHONPATH=$extra${PYTHONPATH:+:$PYTHONPATH} "$p" -c "import torch" 2>/dev/null; then
      py=$p
      [ -n "$extra" ] && export PYTHONPATH=$extra${PYTHONPATH:+:$PYTHONPATH}
      break 2
    fi
  done
done
[ -n "$py" ] || py=python3 # fast_torch.py then says "R torch unavailable"

# Ember's cuBLAS and cuDNN: where PyTorch's pip packages carry them (the lent
# machines have no system cuDNN), put their folders first on the loader path,
# so both sides call the same libraries; bench_fast reports what it loaded.
libdirs=""
if [ -z "${EMBER_LIBCUBLAS:-}${EMBER_LIBCUDNN:-}" ]; then
  libdirs=$("$py" - 2>/dev/null <<'PY'
import glob, os
import nvidia  # the namespace of NVIDIA's pip packages: nvidia/cu13/lib (CUDA 13 wheels), nvidia/cudnn/lib, ...
dirs = []
for base in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(base, "*", "lib"))):
        if (glob.glob(os.path.join(d, "libcublas.so*")) or glob.glob(os.path.join(d, "libcudnn.so*"))) and d not in dirs:
            dirs.append(d)
print(":".join(dirs))
PY
)
fi
export LD_LIBRARY_PATH=$build/lib${libdirs:+:$libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
status=0
for r in $(seq 1 "$rounds"); do
  run_ember() { "$bin" "${ember_args[@]}" | tee "$tmp/ember.$r.txt" || { echo "run_fast: bench_fast failed (round $r)" >&2; status=1; }; }
  run_torch() { PYTHONUNBUFFERED=1 "$py" bench/fast_torch.py "${torch_args[@]}" | tee "$tmp/torch.$r.txt" ||
    { echo "run_fast: fast_torch.py failed (round $r)" >&2; status=1; }; }
  if [ $((r % 2)) = 1 ]; then run_ember; run_torch; else run_torch; run_ember; fi
  files+=("$tmp/ember.$r.txt" "$tmp/torch.$r.txt")
done

date=$(date -u +%Y-%m-%d)
# A bundle names the commit it was built from; a checkout on a lent machine
# may carry a stale .git, so the bundle's word comes first.
commit=$(sed -n 's/.* from commit \([0-9a-f]*\).*/\1/p' "$build/BUNDLE.txt" 2>/dev/null)
[ -n "$commit" ] || commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ $dry = 1 ]; then
  mkdir -p "$build/bench"
  out=$build/bench/fast-dryrun-$date-$commit$suffix.md
else
  out=bench/results/fast-$date-$commit$suffix.md
fi
tree=""
if [ ! -f "$build/BUNDLE.txt" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null | head -1)" ]; then
  tree="; the working tree had uncommitted changes"
fi
info="host: $(uname -n), $(getconf _NPROCESSORS_ONLN) CPUs; command: bash bench/run_fast.sh $orig_args$tree
Ember's loader path additions for cuBLAS/cuDNN: ${libdirs:-none}${EMBER_LIBCUBLAS:+; EMBER_LIBCUBLAS=$EMBER_LIBCUBLAS}${EMBER_LIBCUDNN:+; EMBER_LIBCUDNN=$EMBER_LIBCUDNN}${EMBER_LIBCUDA:+; EMBER_LIBCUDA=$EMBER_LIBCUDA}"
"$py" bench/fast_report.py "$out" "$date" "$commit" "$dry" "$info" "${files[@]}" || exit 1
exit $status
