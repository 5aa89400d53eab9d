#!/bin/bash
# Usage: ab-tail.sh BENCH_A BENCH_B (two lightstore-bench binaries); SYS=... picks another system.
# Paired run-one of lightstore-local/plp (8 KiB, 512 MiB) for two bench builds, alternating order.
for r in 1 2 3; do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$1 $2"; else ORDER="$2 $1"; fi
  for B in $ORDER; do
    rm -rf /work/bench-ws/ab && mkdir -p /work/bench-ws/ab
    $B run-one --system ${SYS:-lightstore-local/plp} --value-size 8192 --keys 65536 --cache-bytes 8388608 --data-mib 512 --dir /work/bench-ws/ab --json /work/bench-ws/ab.json > /dev/null 2>&1
    python3 -c "
import json,sys; d=json.load(open('/work/bench-ws/ab.json')); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
print(sys.argv[1], ' '.join(f\"{r['workload']}={round(r['ops_per_sec']/1000,1)}K/p99.9={round(r['p999_us']/1000,1)}ms\" for r in rows))" "round $r $(basename $B)"
  done
done
