#!/usr/bin/env bash
# Runs Ember's CPU benchmarks (issue 4) side by side with their OpenBLAS and
# PyTorch twins and writes bench/results/cpu-<date>-<commit>.md (printed at
# the end). See bench/README.md.
#
#   bash bench/run.sh [--quick] [--threads N] [--rounds N] [--only LIST]
#                     [--omp-wait both|passive|default] [--no-make] [--no-install]
#
#   --quick       fewer repetitions, one round (result file gets a -quick suffix)
#   --threads N   threads for Ember, OpenBLAS and PyTorch (default: online CPUs)
#   --rounds N    Ember / PyTorch rounds, alternating which goes first (default 5)
#   --only LIST   comma-separated subset of gemm,mlp,profile,groupconv,conv,softmax_ce,lenet
#                 (profile: mlp_profile and gemm_tiles; lenet: bench_lenet, the training
#                 steps of LeNet and the MLP 784-512-512-10 with a momentum learner)
#   --omp-wait P  OpenMP wait policy, the same for Ember and PyTorch: both
#                 (default: every benchmark under each), passive
#                 (OMP_WAIT_POLICY=PASSIVE) or default (unset: libgomp spins)
#   --no-make     do not run `make lib` first (use build/lib/libember.a as is)
#   --no-install  do not try to install PyTorch when it is missing
#
# PyTorch: the first of python3, /usr/bin/python3 that imports torch is used,
# each tried also with the project's git-ignored .tools/torch on PYTHONPATH.
# When none does (and --no-install is not given) it tries Debian's
# python3-torch (apt-get, as root), then `pip install --target .tools/torch
# torch` with the extra arguments in $EMBER_BENCH_TORCH_PIP_ARGS when that is
# set (e.g. an --index-url of CPU-only wheels). If all fail the results say
# "PyTorch unavailable" and the Ember numbers are still recorded.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

ALL="gemm,mlp,profile,groupconv,conv,softmax_ce,lenet"
QUICK=0 THREADS=0 ROUNDS=5 ONLY=$ALL DO_MAKE=1 DO_INSTALL=1 OMP_WAIT=both
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --threads) THREADS=${2:?--threads needs a number}; shift ;;
    --rounds) ROUNDS=${2:?--rounds needs a number}; shift ;;
    --only) ONLY=${2:?--only needs a list}; shift ;;
    --omp-wait) OMP_WAIT=${2:?--omp-wait needs both, passive or default}; shift ;;
    --no-make) DO_MAKE=0 ;;
    --no-install) DO_INSTALL=0 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$QUICK" = 1 ] && ROUNDS=1
[ "$THREADS" -gt 0 ] 2>/dev/null || THREADS=$(nproc)
want() { case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# Every thread pool sees the same count.
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# libgomp's idle threads spin between parallel regions by default. On a
# shared 2-CPU machine a spinning thread holds a CPU its peer (or another
# process) needs, and a barrier may then wait a whole scheduler slice: under
# load, 2-thread training steps ran 5-15x slower than with 1 thread, for
# Ember and PyTorch alike, while on an idle machine spinning is a little
# faster. So every benchmark runs under both policies, tagged passive.* and
# spin.* in the raw lines.
case "$OMP_WAIT" in
  both) TAGS="passive spin" ;;
  passive) TAGS="passive" ;;
  default) TAGS="spin" ;;
  *) echo "run.sh: --omp-wait takes both, passive or default" >&2; exit 2 ;;
esac
unset OMP_WAIT_POLICY

OUTDIR="$ROOT/build/bench"
mkdir -p "$OUTDIR" "$ROOT/bench/results"
STAMP=$(date -u +%Y%m%d-%H%M%S)
RAW="$OUTDIR/raw-$STAMP.txt"
: >"$RAW"
meta() { printf 'R meta.%s %s\n' "$1" "$2" >>"$RAW"; }
note() { meta notes "$1"; echo "run.sh: $1" >&2; }

# --------------------------------------------------------------- build ---
if [ "$DO_MAKE" = 1 ]; then
  # Others may be mid-edit: a broken build is retried a few times.
  ok=0
  for try in 1 2 3 4 5; do
    if make -s lib >"$OUTDIR/make.log" 2>&1; then ok=1; break; fi
    echo "run.sh: make lib failed (try $try/5), retrying in 60 s; see $OUTDIR/make.log" >&2
    sleep 60
  done
  [ "$ok" = 1 ] || { tail -20 "$OUTDIR/make.log" >&2; echo "run.sh: make lib keeps failing" >&2; exit 1; }
fi
[ -f build/lib/libember.a ] || { echo "run.sh: build/lib/libember.a is missing (run make lib)" >&2; exit 1; }

CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fopenmp -Iinclude -Ibench"
# No -lopenblas: Ember loads OpenBLAS itself (ops/blas.c) and chooses its
# kernels; a program that links it gets the kernels OpenBLAS chose alone.
# bench_gemm and gemm_tiles call OpenBLAS directly, so they link it
# (BLAS_LIBS): in them Ember uses that copy as it is.
LDLIBS="build/lib/libember.a -lelf -lzstd -llz4 -lz -ljansson -lprotobuf-c -ldl -lpthread -lm"
BLAS_LIBS=-lopenblas
build_one() { # name [extra flags]
  local name=$1 libs=""; shift
  case $name in bench_gemm|gemm_tiles) libs=$BLAS_LIBS ;; esac
  # shellcheck disable=SC2086
  gcc $CFLAGS "$@" "bench/$name.c" -o "$OUTDIR/$name" $LDLIBS $libs || { echo "run.sh: building bench/$name.c failed" >&2; exit 1; }
}
build_one bench_gemm
build_one bench_mlp
build_one bench_groupconv
build_one bench_conv
build_one bench_softmax_ce
build_one mlp_profile -Iengine -Iruntime   # reads the engine's node layout
build_one gemm_tiles
build_one bench_lenet

# ------------------------------------------------------------- PyTorch ---
TORCH_DIR="$ROOT/.tools/torch"
find_torch_python() { # sets PY (and PYTHONPATH when torch is the one in .tools/torch)
  local py
  PY=""
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    if "$py" -c "import torch" >/dev/null 2>&1; then
      PY=$(command -v "$py"); return 0
    fi
    if [ -d "$TORCH_DIR" ] && PYTHONPATH="$TORCH_DIR" "$py" -c "import torch" >/dev/null 2>&1; then
      export PYTHONPATH="$TORCH_DIR${PYTHONPATH:+:$PYTHONPATH}"
      PY=$(command -v "$py"); return 0
    fi
  done
  return 1
}
find_torch_python
if [ -z "$PY" ] && [ "$DO_INSTALL" = 1 ]; then
  echo "run.sh: PyTorch not found; trying to install it" >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch ||
      { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch; }; } >"$OUTDIR/torch-install.log" 2>&1
  fi
  find_torch_python
  if [ -z "$PY" ] && [ -n "${EMBER_BENCH_TORCH_PIP_ARGS:-}" ]; then
    # shellcheck disable=SC2086
    python3 -m pip install --target "$TORCH_DIR" torch $EMBER_BENCH_TORCH_PIP_ARGS >>"$OUTDIR/torch-install.log" 2>&1
    find_torch_python
  fi
fi
if [ -z "$PY" ]; then
  note "PyTorch unavailable: no python3 imports torch (install log: build/bench/torch-install.log)"
  PY=python3 # mlp_torch.py then records torch.unavailable itself
fi

# ---------------------------------------------------------------- meta ---
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
DATE=$(date -u +%Y-%m-%d)
meta date "$(date -u '+%Y-%m-%d %H:%M:%S')"
meta commit "$COMMIT"
if [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null | head -1)" ]; then
  meta dirty "uncommitted changes present (numbers are for the working tree, not exactly $COMMIT)"
else
  meta dirty "clean"
fi
meta cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(lscpu | sed -n 's/^Flags:.*\(avx512f\).*/AVX-512/p' | head -1)"
meta cores "$(nproc)"
meta mem "$(free -h | awk '/^Mem:/ {print $2}')"
meta threads "$THREADS"
meta omp_wait "$TAGS"
meta cc "$(gcc --version | head -1)"
# The OpenBLAS the benchmarks actually load, and its Debian package.
BLAS_SO=$(readlink -f "$(ldd "$OUTDIR/bench_gemm" | awk '/libopenblas/ {print $3; exit}')" 2>/dev/null)
BLAS_PKG=$(dpkg -S "$BLAS_SO" 2>/dev/null | head -1 | cut -d: -f1)
meta openblas_pkg "$BLAS_SO${BLAS_PKG:+ ($BLAS_PKG $(dpkg-query -W -f='${Version}' "$BLAS_PKG" 2>/dev/null))}"
meta python "$PY ($("$PY" --version 2>&1))"
meta args "$ARGS"
meta load_start "$(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" bench/mlp_torch.py info --threads "$THREADS" >>"$RAW" 2>&1

QFLAG=""
[ "$QUICK" = 1 ] && QFLAG="--quick"
run() { # label command...
  echo "run.sh: $1" >&2
  "${@:2}" >>"$RAW" 2>"$OUTDIR/last.err" || note "$1 failed: $(tail -3 "$OUTDIR/last.err" | tr '\n' ' ')"
}

# ----------------------------------------------------------- benchmarks ---
tagged() { # tag command...: runs it under that wait policy (tag passive.* or
  # spin.*, optionally followed by a round r<N>.), tags its lines "R tag.key value"
  local tag=$1; shift
  if [ "${tag%%.*}" = passive ]; then
    (export OMP_WAIT_POLICY=PASSIVE; "$@") | sed "s/^R /R $tag./"
  else
    (unset OMP_WAIT_POLICY; "$@") | sed "s/^R /R $tag./"
  fi
}
pair() { # round name "ember command" "torch command": alternates who goes first
  local r=$1 name=$2 e=$3 t=$4 tag
  for tag in $TAGS; do
    # shellcheck disable=SC2086
    if [ $((r % 2)) = 0 ]; then
      run "$name round $((r + 1)), $tag: Ember" tagged "$tag.r$r" $e
      run "$name round $((r + 1)), $tag: PyTorch" tagged "$tag.r$r" $t
    else
      run "$name round $((r + 1)), $tag: PyTorch" tagged "$tag.r$r" $t
      run "$name round $((r + 1)), $tag: Ember" tagged "$tag.r$r" $e
    fi
  done
}
COMMON="--threads $THREADS $QFLAG"
for ((r = 0; r < ROUNDS; r++)); do
  if want gemm; then
    # shellcheck disable=SC2086
    for tag in $TAGS; do run "gemm round $((r + 1)), $tag" tagged "$tag.r$r" "$OUTDIR/bench_gemm" $COMMON; done
  fi
  want mlp && pair "$r" mlp "$OUTDIR/bench_mlp $COMMON" "$PY bench/mlp_torch.py mlp $COMMON"
  want groupconv && pair "$r" groupconv "$OUTDIR/bench_groupconv $COMMON" "$PY bench/mlp_torch.py groupconv $COMMON"
  want conv && pair "$r" conv "$OUTDIR/bench_conv $COMMON" "$PY bench/mlp_torch.py conv $COMMON"
  want softmax_ce && pair "$r" softmax_ce "$OUTDIR/bench_softmax_ce $COMMON" "$PY bench/mlp_torch.py softmax_ce $COMMON"
  want lenet && pair "$r" lenet "$OUTDIR/bench_lenet $COMMON" "$PY bench/lenet_torch.py $COMMON"
done
if want profile; then
  # shellcheck disable=SC2086
  for tag in $TAGS; do run "mlp per-op profile, $tag" tagged "$tag" "$OUTDIR/mlp_profile" $COMMON; done
  # One thread, no OpenMP: reported with the first policy's results.
  # shellcheck disable=SC2086
  run "gemm tiling cost (1 thread)" tagged "${TAGS%% *}" "$OUTDIR/gemm_tiles" $COMMON
fi
meta load_end "$(cut -d' ' -f1-3 /proc/loadavg)"

# --------------------------------------------------------------- report ---
SUFFIX=""
[ "$QUICK" = 1 ] && SUFFIX="-quick"
[ "$ONLY" != "$ALL" ] && SUFFIX="$SUFFIX-partial"
[ "$ONLY" = lenet ] && SUFFIX="${SUFFIX%-partial}-lenet"
[ "$OMP_WAIT" != both ] && SUFFIX="$SUFFIX-ompwait-$OMP_WAIT"
RESULT="bench/results/cpu-$DATE-$COMMIT$SUFFIX.md"
python3 bench/report.py "$RAW" "$RESULT" || /usr/bin/python3 bench/report.py "$RAW" "$RESULT" || exit 1
cat "$RESULT"
echo
echo "run.sh: wrote $RESULT (raw lines: ${RAW#"$ROOT"/})" >&2
