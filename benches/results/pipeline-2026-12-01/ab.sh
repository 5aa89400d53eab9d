#!/bin/bash
# ab.sh ROUNDS A B: paired local plp run-one, 8 KiB, KEYS (default 131072) over DATA MiB (1024)
R=$1; A=$2; B=$3; KEYS=${KEYS:-131072}; DATA=${DATA:-1024}; WS=/work/ws
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for X in $ORDER; do
    rm -rf $WS/ab && mkdir -p $WS/ab
    $X run-one --system ${SYS:-lightstore-local/plp} --value-size ${VS:-8192} --keys $KEYS --cache-bytes $((DATA * 65536)) --data-mib $DATA --dir $WS/ab --json $WS/ab.json > /dev/null 2>&1
    python3 -c "
import json,sys; d=json.load(open(sys.argv[2])); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
def wa(r): return f\"/{r['write_amp']:.2f}\" if r.get('write_amp') else ''
print(sys.argv[1], ' '.join(f\"{r['workload']}={r['ops_per_sec']/1000:.1f}K/{r['cpu_s_per_mop']:.1f}{wa(r)}\" for r in rows))" "round $r $(basename $X)" $WS/ab.json
  done
done
