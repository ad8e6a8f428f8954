#!/usr/bin/env bash
# An LSTM language model's training step, Ember (bench/bench_lstm_lm.c)
# beside PyTorch (bench/lstm_lm_torch.py, torch.nn.LSTM), issue 12's goal:
# Ember's throughput >= PyTorch's on the CPU.
#
#   bash bench/lstm_lm.sh [--rounds R] [--threads "1 2"] [--vocabs "10000 1000"] [--quick] [--out FILE]
#                         [--ember BIN]   (another bench_lstm_lm, e.g. one built from an older commit; no build)
#                         [--base BIN]    (also run BIN in every round, after the other two: before/after columns)
#
# For each vocabulary size and thread count, R rounds of the two processes
# back to back (which goes first alternates); a round's figure is each side's
# median ms per step, its ratio PyTorch ms / Ember ms (> 1: Ember faster);
# the table shows the median over rounds of that ratio and its range. Sizes
# other than V: E 256, H 256, 1 layer, T 35, N 32 (bench_lstm_lm.c).
# OMP_WAIT_POLICY=passive, OPENBLAS_NUM_THREADS=1 (Ember keeps OpenBLAS
# single-threaded itself; PyTorch's threads are torch.set_num_threads).
# Writes a Markdown table to --out (default: stdout only).
set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
rounds=3 threads="1 2" vocabs="10000 1000" quick= out= build=1 ember=build/bench/bench_lstm_lm base=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    --vocabs) vocabs=$2; shift ;;
    --quick) quick=--quick ;;
    --out) out=$2; shift ;;
    --ember) ember=$2; build=0; shift ;;
    --base) base=$2; shift ;;
    *) echo "lstm_lm.sh: unknown option $1" >&2; exit 64 ;;
  esac
  shift
done
export OMP_WAIT_POLICY=passive OPENBLAS_NUM_THREADS=1
[ -d "$ROOT/.tools/torch" ] && export PYTHONPATH=$ROOT/.tools/torch${PYTHONPATH:+:$PYTHONPATH}
mkdir -p build/bench
if [ "$build" = 1 ]; then
  gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fopenmp -Iinclude -Ibench bench/bench_lstm_lm.c \
    -o build/bench/bench_lstm_lm build/lib/libember.a -lelf -lzstd -llz4 -lz -ljansson -lprotobuf-c \
    -ldl -lpthread -lm || { echo "lstm_lm.sh: building bench_lstm_lm failed" >&2; exit 1; }
fi
med() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
ms_of() { sed -n "s/^R lstm_lm\.$1\.ms //p" | med; }
load0=$(cut -d' ' -f1-3 /proc/loadavg)
table="| V | threads | Ember ms/step (median of rounds) | PyTorch ms/step | PyTorch/Ember per round | median ratio |${base:+ base ms/step | PyTorch/base per round | median ratio (base) |}
| --- | --- | --- | --- | --- | --- |${base:+ --- | --- | --- |}"
for v in $vocabs; do
  for t in $threads; do
    ratios= ems= tms= bms= bratios=
    for r in $(seq 1 "$rounds"); do
      args="--threads $t --vocab $v $quick"
      if [ $((r % 2)) = 1 ]; then
        e=$("$ember" $args | ms_of ember); p=$(python3 bench/lstm_lm_torch.py $args | ms_of torch)
      else
        p=$(python3 bench/lstm_lm_torch.py $args | ms_of torch); e=$("$ember" $args | ms_of ember)
      fi
      rt=$(awk -v e="$e" -v p="$p" 'BEGIN {printf "%.3f", p / e}')
      echo "V $v threads $t round $r: ember $e ms, torch $p ms, torch/ember $rt" >&2
      ratios="$ratios $rt" ems="$ems $e" tms="$tms $p"
      if [ -n "$base" ]; then
        b=$("$base" $args | ms_of ember); br=$(awk -v e="$b" -v p="$p" 'BEGIN {printf "%.3f", p / e}')
        echo "  base $b ms, torch/base $br" >&2
        bms="$bms $b" bratios="$bratios $br"
      fi
    done
    em=$(echo $ems | tr ' ' '\n' | med) tm=$(echo $tms | tr ' ' '\n' | med) rm=$(echo $ratios | tr ' ' '\n' | med)
    table="$table
| $v | $t | $em | $tm | $(echo $ratios | tr ' ' ',') | **$rm** |${base:+ $(echo $bms | tr ' ' '\n' | med) | $(echo $bratios | tr ' ' ',') | $(echo $bratios | tr ' ' '\n' | med) |}"
  done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
report="$table

Load average (1, 5, 15 min) before: $load0; after: $load1. Rounds: $rounds ($quick). Ember: $ember. $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //').
PyTorch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo unavailable)."
echo "$report"
[ -n "$out" ] && echo "$report" >"$out"
exit 0
