#!/bin/bash
# rb.sh BIN PORT: a fresh plp drive (sim device, timing none), 100,000 keys of 8 KiB loaded with
# redis-benchmark SET (50 connections, pipeline 16), then N (200,000) requests of CMD (GET;
# e.g. CMD="MGET key:__rand_int__ ... x10") at 50 connections, pipeline P (1); prints the
# throughput, the server's CPU time for the second run (centiseconds) and the cache hit rate.
BIN=$1; PORT=$2; d=${WS:-/work/ws}/rb$PORT; rm -rf $d; mkdir -p $d
$BIN --bind 127.0.0.1 --port $PORT --device sim --capacity 8GiB --timing none --data-dir $d --durability plp > $d.log 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
redis-benchmark -p $PORT -c 50 -P 16 -n 100000 -r 100000 -d 8192 -t set -q 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
redis-benchmark -p $PORT -c 50 -P ${P:-1} -n ${N:-200000} -r 100000 -d 8192 ${CMD:--t get} -q 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo "cpu_cs=$((t1-t0)) $(redis-cli -p $PORT info | tr -d '\r' | grep -E '^value_cache_hit_rate|^page_reads' | tr '\n' ' ')"
kill $pid; wait $pid 2>/dev/null; rm -rf $d
