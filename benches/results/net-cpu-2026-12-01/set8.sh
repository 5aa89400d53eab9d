#!/bin/bash
# set8.sh BIN|redis PORT: D-byte SETs over RESP, C conns, P pipeline, N ops over KEYS keys; prints rps and server CPU us/op
BIN=$1; PORT=$2; d=/work/ws/s8$PORT; CAP=${CAP:-8GiB}; . $(dirname $0)/serve.sh
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
if [ -n "$PERF" ]; then (sleep 2; perf record -F 1999 --call-graph dwarf,16384 -o $PERF -p $pid -- sleep ${PS:-3} > /dev/null 2>&1) & pp=$!; fi
out=$(redis-benchmark -p $PORT -c ${C:-50} -P ${P:-16} -n ${N:-300000} -r ${KEYS:-100000} -d ${D:-8192} -t set -q 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
rps=$(echo "$out" | grep -oE "[0-9.]+ requests per" | cut -d' ' -f1)
echo "$(basename $BIN) rps=$rps cpu_us_per_op=$(python3 -c "print(round(($t1-$t0)*10000/${N:-300000},2))")"
[ -n "$pp" ] && wait $pp
kill $pid; wait $pid 2>/dev/null; rm -rf $d
