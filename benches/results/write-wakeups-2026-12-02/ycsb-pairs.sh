#!/bin/bash
# Alternating YCSB runs through the stock redis binding against drives of the binaries given
# (plp, 1 GiB simulated device on a file; 4 threads, 5,000 records, 100,000 operations):
# the load and run phases' ops/s, READ and UPDATE average latency (us), and the drive's CPU
# ticks (1/100 s) over both phases. Run from the repository (it calls `cargo xtask ycsb`).
# usage: ycsb-pairs.sh SCRATCH ROUNDS WORKLOAD DRIVE...
set -eu
scratch=$1; rounds=$2; wl=$3; shift 3
mkdir -p "$scratch"
for r in $(seq "$rounds"); do
  for d in "$@"; do
    rm -rf "$scratch/data"; mkdir -p "$scratch/data"
    "$d" --data-dir "$scratch/data" --capacity 1GiB --durability plp --bind 127.0.0.1 \
      --port 7101 > "$scratch/drive.log" 2>&1 &
    pid=$!
    sleep 1.5
    t0=$(awk '{print $14+$15}' /proc/$pid/stat)
    timeout 300 cargo xtask ycsb --workload "$wl" --binding redis --hosts 127.0.0.1:7101 \
      --records 5000 --threads 4 > "$scratch/ycsb.log" 2>&1
    t1=$(awk '{print $14+$15}' /proc/$pid/stat)
    kill $pid; wait $pid 2>/dev/null || true
    echo "$r $(basename "$d") $(grep -E "^[A-F] " "$scratch/ycsb.log" | head -1) cpu_ticks=$((t1 - t0))"
  done
done
