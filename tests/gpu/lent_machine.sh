#!/usr/bin/env bash
# The checks for a lent GPU machine (tests/gpu/README.md), in the order that
# gets the most out of a few minutes. Every step has its own time limit, none
# runs past the deadline, and each step's result is appended to OUT_DIR as
# soon as it ends, so a call cut off at its limit still brings back every step
# that finished.
#
#   machine       nvidia-smi, `ember devices`
#   selftest-cubin  every family module's kernel on the cubin path, bit for bit
#   ops-cubin     test_ops_devices on the cubin path (every op, forward and
#                 backward, both modes, against the CPU)
#   train         test_train_devices (MLP and CNN, the CPU's weights bit for bit)
#   learn         test_learners and test_layers: every learner rule, and mlp,
#                 lenet and resnet20 training steps, the CPU's bits on the GPU
#   bench         bench/run_gpu.sh: Ember beside PyTorch and cuBLAS
#   onnx          test_onnx_conformance (the node tests on the GPU)
#   selftest-ptx, -ptx-legacy, -nvrtc   run in the background from the start:
#                 they compile every module once into the shared JIT cache
#   ops-jit       test_ops_devices on the JIT paths, from that cache
#
# usage: lent_machine.sh BUNDLE_TGZ OUT_DIR [DEADLINE_S [STEPS]]
#   (from the repository root; STEPS: comma-separated names, default all)
# OUT_DIR receives summary.md (one line per step), log.txt (each step's
# output, trimmed), bench.md and logs.tgz (every full log, at the end).
set -uo pipefail
bundle_tgz=$1 out=$2 deadline=${3:-540} steps=${4:-all}
start=$(date +%s)
b=/tmp/ember
mkdir -p "$b" "$out"
tar -xzf "$bundle_tgz" -C "$b" || { echo "cannot unpack $bundle_tgz" >"$out/summary.md"; exit 1; }
export LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export EMBER_CACHE_DIR=/tmp/ember-cache EMBER_ONNX_TESTDATA=$b/share/onnx-node EMBER_BUILD_DIR=/tmp/ember-build
unset FAKECUDA_LIB EMBER_LIBCUDA EMBER_FORCE EMBER_STRICT
logs=/tmp/ember-logs
mkdir -p "$logs" "$EMBER_BUILD_DIR"
summary=$out/summary.md log=$out/log.txt
echo "# lent GPU run, $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$b/BUNDLE.txt")" >"$summary"

left() { echo $((deadline - ($(date +%s) - start))); }
wanted() { [ "$steps" = all ] || [[ ",$steps," == *",$1,"* ]]; }

# record NAME RC TOOK LIMIT: one summary line and the (trimmed) log.
record() {
  local name=$1 rc=$2 took=$3 limit=$4 verdict=PASS key
  [ "$rc" -eq 0 ] || verdict="FAIL (exit $rc)"
  [ "$rc" -eq 124 ] && verdict="TIMED OUT after ${limit}s"
  key=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+|passed|failed|FAIL' "$logs/$name.log" | tail -n 4 | tr '\n' ' ' |
    cut -c1-400)
  echo "- $name: $verdict in ${took}s (at +$(($(date +%s) - start))s) $key" >>"$summary"
  {
    echo "===== $name: $verdict in ${took}s"
    if [ "$(wc -l <"$logs/$name.log")" -gt 260 ]; then
      head -n 60 "$logs/$name.log"
      echo "... ($(wc -l <"$logs/$name.log") lines; the whole log is in logs.tgz)"
      tail -n 200 "$logs/$name.log"
    else
      cat "$logs/$name.log"
    fi
  } >>"$log"
}

# step NAME LIMIT COMMAND...: runs it within its limit and the deadline.
step() {
  local name=$1 limit=$2
  shift 2
  wanted "$name" || return 0
  [ "$(left)" -lt "$limit" ] && limit=$(left)
  if [ "$limit" -lt 15 ]; then
    echo "- $name: NOT RUN (deadline)" >>"$summary"
    return 0
  fi
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  record "$name" $? $(($(date +%s) - t0)) "$limit"
}

# The JIT paths compile in the background from the start, one after another.
(
  for p in ptx ptx-legacy nvrtc; do
    wanted "selftest-$p" || continue
    t0=$(date +%s)
    EMBER_FORCE=$p EMBER_STRICT=1 timeout $(($(left) > 20 ? $(left) - 10 : 10)) "$b/bin/ember" selftest \
      >"$logs/selftest-$p.log" 2>&1
    echo "$? $(($(date +%s) - t0))" >"$logs/selftest-$p.rc"
  done
) &
warm=$!

step machine 30 bash -c "nvidia-smi; echo; '$b/bin/ember' devices; echo; ls /usr/local/cuda/lib64 2>/dev/null | grep -E 'nvrtc|cublas' | head"
step selftest-cubin 60 env EMBER_FORCE=cubin EMBER_STRICT=1 "$b/bin/ember" selftest
step ops-cubin 150 env OC_PATHS=cubin "$b/tests/unit/test_ops_devices"
step train 90 "$b/tests/unit/test_train_devices"
step learn 90 bash -c "'$b/tests/unit/test_learners' && '$b/tests/unit/test_layers'"
step bench 150 bash bench/run_gpu.sh "$b"
ls -t bench/results/gpu-*.md 2>/dev/null | head -1 | xargs -r -I{} cp {} "$out/bench.md"
step onnx 120 "$b/tests/unit/test_onnx_conformance"
# What the background compiled by now (a path still compiling is cut off).
for p in ptx ptx-legacy nvrtc; do
  wanted "selftest-$p" || continue
  if [ -f "$logs/selftest-$p.rc" ]; then
    read -r rc took <"$logs/selftest-$p.rc"
    record "selftest-$p" "$rc" "$took" background
  elif kill -0 $warm 2>/dev/null && [ "$(left)" -gt 60 ]; then
    wait $warm
    [ -f "$logs/selftest-$p.rc" ] && { read -r rc took <"$logs/selftest-$p.rc"; record "selftest-$p" "$rc" "$took" background; }
  else
    echo "- selftest-$p: NOT FINISHED (deadline)" >>"$summary"
  fi
done
step ops-jit 300 env OC_PATHS=ptx,ptx-legacy,nvrtc "$b/tests/unit/test_ops_devices"
kill $warm 2>/dev/null
tar -czf "$out/logs.tgz" -C "$logs" .
echo "- done at +$(($(date +%s) - start))s" >>"$summary"
