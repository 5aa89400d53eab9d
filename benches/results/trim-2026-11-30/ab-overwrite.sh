#!/bin/bash
# Usage: ab-overwrite.sh BENCH_A BENCH_B [ROUNDS]: paired sustained random overwrites
# (lightstore-local/plp, 256 MiB device, 80% full, twice the capacity overwritten) of two
# lightstore-bench builds, the order alternating; prints overwrites/s, WA, the worst slice's p99 and the
# segments garbage collection reclaimed, of each run.
for r in $(seq "${3:-3}"); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$1 $2"; else ORDER="$2 $1"; fi
  for B in $ORDER; do
    rm -rf /work/bench-ws/ow && mkdir -p /work/bench-ws/ow
    $B run-overwrite --system ${SYS:-lightstore-local/plp} --device-mib 256 --fill-percent 80 \
      --times 2 --dir /work/bench-ws/ow --json /work/bench-ws/ow.json > /dev/null 2>&1
    python3 -c "
import json,sys; d=json.load(open('/work/bench-ws/ow.json'))
runs=d if isinstance(d,list) else [d]
for x in runs:
  p99=max((s['p99_us'] for s in x.get('samples',[])), default=0)
  print(sys.argv[1], round(x['ops_per_sec']), 'overwrites/s', 'WA', round(x['final_wa'],2),
        'gc_segments', x.get('gc_segments'), 'worst slice p99 ms', round(p99/1000,1),
        'stalled ms', round(((x.get('engine_counters') or {}).get('write_stall_micros') or 0)/1000),
        'released', (x.get('engine_counters') or {}).get('released_segments'),
        'stalls', {k[13:]: v for k, v in (x.get('engine_counters') or {}).items() if k.startswith('write_stalls_') and v})" "round $r $(basename $B)"
  done
done
