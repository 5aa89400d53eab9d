#!/bin/bash
# cold.sh BIN PORT: load 100k x 8KiB keys, restart, cold GETs c50 P1, report rps & CPU/op
BIN=$1; PORT=$2; d=/work/ws/cold$PORT
if [ ! -d $d.seed ]; then
  rm -rf $d; mkdir -p $d
  $BIN --bind 127.0.0.1 --port $PORT --device sim --capacity 4GiB --timing none --data-dir $d --durability plp > $d.log 2>&1 & pid=$!
  for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
  redis-benchmark -p $PORT -c 8 -P 16 -n 300000 -r ${KEYS:-100000} -d 8192 -t set -q > /dev/null 2>&1
  kill $pid; wait $pid; cp -r $d $d.seed
fi
rm -rf $d; cp -r $d.seed $d
$BIN --bind 127.0.0.1 --port $PORT --device sim --capacity 4GiB --timing none --data-dir $d --durability plp > $d.log 2>&1 & pid=$!
for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
if [ -n "$PERF" ]; then (sleep 1; perf record -F 1999 -g -o $PERF -p $pid -- sleep ${PS:-3} > /dev/null 2>&1) & pp=$!; fi
out=$(redis-benchmark -p $PORT -c ${C:-50} -P ${P:-1} -n ${N:-200000} -r ${KEYS:-100000} -d 8192 -t get -q 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
rps=$(echo "$out" | grep -oE "[0-9.]+ requests per" | cut -d' ' -f1)
extra=$(redis-cli -p $PORT info | tr -d '\r' | grep -E '^value_cache_hit_rate|^page_reads:' | tr '\n' ' ')
echo "$(basename $BIN) C=${C:-50} P=${P:-1} rps=$rps cpu_us_per_op=$(python3 -c "print(round(($t1-$t0)*10000/${N:-200000},2))") $extra"
[ -n "$pp" ] && wait $pp
kill $pid; wait $pid 2>/dev/null
