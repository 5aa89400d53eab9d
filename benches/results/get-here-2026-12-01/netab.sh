#!/bin/bash
# usage: netab.sh ROUNDS BIN_A BIN_B  -- harness run-one lightstore-net/plp 8K against each build in turn
# (CPU=1: each row also gives the drive's CPU seconds per million operations, as ops/cpu)
R=$1; A=$2; B=$3; PORT=7002
stop() { kill -TERM "$1"; while kill -0 "$1" 2> /dev/null; do sleep 0.1; done; }
run() {
  local label=$1 bin=$2 dir=/tmp/netab-$1
  rm -rf $dir $dir.json; mkdir -p $dir
  $bin --bind 127.0.0.1 --port $PORT --device sim --capacity 2GiB --timing none --data-dir $dir/d --durability plp > $dir.log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
  local t0; t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  ${BENCH:-target/release/lightstore-bench} run-one --system lightstore-net/plp --value-size ${D:-8192} --keys ${K:-16384} \
    --cache-bytes 8388608 --data-mib 128 --dir $dir/w --json $dir.json --addr 127.0.0.1:$PORT --pid $pid > /dev/null 2>&1
  local t1; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  stop $pid
  python3 - "$label" "$dir.json" "$t0" "$t1" <<'PY'
import json,os,sys
label,path,t0,t1=sys.argv[1],sys.argv[2],float(sys.argv[3]),float(sys.argv[4])
d=json.load(open(path))
rows=d.get('rows',d) if isinstance(d,dict) else d
out=[]
for r in rows:
    w=r.get('workload') or r.get('name'); ops=r.get('ops_per_sec') or r.get('ops')
    cpu=f"/{r.get('cpu_s_per_mop',0):.1f}" if os.environ.get('CPU') else ''
    out.append(f"{w}={ops:.0f}{cpu}" if isinstance(ops,(int,float)) else f"{w}={ops}")
print(label, ' '.join(out), f"cpu_s={(t1-t0)/100:.2f}")
PY
}
for i in $(seq "$R"); do
  if [ $((i % 2)) = 1 ]; then run A "$A"; run B "$B"; else run B "$B"; run A "$A"; fi
done
