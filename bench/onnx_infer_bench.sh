#!/usr/bin/env bash
# Issue 12's inference benchmark: Ember vs onnxruntime on ResNet-18,
# MobileNet-V2, SqueezeNet 1.1, EfficientNet-B0 and a transformer encoder
# (bench/onnx_infer_models.py exports them with torch), batch 1, on 1 and 2
# threads. Writes bench/results/cpu-<date>-<commit>-onnx-infer.md. See
# bench/README.md.
#
#   bash bench/onnx_infer_bench.sh [--rounds R] [--runs N] [--threads "1 2"]
#        [--models a,b] [--base DIR] [--no-make] [--omp-wait passive|default]
#        [--mode separate|paired|both]
#
#   --rounds R   rounds (default 5); in each, every model and thread count runs
#                Ember (and the --base build) and onnxruntime as separate
#                processes back to back, the first alternating round by round
#   --runs N     timed runs per process after 3 warm-up runs (default 10); a
#                round's time is the median of its runs
#   --threads L  thread counts (default "1 2"): OMP_NUM_THREADS for Ember,
#                intra_op_num_threads for onnxruntime
#   --base DIR   also time the libember.a of another tree (DIR/build/lib),
#                e.g. a copy at an older commit: "before" beside "after"
#   --no-make    use build/lib/libember.a as it is
#   --omp-wait   OMP_WAIT_POLICY for Ember (default passive: see README)
#   --mode M     separate: the processes above; paired: per round, model and
#                thread count one process running Ember (libember.so through
#                ctypes) and onnxruntime alternately run by run (2 x RUNS
#                runs), so each pair sees the same moment of a noisy machine;
#                both (default): both ways
#
# Needs torch (export, once: the models stay in build/bench/onnx_infer) and
# onnxruntime + numpy: PYTHONPATH gets .tools/torch and .tools/onnxpy.
# The goal is Ember time / onnxruntime time <= 1.0 per model and thread count,
# judged on the median over rounds of the per-round ratio.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

ROUNDS=5 RUNS=10 THREADS="1 2" MODELS="resnet18,mobilenet_v2,squeezenet1_1,efficientnet_b0,encoder"
BASE="" DO_MAKE=1 OMP_WAIT=passive MODE=both
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift ;;
    --runs) RUNS=${2:?}; shift ;;
    --threads) THREADS=${2:?}; shift ;;
    --models) MODELS=${2:?}; shift ;;
    --base) BASE=${2:?}; shift ;;
    --no-make) DO_MAKE=0 ;;
    --omp-wait) OMP_WAIT=${2:?}; shift ;;
    --mode) MODE=${2:?}; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "onnx_infer_bench.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

export PYTHONPATH="$ROOT/.tools/torch:$ROOT/.tools/onnxpy${PYTHONPATH:+:$PYTHONPATH}"
PY=python3
OUT="$ROOT/build/bench"
DIR="$OUT/onnx_infer"
mkdir -p "$DIR" "$ROOT/bench/results"
STAMP=$(date -u +%Y%m%d-%H%M%S)
RAW="$OUT/raw-onnx-infer-$STAMP.txt"
: >"$RAW"
meta() { printf 'R meta.%s %s\n' "$1" "$2" >>"$RAW"; }

if [ "$DO_MAKE" = 1 ]; then
  make -s lib >"$OUT/make.log" 2>&1 || { tail -20 "$OUT/make.log" >&2; exit 1; }
fi
CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fopenmp -Iinclude -Ibench"
LIBS="-lelf -lzstd -llz4 -lz -ljansson -lprotobuf-c -ldl -lpthread -lm"
# shellcheck disable=SC2086
gcc $CFLAGS bench/bench_onnx_infer.c -o "$OUT/bench_onnx_infer" build/lib/libember.a $LIBS || exit 1
SIDES="ember"
if [ -n "$BASE" ]; then
  # shellcheck disable=SC2086
  gcc $CFLAGS bench/bench_onnx_infer.c -o "$OUT/bench_onnx_infer_base" "$BASE/build/lib/libember.a" $LIBS || exit 1
  SIDES="ember base"
fi

for m in ${MODELS//,/ }; do
  [ -f "$DIR/$m.onnx" ] || { $PY bench/onnx_infer_models.py export "$DIR" || exit 1; break; }
done

if git rev-parse --git-dir >/dev/null 2>&1; then
  commit=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- . ':!bench/results' || commit="$commit-dirty"
else # a copy of the tree outside git: the commit it was taken from, if recorded
  commit=$(cat .commit 2>/dev/null || echo unknown)
fi
meta commit "$commit"
meta date "$(date -u '+%Y-%m-%d %H:%M UTC')"
meta cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
meta nproc "$(nproc)"
meta load_before "$(cut -d' ' -f1-3 /proc/loadavg)"
meta ort "$($PY -c 'import onnxruntime as r; print(r.__version__)')"
meta torch "$($PY -c 'import torch; print(torch.__version__)')"
meta cc "$(gcc --version | head -1)"
meta openblas "$(dpkg-query -W -f='${Package} ${Version}' 'libopenblas0*' 2>/dev/null | head -1)"
# Which OpenBLAS kernels Ember runs: the user's OPENBLAS_CORETYPE, or Ember's
# choice where it is unset (ops/blas.c); onnxruntime does not use OpenBLAS.
meta openblas_coretype "${OPENBLAS_CORETYPE:-unset (Ember chooses, ops/blas.c)}"
meta rounds "$ROUNDS"
meta runs "$RUNS"
meta omp_wait "$OMP_WAIT"
meta mode "$MODE"
[ -n "$BASE" ] && meta base "$(cat "$BASE/.commit" 2>/dev/null || git -C "$BASE" rev-parse --short HEAD 2>/dev/null || echo "$BASE")"

run_side() { # side model threads round
  local side=$1 m=$2 t=$3 r=$4 shape
  shape=$(tr ' ' ',' <"$DIR/$m.shape" | tr -d '\n')
  case "$side" in
    ort) OMP_NUM_THREADS=$t $PY bench/onnx_infer_models.py ort "$DIR" "$m" "$t" "$RUNS" ;;
    ember) OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=$OMP_WAIT \
      "$OUT/bench_onnx_infer" "$DIR/$m.onnx" "$DIR/$m.in" "$shape" "$RUNS" "$m.t$t" "$DIR/$m.ember.out" ;;
    base) OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=$OMP_WAIT \
      "$OUT/bench_onnx_infer_base" "$DIR/$m.onnx" "$DIR/$m.in" "$shape" "$RUNS" "$m.t$t" "$DIR/$m.base.out" |
      sed 's/^R ember/R base/' ;;
  esac | sed "s/^R /R r$r./" >>"$RAW"
}

run_pair() { # side model threads round
  local side=$1 m=$2 t=$3 r=$4 lib="$ROOT/build/lib/libember.so"
  [ "$side" = base ] && lib="$BASE/build/lib/libember.so"
  OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=$OMP_WAIT \
    $PY bench/onnx_infer_models.py pair "$DIR" "$m" "$t" "$((2 * RUNS))" "$lib" "$side" | sed "s/^R /R r$r./" >>"$RAW"
}

for r in $(seq 1 "$ROUNDS"); do
  for t in $THREADS; do
    for m in ${MODELS//,/ }; do
      if [ "$MODE" != paired ]; then
        if [ $((r % 2)) = 1 ]; then order="$SIDES ort"; else order="ort $SIDES"; fi
        for side in $order; do run_side "$side" "$m" "$t" "$r" || { echo "failed: $side $m t$t" >&2; exit 1; }; done
      fi
      if [ "$MODE" != separate ]; then
        for side in $SIDES; do run_pair "$side" "$m" "$t" "$r" || { echo "failed: pair $side $m t$t" >&2; exit 1; }; done
      fi
    done
  done
  echo "onnx_infer_bench.sh: round $r of $ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
for m in ${MODELS//,/ }; do
  $PY bench/onnx_infer_models.py compare "$DIR" "$m" ember >>"$RAW"
  [ -n "$BASE" ] && $PY bench/onnx_infer_models.py compare "$DIR" "$m" base >>"$RAW"
done
meta load_after "$(cut -d' ' -f1-3 /proc/loadavg)"

RES="bench/results/cpu-$(date -u +%Y-%m-%d)-${commit%-dirty}-onnx-infer.md"
$PY bench/onnx_infer_models.py report "$RAW" "$RES" && cat "$RES"
echo "raw samples: $RAW" >&2
