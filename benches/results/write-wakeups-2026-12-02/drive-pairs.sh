#!/bin/bash
# Alternating runs of the drive over RESP (plp, 1 GiB simulated device on a file, no timing
# model) under the harness's own client (`lightstore-bench run-one --system
# lightstore-net/plp`: 4 connections x 8 pipelined, 16,384 keys of 8 KiB), one per drive
# binary given; prints each write workload's ops/s and the drive's CPU seconds per million.
# usage: drive-pairs.sh SCRATCH ROUNDS HARNESS DRIVE...
set -eu
scratch=$1; rounds=$2; harness=$3; shift 3
mkdir -p "$scratch"
for r in $(seq "$rounds"); do
  for d in "$@"; do
    rm -rf "$scratch/data" "$scratch/run"; mkdir -p "$scratch/data" "$scratch/run"
    "$d" --data-dir "$scratch/data" --capacity 1GiB --durability plp --timing none \
      --bind 127.0.0.1 --port 7101 > "$scratch/drive.log" 2>&1 &
    pid=$!
    sleep 1.5
    "$harness" run-one --system lightstore-net/plp --value-size 8192 --keys 16384 \
      --cache-bytes 8388608 --data-mib 128 --dir "$scratch/run" --json "$scratch/rows.json" \
      --addr 127.0.0.1:7101 --pid $pid > "$scratch/run.log" 2>&1
    kill $pid; wait $pid 2>/dev/null || true
    python3 - "$scratch" "$r" "$(basename "$d")" <<'PY'
import json, sys
scratch, r, name = sys.argv[1:4]
for x in json.load(open(f"{scratch}/rows.json"))["rows"]:
    if x["workload"] in ("S-SET", "R-SET"):
        print(r, name.ljust(18), x["workload"], "ops=%d" % x["ops_per_sec"], "cpu_s_per_mop=%.1f" % x["cpu_s_per_mop"])
PY
  done
done
