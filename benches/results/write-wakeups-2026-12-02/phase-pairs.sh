#!/bin/bash
# Alternating pairs of in-process plp runs (`lightstore-bench run-one --system
# lightstore-local/plp`), one per harness binary given, with `perf stat` attached to the run
# during one workload only: context switches, io_uring_enter, futex and sched_yield calls
# per operation, task-clock per operation, and the workload's own ops/s and steal share.
# usage: phase-pairs.sh SCRATCH ROUNDS VALUE KEYS MIB WORKLOAD NEXT-WORKLOAD HARNESS...
set -eu
scratch=$1; rounds=$2; vs=$3; keys=$4; mib=$5; wl=$6; nx=$7; shift 7
mkdir -p "$scratch"
for r in $(seq "$rounds"); do
  for b in "$@"; do
    rm -rf "$scratch/dev"; mkdir -p "$scratch/dev"
    "$b" run-one --system lightstore-local/plp --value-size "$vs" --keys "$keys" \
      --cache-bytes 8388608 --data-mib "$mib" --dir "$scratch/dev" --json "$scratch/rows.json" \
      > "$scratch/run.log" 2>&1 &
    rp=$!
    until grep -q "workload $wl" "$scratch/run.log"; do sleep 0.005; done
    perf stat -x, -e context-switches,task-clock,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield \
      -p $rp -o "$scratch/stat.txt" &
    ps=$!
    until grep -q "workload $nx" "$scratch/run.log"; do sleep 0.005; done
    kill -INT $ps; wait $ps || true
    wait $rp
    python3 - "$scratch" "$wl" "$keys" "$r" "$(basename "$b")" <<'PY'
import json, sys
scratch, wl, n, r, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
stat = {}
for line in open(f"{scratch}/stat.txt"):
    f = line.strip().split(",")
    if len(f) > 2 and f[0] and f[0][0].isdigit():
        stat[f[2].split(":")[-1]] = float(f[0])
row = [x for x in json.load(open(f"{scratch}/rows.json"))["rows"] if x["workload"] == wl][0]
print(r, name.ljust(12), wl,
      "cs/op=%.2f enter/op=%.2f futex/op=%.2f yield/op=%.2f" % (
          stat["context-switches"] / n, stat["sys_enter_io_uring_enter"] / n,
          stat["sys_enter_futex"] / n, stat["sys_enter_sched_yield"] / n),
      "cpu_us/op=%.1f" % (stat["task-clock"] * 1000 / n),
      "ops=%d steal=%d%%" % (row["ops_per_sec"], 100 * row["host_stalls"].get("steal_share", 0)))
PY
  done
done
