#!/bin/bash
# ycb4.sh BIN W PORT [perf]: one YCSB run (stock redis binding, 4 threads, 20000 records, 4 MiB value cache) on a fresh plp drive
bin=$1; W=$2; PORT=$3; d=/tmp/ycb$PORT
rm -rf $d; mkdir -p $d
$bin --bind 127.0.0.1 --port $PORT --capacity 2GiB --data-dir $d/d --durability plp --value-cache-size ${VC:-4MiB} > $d.log 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
(cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" && cargo xtask ycsb --workload $W --binding redis --records ${REC:-20000} --threads 4 ${OPS:+--operations $OPS} --hosts 127.0.0.1:$PORT) > $d.ycsb 2>&1 &
y=$!
if [ "$4" = thr ]; then sleep ${PS:-10}; $(dirname $0)/thr.sh $pid 5; redis-cli -p $PORT info | tr -d "\r" | grep -E "page_reads|value_cache_hits"; elif [ -n "$4" ]; then sleep ${PS:-10}; perf record -F 1999 --call-graph dwarf,16384 -o /tmp/ycb.perf -p $pid -- sleep 5 > /dev/null 2>&1; fi
wait $y
t=$(awk '{print $14+$15}' /proc/$pid/stat)
redis-cli -p $PORT info | tr -d '\r' | grep -E "hit_rate|page_reads|keys=|value_cache" | tr '\n' ' '
kill $pid; wait $pid 2>/dev/null
echo "cpu=${t}cs"; grep -A12 '== YCSB' $d.ycsb
rm -rf $d
