#!/bin/bash
# setlat.sh BIN PORT: 100 B SETs over RESP, 50 conns, P1, 1M fresh keys; prints summary latency line
BIN=$1; PORT=$2; d=/work/ws/sl$PORT; rm -rf $d; mkdir -p $d
$BIN --bind 127.0.0.1 --port $PORT --device sim --capacity 4GiB --timing none --data-dir $d --durability plp > $d.log 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
redis-benchmark -p $PORT -c 50 -P ${P:-1} -n ${N:-1000000} -r 100000000 -d 100 -t set 2>&1 | tr '\r' '\n' | grep -aA1 "avg       min" | tail -1 | tr '\n' ' '
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo " $(basename $BIN) cpu_us_per_op=$(python3 -c "print(round(($t1-$t0)*10000/${N:-1000000},2))")"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
