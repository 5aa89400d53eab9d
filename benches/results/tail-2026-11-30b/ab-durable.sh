#!/bin/bash
# Usage: ab-durable.sh ROUNDS BENCH_A BENCH_B: paired run-one of lightstore-local (durable),
# 8 KiB, 128 MiB, the order alternating; per run the write rows' ops/s, R-Mixed's tails,
# host stalls and device flushes.
R=$1; A=$2; B=$3
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for X in $ORDER; do
    rm -rf /work/bench-ws/ab && mkdir -p /work/bench-ws/ab
    $X run-one --system ${SYS:-lightstore-local} --value-size 8192 --keys 16384 --cache-bytes 1048576 --data-mib 128 --dir /work/bench-ws/ab --json /work/bench-ws/ab.json > /dev/null 2>&1
    python3 -c "
import json,sys; d=json.load(open('/work/bench-ws/ab.json')); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
out=[]
for r in rows:
    w=r['workload']
    if w in ('S-SET','R-SET'): out.append(f\"{w}={r['ops_per_sec']/1000:.1f}K/p99.9={r['p999_us']/1000:.1f}ms/flushes={r['engine_counters']['device_flushes']}\")
    if w=='R-Mixed':
        g,s=r['read_write_p999_us']; h=r['host_stalls']
        out.append(f\"R-Mixed={r['ops_per_sec']/1000:.1f}K GET={g/1000:.1f}ms SET={s/1000:.1f}ms flushes={r['engine_counters']['device_flushes']} stalls={h['count']}/{h['longest_ms']:.0f}ms\")
print(sys.argv[1], ' '.join(out))" "round $r $(basename $X)"
  done
done
