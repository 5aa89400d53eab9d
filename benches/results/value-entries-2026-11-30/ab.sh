#!/bin/bash
# ab.sh ROUNDS BIN_A BIN_B WORKLOADS...: one.sh for each workload, A then B, order alternating per round
R=$1; A=$2; B=$3; shift 3
for r in $(seq 1 $R); do
  for w in "$@"; do
    if [ $((r % 2)) = 1 ]; then /tmp/vc/one.sh $A $w; /tmp/vc/one.sh $B $w; else /tmp/vc/one.sh $B $w; /tmp/vc/one.sh $A $w; fi
  done
done
