#!/bin/bash
# Usage: ab.sh ROUNDS BENCH_A BENCH_B: paired run-one of lightstore-local/plp (SYS=... for
# another system), 8 KiB values, 128 MiB, a value cache of 8 MiB (1/16 of the data, as in
# `bench all`), the order alternating; per run every workload's ops/s and CPU s/Mop.
R=$1; A=$2; B=$3
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for X in $ORDER; do
    rm -rf /work/bench-ws/ab && mkdir -p /work/bench-ws/ab
    $X run-one --system ${SYS:-lightstore-local/plp} --value-size 8192 --keys 16384 --cache-bytes 8388608 --data-mib 128 --dir /work/bench-ws/ab --json /work/bench-ws/ab.json > /dev/null 2>&1
    python3 -c "
import json,sys; d=json.load(open('/work/bench-ws/ab.json')); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
print(sys.argv[1], ' '.join(f\"{r['workload']}={r['ops_per_sec']/1000:.1f}K/{r['cpu_s_per_mop']:.1f}\" for r in rows))" "round $r $(basename $X)"
  done
done
