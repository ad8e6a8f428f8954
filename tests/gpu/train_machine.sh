#!/usr/bin/env bash
# Training on a lent GPU machine (issue 11's GPU goals), from the bundle of
# `make train-bundle` (bin/ember, its libraries, Fashion-MNIST), in the order
# that gets the most out of a few minutes; each step has its own time limit,
# none runs past the deadline, and results land in OUT_DIR as they come:
#
#   machine     nvidia-smi, `ember devices`
#   throughput  bench/train_bench.sh on cuda:0: samples/s of `ember train`
#               beside PyTorch eager (when the machine has PyTorch) for mlp,
#               lenet and resnet20 -> train-gpu.md
#   resnet20    `ember train --model resnet20` to the end of its 30 epochs or
#               the deadline: the accuracy goal (>= 93.5%) -> resnet20-gpu.log
#               (JSON lines) and the checkpoint, which `ember train --resume`
#               continues on any device
#
# usage: train_machine.sh BUNDLE_TGZ OUT_DIR [DEADLINE_S [STEPS]]
#   (from the repository root; STEPS: comma-separated names, default all)
set -uo pipefail
bundle_tgz=$1 out=$2 deadline=${3:-540} steps=${4:-all}
start=$(date +%s)
b=/tmp/ember-train
mkdir -p "$b" "$out"
tar -xzf "$bundle_tgz" -C "$b" || { echo "cannot unpack $bundle_tgz" >"$out/summary.md"; exit 1; }
export LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} EMBER_CACHE_DIR=/tmp/ember-cache
unset FAKECUDA_LIB EMBER_LIBCUDA EMBER_FORCE EMBER_STRICT
ember=$b/bin/ember data=$b/share/fashion-mnist summary=$out/summary.md
echo "# lent GPU training run, $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$b/BUNDLE.txt")" >"$summary"
left() { echo $((deadline - ($(date +%s) - start))); }
wanted() { [ "$steps" = all ] || [[ ",$steps," == *",$1,"* ]]; }
note() { echo "- $*" >>"$summary"; }

if wanted machine; then
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  timeout 60 "$ember" devices >"$out/devices.txt" 2>&1
  note "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
fi
if wanted throughput && [ "$(left)" -gt 120 ]; then
  t=$(( $(left) / 2 ))
  timeout "$t" bash bench/train_bench.sh --ember "$ember" --device cuda:0 --data "$data" --samples 30000 \
    --epochs 2 --rounds 2 --out "$out/train-gpu.md" >"$out/throughput.log" 2>&1
  note "throughput: exit $? ($t s allowed): $(grep -c '^| [a-z]' "$out/train-gpu.md" 2>/dev/null) table rows"
fi
if wanted resnet20 && [ "$(left)" -gt 60 ]; then
  t=$(( $(left) - 20 ))
  timeout "$t" "$ember" train --model resnet20 --device cuda:0 --data "$data" --epochs 30 --batch 128 \
    --learner momentum --lr 0.1 --momentum 0.9 --l2 5e-4 --schedule cosine --random-crop 2 --random-flip --seed 1 \
    --checkpoint "$out/resnet20-gpu.ckpt" --resume --json --report-every 200 >>"$out/resnet20-gpu.log" \
    2>>"$out/resnet20-gpu.err"
  rc=$?
  note "resnet20: exit $rc ($t s allowed; 124: cut at the deadline, resumable from resnet20-gpu.ckpt): $(grep -c '"event":"epoch"' "$out/resnet20-gpu.log") epochs; $(grep '"event":"test"' "$out/resnet20-gpu.log" | tail -1)"
fi
cat "$summary"
