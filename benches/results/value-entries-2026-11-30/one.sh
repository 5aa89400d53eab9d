#!/bin/bash
# one.sh BIN WORKLOAD -> run-phase throughput, cache hits/misses and drive CPU ticks over load+run
BIN=$1; W=$2; D=/tmp/vc/d; rm -rf $D; mkdir -p $D
$BIN --port 7010 --data-dir $D --device file:$D/dev.img --capacity 2GiB --durability plp --value-cache-size ${CACHE:-4MiB} > $D/log 2>&1 &
PID=$!
sleep 1.5
cd /work/main
T0=$(awk '{print $14+$15}' /proc/$PID/stat)
OUT=$(cargo xtask ycsb --hosts 127.0.0.1:7010 --binding redis --records ${RECORDS:-20000} --threads 4 --workload $W 2>&1 | grep -A1 "run ops/s" | tail -1)
T1=$(awk '{print $14+$15}' /proc/$PID/stat)
INFO=$(redis-cli -p 7010 info | grep -E "value_cache_(hits|misses|used_bytes):|^page_reads:" | tr -d '\r' | tr '\n' ' ')
kill $PID; wait $PID 2>/dev/null
echo "$(basename $BIN) | $OUT | $INFO | cpu_ticks $((T1-T0))"
