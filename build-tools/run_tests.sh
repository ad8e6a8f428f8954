#!/usr/bin/env bash
# Runs every test binary of a build folder from the repository root, with the
# paths the tests need, and prints one summary line:
#   tests: N passed, N failed, N skipped
# usage: run_tests.sh BUILD [WRAPPER...]
# A WRAPPER (e.g. valgrind and its options) runs in front of every test binary.
set -uo pipefail
build=$1
shift
wrapper=("$@")
root=$(pwd)
export EMBER_SRC_DIR=$root
export EMBER_BUILD_DIR=$root/$build
export FAKECUDA_LIB=$root/$build/tests/fakecuda/libcuda.so.1
export FAKECUDNN_LIB=$root/$build/tests/fakecudnn/libcudnn.so.9
export FAKECUBLAS_LIB=$root/$build/tests/fakecublas/libcublas.so.13
export FAKECUBLASLT_LIB=$root/$build/tests/fakecublas/libcublasLt.so.13
export EMBER_CLI=$root/$build/bin/ember
# Where a test runs on the libcuda double (it sets EMBER_LIBCUDA to it), the
# fast mode's libraries are the doubles too: a real cuBLAS or cuDNN cannot
# run on the double's devices. A test that wants another sets its own.
export EMBER_LIBCUDNN=${EMBER_LIBCUDNN:-$FAKECUDNN_LIB}
export EMBER_LIBCUBLAS=${EMBER_LIBCUBLAS:-$FAKECUBLAS_LIB}
export EMBER_LIBCUBLASLT=${EMBER_LIBCUBLASLT:-$FAKECUBLASLT_LIB}
# Tests never touch the user's real cache or driver unless they ask.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export EMBER_CACHE_DIR=$scratch/cache
unset EMBER_FORCE EMBER_STRICT EMBER_LOG CUDA_VISIBLE_DEVICES
# The test double of libcuda draws the order of threads, blocks and streams
# from FAKECUDA_SEED: a new seed each run explores other orders, and a
# failure names the seed that repeats it.
export FAKECUDA_SEED=${FAKECUDA_SEED:-$(( (RANDOM << 15 | RANDOM) + 1 ))}
# OpenMP worker threads sleep between parallel loops instead of spinning: on a
# loaded CI machine (and under valgrind) spinning multiplies test time.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# The binaries run EMBER_TEST_JOBS at a time (default: one per core), the
# longest first so the others fill in beside it; each writes its own log, and
# the summary below reads them in name order, so the output does not depend
# on the order they finished in. The tests share nothing but the JIT cache,
# which is safe across processes (atomic writes).
jobs=${EMBER_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
slow_first="test_ops_devices test_cli test_dispatch test_ops_conv test_gc_inspect"
bins=()
for name in $slow_first; do [ -x "$build/tests/unit/$name" ] && bins+=("$build/tests/unit/$name"); done
for t in "$build"/tests/unit/test_*; do
  [ -x "$t" ] || continue
  case " $slow_first " in *" $(basename "$t") "*) continue ;; esac
  bins+=("$t")
done
# LeakSanitizer's stop-the-world tracer itself crashes now and then at exit
# ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error":
# google/sanitizers#1353, seen once here in test_ops_devices after all its
# tests passed). That is no leak report and no test result, so such a run,
# and only such a run, is repeated once; the summary says it was.
run_one() {
  local t=$1 log=$scratch/$(basename "$1").log rc start=$SECONDS
  "${wrapper[@]}" "$t" >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q '^Tracer caught signal' "$log" &&
     grep -q 'LeakSanitizer has encountered a fatal error' "$log" && ! grep -q '^\[  FAILED  \]' "$log"; then
    mv "$log" "$log.tracer-crash"
    "${wrapper[@]}" "$t" >"$log" 2>&1
    rc=$?
    echo "(run again: LeakSanitizer's tracer crashed in the first run, $log.tracer-crash)" >>"$log"
  fi
  echo $((SECONDS - start)) >"$log.secs"
  echo $rc >"$log.rc"
}
export -f run_one
export scratch
# xargs cannot pass an array: the wrapper's words travel in a variable.
export WRAPPER_WORDS="${wrapper[*]}"
printf '%s\n' "${bins[@]}" | xargs -P "$jobs" -I{} bash -c 'wrapper=($WRAPPER_WORDS); run_one "$1"' _ {}

passed=0 failed=0 skipped=0 bad_bins=()
for t in "$build"/tests/unit/test_*; do
  [ -x "$t" ] || continue
  log=$scratch/$(basename "$t").log
  rc=$(cat "$log.rc" 2>/dev/null || echo 127)
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\./\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  s=$(grep -c '^\[  SKIPPED \]' "$log")
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
    bad_bins+=("$(basename "$t")")
    [ "$f" -eq 0 ] && failed=$((failed + 1)) # crashed or exited non-zero outside cmocka's count
    echo "---- $(basename "$t") (exit $rc; FAKECUDA_SEED=$FAKECUDA_SEED repeats the double's orders) ----"
    tail -n 40 "$log"
  else
    printf '%-28s %4d passed %3d skipped %5d s\n' "$(basename "$t")" "$p" "$s" "$(cat "$log.secs" 2>/dev/null || echo 0)"
    [ -e "$log.tracer-crash" ] && echo "  ($(basename "$t") ran twice: LeakSanitizer's tracer crashed at the end of its first run)"
  fi
done
# Where the time went (wall seconds per binary, run side by side): what to
# trim when make test grows past its budget.
slowest=$(for f in "$scratch"/*.log.secs; do echo "$(cat "$f") $(basename "$f" .log.secs)"; done |
  sort -rn | head -n 5 | awk '{printf "%s%s %d s", (NR > 1 ? ", " : ""), $2, $1}')
echo "slowest ($jobs at a time): $slowest"
echo "tests ($build${wrapper[0]:+, under ${wrapper[0]}}): $passed passed, $failed failed, $skipped skipped"
[ ${#bad_bins[@]} -eq 0 ] || { echo "failing: ${bad_bins[*]}"; exit 1; }
