#!/bin/bash
# Paired run-one of lightstore-net/plp (8 KiB, 512 MiB over RESP) for two drive builds,
# alternating order; the bench binary is the same for both.
# usage: ab-net.sh BENCH DRIVE_A DRIVE_B
BENCH=$1; shift
for r in 1 2 3; do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$1 $2"; else ORDER="$2 $1"; fi
  for DRV in $ORDER; do
    rm -rf /work/bench-ws/an && mkdir -p /work/bench-ws/an/drive /work/bench-ws/an/run
    $DRV --bind 127.0.0.1 --port 7020 --device sim --capacity 1536MiB --timing none --data-dir /work/bench-ws/an/drive --durability plp > /work/bench-ws/an/drive.log 2>&1 &
    P=$!
    for _ in $(seq 100); do redis-cli -p 7020 ping >/dev/null 2>&1 && break; sleep 0.1; done
    $BENCH run-one --system lightstore-net/plp --value-size 8192 --keys 65536 --cache-bytes 8388608 --data-mib 512 --dir /work/bench-ws/an/run --json /work/bench-ws/an.json --addr 127.0.0.1:7020 --pid $P > /work/bench-ws/an/run.log 2>&1
    redis-cli -p 7020 shutdown nosave >/dev/null 2>&1; wait $P 2>/dev/null
    python3 -c "
import json,sys; d=json.load(open('/work/bench-ws/an.json')); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
print(sys.argv[1], ' '.join(f\"{r['workload']}={round(r['ops_per_sec']/1000,1)}K/p99.9={round(r['p999_us']/1000,1)}ms\" for r in rows))" "round $r $(basename $DRV)"
  done
done
