#!/bin/bash
# hot.sh BIN|redis PORT: hot 8 KiB GETs (5,000 keys, all in the value cache) over RESP; C connections (50), P pipeline (1); prints rps and server CPU us/op
BIN=$1; PORT=$2; d=/work/ws/hot$PORT; . $(dirname $0)/../net-cpu-2026-12-01/serve.sh
redis-benchmark -p $PORT -c 8 -P 16 -n ${KEYS:-5000} -r ${KEYS:-5000} -d ${D:-8192} -t set -q > /dev/null 2>&1
# every key once more so each is set (random -r may miss some): sequential fill
redis-benchmark -p $PORT -c 8 -P 16 -n 40000 -r ${KEYS:-5000} -d ${D:-8192} -t set -q > /dev/null 2>&1
redis-benchmark -p $PORT -c 50 -P ${P:-1} -n 50000 -r ${KEYS:-5000} -d ${D:-8192} ${CMD:--t get} -q > /dev/null 2>&1
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
if [ -n "$PERF" ]; then (sleep 1; perf record -F 1999 --call-graph dwarf,16384 -o $PERF -p $pid -- sleep ${PS:-3} > /dev/null 2>&1) & pp=$!; fi
out=$(redis-benchmark -p $PORT -c ${C:-50} -P ${P:-1} -n ${N:-300000} -r ${KEYS:-5000} -d ${D:-8192} ${CMD:--t get} -q 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
rps=$(echo "$out" | grep -oE "[0-9.]+ requests per" | cut -d' ' -f1)
extra=""; [ "$BIN" != redis ] && extra=$(redis-cli -p $PORT info | tr -d '\r' | grep -E '^value_cache_hit_rate|^page_reads:' | tr '\n' ' ')
echo "$(basename $BIN) rps=$rps cpu_us_per_op=$(python3 -c "print(round(($t1-$t0)*10000/${N:-300000},2))") $extra"
[ -n "$pp" ] && wait $pp
kill $pid; wait $pid 2>/dev/null; rm -rf $d
