#!/bin/bash
# Usage: ab.sh ROUNDS BENCH_A BENCH_B: paired run-one of lightstore-local/plp (SYS=... for
# another system), 8 KiB values, KEYS keys (default 131072: on a disk writing 1 GB/s the
# 16,384 of follower-wait-2026-11-30/ab.sh make S-SET last 0.2 s) over DATA MiB (default
# 1024), a value cache of 1/16 of the data, the order alternating; per run every workload's
# ops/s, CPU s/Mop and (writes) WA.
R=$1; A=$2; B=$3; KEYS=${KEYS:-131072}; DATA=${DATA:-1024}; WS=${WS:-/work/bench-ws}
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for X in $ORDER; do
    rm -rf $WS/ab && mkdir -p $WS/ab
    $X run-one --system ${SYS:-lightstore-local/plp} --value-size 8192 --keys $KEYS --cache-bytes $((DATA * 65536)) --data-mib $DATA --dir $WS/ab --json $WS/ab.json > /dev/null 2>&1
    python3 -c "
import json,sys; d=json.load(open(sys.argv[2])); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
def wa(r): return f\"/{r['write_amp']:.2f}\" if r.get('write_amp') else ''
print(sys.argv[1], ' '.join(f\"{r['workload']}={r['ops_per_sec']/1000:.1f}K/{r['cpu_s_per_mop']:.1f}{wa(r)}\" for r in rows))" "round $r $(basename $X)" $WS/ab.json
  done
done
rm -rf $WS/ab
