#!/bin/bash
# pairs.sh ROUNDS BIN_A BIN_B: the four shapes of this folder, builds in turn (A first, then B,
# then A again next round): hot 100 B GETs (all keys set; ~30% never set), HGETALL of
# YCSB-like hashes, 8 KiB SETs at pipeline 16. Prints one line per run.
R=$1; A=$2; B=$3; here=$(dirname $0); hot=$here/../thread-reads-2026-12-01/hot.sh
for i in $(seq $R); do
  for bin in $A $B; do
    echo "hot-all  $(D=100 KEYS=5000 C=50 P=16 N=2000000 bash $hot $bin 7010 | grep rps)"
    echo "hot-miss $(D=100 KEYS=100000 C=50 P=16 N=2000000 bash $hot $bin 7010 | grep rps)"
    echo "hgetall  $(bash $here/hga.sh $bin 7031)"
    echo "set-8k   $(bash $here/set8.sh $bin 7022)"
  done
done
