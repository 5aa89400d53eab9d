#!/bin/bash
# Paired YCSB (stock redis binding's commands) against fresh drives of two builds, in turn:
# run-phase ops/s per workload and the drive's CPU-seconds over load + run.
# usage: ab-ycsb.sh ROUNDS WORKLOADS BIN...   (BIN: a drive binary, or `redis-server`)
set -u
ROUNDS=$1; WL=$2; shift 2
for r in $(seq "$ROUNDS"); do
  for BIN in "$@"; do
    D=$(mktemp -d /tmp/ab.XXXX)
    if [ "$BIN" = redis-server ]; then
      redis-server --port 6391 --save "" --appendonly no > "$D/log" 2>&1 &
    else
      "$BIN" --port 6391 --data-dir "$D/data" --durability plp --capacity 1GiB > "$D/log" 2>&1 &
    fi
    P=$!
    for _ in $(seq 50); do redis-cli -p 6391 ping >/dev/null 2>&1 && break; sleep 0.1; done
    read -r U0 S0 < <(awk '{print $14, $15}' /proc/$P/stat)
    (cd /work/main && cargo xtask ycsb --binding redis --hosts 127.0.0.1:6391 --workload "$WL" --records 5000 --threads 4 --operations 100000) > "$D/ycsb" 2>&1
    read -r U1 S1 < <(awk '{print $14, $15}' /proc/$P/stat)
    OPS=$(awk '/^workload/{f=1;next} f && NF>=3 {printf "%s=%s ", $1, $3}' "$D/ycsb")
    printf "round %d %-12s %s cpu-s %.2f\n" "$r" "$(basename "$BIN")" "$OPS" "$(echo "($U1-$U0+$S1-$S0)/100" | bc -l)"
    redis-cli -p 6391 shutdown nosave >/dev/null 2>&1; wait $P 2>/dev/null; rm -rf "$D"
  done
done
