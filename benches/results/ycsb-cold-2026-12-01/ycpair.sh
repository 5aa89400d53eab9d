#!/bin/bash
# ycpair.sh ROUNDS BIN_A BIN_B W: alternating YCSB runs (stock redis binding), prints ops/s, page probes per op, cpu
R=$1; A=$2; B=$3; W=$4
for i in $(seq $R); do
  for bin in $A $B; do
    out=$($(dirname $0)/ycb4.sh $bin $W 7001 2>&1)
    ops=$(echo "$out" | grep -E "^[A-F] " | awk '{print $3}')
    hits=$(echo "$out" | grep -o "value_cache_hits:[0-9]*" | tail -1 | cut -d: -f2)
    miss=$(echo "$out" | grep -o "value_cache_misses:[0-9]*" | tail -1 | cut -d: -f2)
    cpu=$(echo "$out" | grep -o "cpu=[0-9]*" | cut -d= -f2)
    echo "$(basename $bin) $W ops/s=$ops hits=$hits misses=$miss cpu_cs=$cpu"
  done
done
