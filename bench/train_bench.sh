#!/usr/bin/env bash
# Training throughput of `ember train` beside its PyTorch twin
# (bench/train_torch.py), end to end: data reader, forward, backward, learner,
# the loss read back every step. Issue 11's goals: on the CPU, Ember at or
# above PyTorch (same model, batch, learner, threads); on a GPU when one is
# lent, samples/s for mlp, lenet and resnet20 beside PyTorch eager.
#
#   bash bench/train_bench.sh [--ember BIN] [--device cpu|cuda:N] [--models LIST]
#        [--samples N] [--epochs E] [--batch B] [--threads T] [--rounds R] [--out FILE]
#
# Each round runs Ember and PyTorch back to back (the first alternating), E
# epochs of the first N training images each; the figure is the last epoch's
# samples/s (the first pays for loading kernels, JIT and allocator warm-up on
# both sides); the ratio is Ember's over PyTorch's, the median over rounds.
# Writes a Markdown table to --out (default bench/results/train-<device>-<date>-<commit>.md).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ember=$ROOT/build/bin/ember device=cpu models=mlp,lenet,resnet20 samples=12800 epochs=2 batch=128 threads=0
rounds=3 out= data=${EMBER_BENCH_DATA:-/usr/share/datasets/fashion-mnist}
while [ $# -gt 0 ]; do
  case "$1" in
    --ember) ember=$2; shift ;;
    --device) device=$2; shift ;;
    --models) models=$2; shift ;;
    --samples) samples=$2; shift ;;
    --epochs) epochs=$2; shift ;;
    --batch) batch=$2; shift ;;
    --threads) threads=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --out) out=$2; shift ;;
    --data) data=$2; shift ;;
    *) echo "train_bench.sh: unknown option $1" >&2; exit 64 ;;
  esac
  shift
done
[ "$threads" -gt 0 ] || threads=$(nproc)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OPENBLAS_NUM_THREADS=1
py=python3
[ -d "$ROOT/.tools/torch" ] && export PYTHONPATH=$ROOT/.tools/torch${PYTHONPATH:+:$PYTHONPATH}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw=$tmp/raw.txt
: >"$raw"
lr_of() { case $1 in resnet20) echo 0.1 ;; *) echo 0.05 ;; esac; }

run_ember() { # model round
  local m=$1 r=$2 log=$tmp/ember-$1-$2.log
  "$ember" train --model "$m" --data "$data" --device "$device" --epochs "$epochs" --train-samples "$samples" \
    --test-samples 100 --batch "$batch" --learner momentum --lr "$(lr_of "$m")" --threads "$threads" --json \
    --report-every 1000000 >"$log" 2>"$log.err" || { echo "ember train $m failed: $(tail -2 "$log.err")" >&2; return; }
  grep '"event":"epoch"' "$log" | sed -n 's/.*"epoch":\([0-9]*\),.*"samples_per_s":\([0-9.e+-]*\).*/\1 \2/p' |
    while read -r e sps; do echo "R $m.ember.r$r.epoch$e.samples_per_s $sps" >>"$raw"; done
  grep -q 'device: ' "$log.err" && echo "R ember.device $(grep -m1 'device: ' "$log.err" | sed 's/^device: //')" >>"$raw"
}
run_torch() { # model round
  local m=$1 r=$2
  $py "$ROOT/bench/train_torch.py" --model "$m" --device "$device" --data "$data" --samples "$samples" \
    --epochs "$epochs" --batch "$batch" --lr "$(lr_of "$m")" --threads "$threads" 2>"$tmp/torch.err" |
    sed -n "s/^R $m\.[a-z]*\.torch\.\(epoch[0-9]*\.samples_per_s\) /R $m.torch.r$r.\1 /p; s/^R torch\.\(.*\)/R torch.\1/p" >>"$raw"
}

IFS=, read -r -a mlist <<<"$models"
for ((r = 0; r < rounds; r++)); do
  for m in "${mlist[@]}"; do
    if ((r % 2 == 0)); then run_ember "$m" "$r"; run_torch "$m" "$r"; else run_torch "$m" "$r"; run_ember "$m" "$r"; fi
  done
done

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
kind=${device%%:*}
[ -n "$out" ] || out=$ROOT/bench/results/train-$kind-$(date -u +%Y-%m-%d)-$commit.md
python3 - "$raw" "$out" "$commit" "$device" "$samples" "$epochs" "$batch" "$threads" "$models" "$rounds" <<'PY'
import statistics, sys, datetime, platform
raw, out, commit, device, samples, epochs, batch, threads, models, rounds = sys.argv[1:]
vals = {}
for line in open(raw):
    p = line.split(None, 2)
    if len(p) == 3 and p[0] == "R":
        vals[p[1]] = p[2].strip()
last = f"epoch{epochs}"
L = [f"# Training throughput, `ember train` beside PyTorch ({device})", "",
     f"- date (UTC): {datetime.datetime.utcnow():%Y-%m-%d %H:%M}", f"- commit: {commit}",
     f"- device: {device}; Ember's word for it: {vals.get('ember.device', '?')}",
     f"- PyTorch: {vals.get('torch.version', vals.get('torch.unavailable', 'unavailable'))}",
     f"- {samples} training images per epoch, {epochs} epochs per run, minibatch {batch}, momentum SGD (0.9), "
     f"{threads} CPU threads; the figure is epoch {epochs}'s samples/s; {rounds} rounds, Ember and PyTorch back "
     "to back, the first alternating", "",
     "| model | Ember samples/s (median) | PyTorch samples/s (median) | Ember / PyTorch (median of per-round ratios) | per-round ratios |",
     "| --- | --- | --- | --- | --- |"]
for m in models.split(","):
    e = [float(vals[k]) for r in range(int(rounds)) if (k := f"{m}.ember.r{r}.{last}.samples_per_s") in vals]
    t = [float(vals[k]) for r in range(int(rounds)) if (k := f"{m}.torch.r{r}.{last}.samples_per_s") in vals]
    ratios = [float(vals[f"{m}.ember.r{r}.{last}.samples_per_s"]) / float(vals[f"{m}.torch.r{r}.{last}.samples_per_s"])
              for r in range(int(rounds))
              if f"{m}.ember.r{r}.{last}.samples_per_s" in vals and f"{m}.torch.r{r}.{last}.samples_per_s" in vals]
    f = lambda xs: f"{statistics.median(xs):.0f}" if xs else "-"
    L.append(f"| {m} | {f(e)} | {f(t)} | {statistics.median(ratios):.2f} | {' '.join(f'{x:.2f}' for x in ratios)} |"
             if ratios else f"| {m} | {f(e)} | {f(t)} | - | - |")
L += ["", "Raw:", "", "```"] + [l.rstrip() for l in open(raw)] + ["```", ""]
open(out, "w").write("\n".join(L))
print("\n".join(L[:12 + len(models.split(','))]))
print(f"train_bench.sh: wrote {out}")
PY
