#!/bin/bash
# hga.sh BIN|redis PORT: HGETALL of YCSB-like hashes (KEYS hashes of 10 fields x 100 B), C conns, P pipeline
BIN=$1; PORT=$2; d=/work/ws/hga$PORT; . $(dirname $0)/serve.sh
V=$(printf 'v%.0s' $(seq 100))
K=${KEYS:-5000}
python3 - $K $V <<'PY' | redis-cli -p $PORT --pipe > /dev/null
import sys
k=int(sys.argv[1]); v=sys.argv[2]
out=sys.stdout
for i in range(k):
    args=[b"HSET", b"user:%012d" % i]
    for f in range(10):
        args += [b"field%d" % f, v.encode()]
    out.write("*%d\r\n" % len(args))
    for a in args:
        out.write("$%d\r\n%s\r\n" % (len(a), a.decode()))
PY
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
if [ -n "$PERF" ]; then (sleep 1; perf record -F 1999 --call-graph dwarf,16384 -o $PERF -p $pid -- sleep ${PS:-3} > /dev/null 2>&1) & pp=$!; fi
out=$(redis-benchmark -p $PORT -c ${C:-50} -P ${P:-1} -n ${N:-300000} -r $K -q HGETALL user:__rand_int__ 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
rps=$(echo "$out" | grep -oE "[0-9.]+ requests per" | cut -d' ' -f1)
echo "$(basename $BIN) rps=$rps cpu_us_per_op=$(python3 -c "print(round(($t1-$t0)*10000/${N:-300000},2))") $(redis-cli -p $PORT hlen user:000000000001)"
[ -n "$pp" ] && wait $pp
kill $pid; wait $pid 2>/dev/null; rm -rf $d
