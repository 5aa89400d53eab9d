#!/bin/bash
# Usage: ctx.sh ROUNDS BENCH_A BENCH_B: the same run-one as ab.sh under `perf stat`: context
# switches and task-clock of the whole process (every workload), the order alternating.
R=$1; A=$2; B=$3
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for X in $ORDER; do
    rm -rf /work/bench-ws/ab && mkdir -p /work/bench-ws/ab
    perf stat -x, -e context-switches,task-clock -o /work/bench-ws/stat.txt $X run-one --system ${SYS:-lightstore-local/plp} --value-size 8192 --keys 16384 --cache-bytes 8388608 --data-mib 128 --dir /work/bench-ws/ab --json /work/bench-ws/ab.json > /dev/null 2>&1
    cs=$(grep context-switches /work/bench-ws/stat.txt | cut -d, -f1); tc=$(grep task-clock /work/bench-ws/stat.txt | cut -d, -f1)
    python3 -c "
import json,sys; d=json.load(open('/work/bench-ws/ab.json')); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
print(sys.argv[1], 'ctx-switches', sys.argv[2], 'task-clock-ms', round(float(sys.argv[3])), ' '.join(f\"{r['workload']}={r['ops_per_sec']/1000:.1f}K\" for r in rows))" "round $r $(basename $X)" "$cs" "$tc"
  done
done
