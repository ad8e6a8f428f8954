#!/usr/bin/env bash
# make test-gpu: on a real GPU, for each path (cubin, ptx, ptx-legacy, nvrtc),
# forces the path (EMBER_FORCE, with EMBER_STRICT=1 so nothing falls back),
# loads every kernel module, runs every kernel on fresh random inputs and
# compares the bits with the CPU twins. Each path runs twice on one fresh JIT
# cache: cold (compiles) and warm (from the cache). Prints a table and writes
# it, with date, GPU, driver and commit, to $EMBER_GPU_RESULTS (default
# bench/results/gpu-paths-<date>.md).
# usage: run.sh BUILD   (a build folder, or an unpacked `make gpu-bundle`)
set -uo pipefail
build=$1
ember=$build/bin/ember
# A bundle from `make gpu-bundle` carries libember's own dependencies in lib/:
# the executable's run path covers only its direct ones.
export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
state=$("$ember" devices --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["driver"]["state"], len(d["devices"]))')
if [ "${state%% *}" != ok ] || [ "${state##* }" = 0 ]; then
  echo "test-gpu: SKIPPED: no usable CUDA GPU here ($("$ember" devices | sed -n 's/^driver: //p'))"
  exit 0
fi
date=$(date -u +%Y-%m-%d)
out=${EMBER_GPU_RESULTS:-bench/results/gpu-paths-$date.md}
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for path in cubin ptx ptx-legacy nvrtc; do
  cache=$tmp/cache-$path
  for run in cold warm; do
    EMBER_FORCE=$path EMBER_STRICT=1 EMBER_CACHE_DIR=$cache "$ember" selftest --json >"$tmp/$path-$run.json" 2>"$tmp/$path-$run.err" || fail=1
  done
done
python3 - "$tmp" "$out" "$date" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY' || fail=1
import json, sys, os, subprocess
tmp, out, date, commit = sys.argv[1:5]
rows, bad = [], 0
gpu = driver = "?"
for path in ["cubin", "ptx", "ptx-legacy", "nvrtc"]:
    runs = {}
    for run in ["cold", "warm"]:
        f = os.path.join(tmp, f"{path}-{run}.json")
        try:
            runs[run] = json.load(open(f))
        except Exception:
            err = open(os.path.join(tmp, f"{path}-{run}.err")).read().strip()
            rows.append(f"| {path} | {run} | - | - | - | FAIL: {err[:200]} |")
            bad += 1
            continue
    for run, d in runs.items():
        driver = d["driver"]
        for dev in d["devices"]:
            gpu = f'{dev["name"]} (CC {dev["cc_major"]}.{dev["cc_minor"]})'
            for r in dev["results"]:
                ok = r["ok"] and r["ran"] and r["path"] == path
                bad += not ok
                note = "bit-exact vs CPU" if ok else (r["error"] or r["detail"] or f'path {r["path"]}, {r["mismatches"]} mismatches')
                rows.append(f'| {path} | {run} | {r["kernel"]} | {r["load_ms"]:.2f} | {"yes" if r["from_cache"] else "no"} | {"PASS" if ok else "FAIL"}: {note} |')
text = [f"# make test-gpu: every kernel on every path", "",
        f"- date: {date}", f"- GPU: {gpu}", f"- driver: {driver}", f"- commit: {commit}", "",
        "| path | run | kernel | module load ms | from JIT cache | result |", "|---|---|---|---|---|---|"] + rows
open(out, "w").write("\n".join(text) + "\n")
print("\n".join(text))
print(f"\ntest-gpu: {len(rows) - bad} passed, {bad} failed")
sys.exit(1 if bad else 0)
PY
# The test programs that compare every op (forward and backward, both modes,
# every path), two small trainings and the ONNX node tests between the CPU
# and this GPU, through the same driver as above. A GPU part that skips is a
# failure here: the GPU was found above. make test-gpu-double sets
# EMBER_GPU_TESTS=0: the unit tests already run them against the double.
if [ "${EMBER_GPU_TESTS:-1}" != 0 ]; then
  onnx=$build/share/onnx-node
  [ -d "$onnx" ] || onnx=${EMBER_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data/node}
  printf '\n| test program (same driver) | result |\n|---|---|\n' >>"$out"
  for t in test_ops_devices test_train_devices test_learners test_layers test_onnx_conformance; do
    [ -x "$build/tests/unit/$t" ] || { echo "| $t | not built |" >>"$out"; fail=1; continue; }
    env -u FAKECUDA_LIB EMBER_ONNX_TESTDATA="$onnx" EMBER_BUILD_DIR="$tmp" "$build/tests/unit/$t" >"$tmp/$t.log" 2>&1
    rc=$?
    why=""
    if [ $rc -eq 0 ] && grep -q '^\[  SKIPPED \]' "$tmp/$t.log"; then rc=77 why=" (a GPU part skipped)"; fi
    summary=$(grep -E '^\[  (PASSED|FAILED) |seed|on cuda:0|pending' "$tmp/$t.log" | tr '\n' ' ' | cut -c1-300)
    if [ $rc -eq 0 ]; then echo "| $t | PASS: $summary |" >>"$out"; else echo "| $t | FAIL (exit $rc$why): $summary |" >>"$out"; fail=1; fi
    tail -n 30 "$tmp/$t.log"
  done
fi
[ $fail -eq 0 ] || { echo "test-gpu: FAILED (table in $out)"; exit 1; }
echo "test-gpu: table written to $out"
