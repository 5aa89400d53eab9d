#!/bin/bash
# ycsys.sh BIN|redis W PORT: syscalls per op during a YCSB run (perf trace -s, 3 s)
BIN=$1; W=$2; PORT=$3; d=/tmp/ycs$PORT; rm -rf $d; mkdir -p $d
if [ "$BIN" = redis ]; then redis-server --port $PORT --save "" --appendonly no --dir $d > $d.log 2>&1 &
else $BIN --bind 127.0.0.1 --port $PORT --capacity 2GiB --data-dir $d/d --durability plp --value-cache-size 64MiB > $d.log 2>&1 & fi
pid=$!
for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
(cd /work/main && cargo xtask ycsb --workload $W --binding redis --records 5000 --threads 4 --operations 400000 --hosts 127.0.0.1:$PORT) > $d.ycsb 2>&1 &
y=$!
sleep 5
c0=$(redis-cli -p $PORT info stats | tr -d '\r' | grep total_commands_processed | cut -d: -f2)
perf trace -s -p $pid -- sleep 3 2> $d.trace > /dev/null
c1=$(redis-cli -p $PORT info stats | tr -d '\r' | grep total_commands_processed | cut -d: -f2)
wait $y
kill $pid; wait $pid 2>/dev/null
echo "commands in window: $((c1-c0))"
grep -E "^ +[a-z_0-9]+ +[0-9]+" $d.trace | awk -v n=$((c1-c0)) '{printf "%-16s %8d calls  %.3f per command  total %s ms\n", $1, $2, $2/n, $4}' | sort -k2 -n -r | head -20
grep -E "\(\d+\)|^ [a-z-].*\([0-9]+\)" $d.trace | head
