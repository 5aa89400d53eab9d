#!/bin/bash
BIN=$1; OUT=$2; N=$3; CACHE=$4; shift 4
D=$(mktemp -d /tmp/ooc.XXXX)
$BIN --port 7010 --data-dir "$D/data" --durability plp --capacity 2GiB --value-cache-size $CACHE > "$D/log" 2>&1 & P=$!
for _ in $(seq 100); do redis-cli -p 7010 ping >/dev/null 2>&1 && break; sleep 0.1; done
V=$(head -c 100 /dev/zero | tr '\0' 'v'); FIELDS=""; for i in $(seq 0 9); do FIELDS="$FIELDS field$i $V"; done
redis-benchmark -p 7010 -r 20000 -n 100000 -c 4 -P 4 HSET user__rand_int__ $FIELDS >/dev/null 2>&1
sleep 3
(redis-benchmark -p 7010 -n "$N" -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE "[0-9.]+ requests per second" | tail -1) & B=$!
sleep 1
perf record $PERFARGS -F 999 -p $P -o $OUT -- sleep 4 2>/dev/null >/dev/null
wait $B
redis-cli -p 7010 shutdown nosave >/dev/null 2>&1; wait $P; rm -rf $D
