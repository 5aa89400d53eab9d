#!/bin/bash
# usage: netrow.sh drive|redis PORT  -> rows json in /work/p40/rows-$which.json
which=$1; port=$2
rm -rf /work/p40/d /work/p40/rd; mkdir -p /work/p40/d /work/p40/rd
if [ $which = drive ]; then
  ${DRIVE:-/work/main/target/release/lightstore} --data-dir /work/p40/d --capacity 1GiB --durability plp --timing none --port $port > /work/p40/drive.log 2>&1 &
  sys=lightstore-net/plp
else
  redis-server --port $port --save '' --appendonly no --dir /work/p40/d > /work/p40/redis.log 2>&1 &
  sys=redis
fi
pid=$!
sleep 1.5
/work/p40/bench-lazy run-one --system $sys --value-size 8192 --keys 16384 --cache-bytes 8388608 --data-mib 128 --dir /work/p40/rd --json /work/p40/rows-$which.json --addr 127.0.0.1:$port --pid $pid > /work/p40/run-$which.log 2>&1
kill $pid; wait $pid 2>/dev/null
python3 - $which <<'PY'
import json,sys
d=json.load(open(f"/work/p40/rows-{sys.argv[1]}.json"))
rows=d["rows"] if isinstance(d,dict) and "rows" in d else d
for r in rows:
    if isinstance(r,dict):
        print(sys.argv[1], r.get("workload"), round(r.get("ops_per_sec",0)), r.get("cpu_s_per_mop") or r.get("cpu"))
PY
