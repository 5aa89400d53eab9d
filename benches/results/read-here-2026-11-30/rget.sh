#!/bin/bash
# R-GET 8K over RESP: rget.sh BIN N ARGS... (PERF=out to profile)
BIN=$1; N=$2; shift 2
D=/tmp/rget-data; rm -rf $D; mkdir -p $D
$BIN --port 7010 --data-dir "$D/data" --durability plp --capacity 2GiB > "$D/log" 2>&1 & P=$!
for _ in $(seq 100); do redis-cli -p 7010 ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p 7010 -r 40000 -n 80000 -c 4 -P 8 -d 8192 -t set >/dev/null 2>&1
sleep 2
redis-cli -p 7010 info all | grep -E "^(value_cache_hits|value_cache_misses|page_reads)" > $D/i1
snap() { for t in /proc/$P/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | sort; }
snap > $D/a
if [ -n "$PERF" ]; then (sleep 1; perf record --call-graph dwarf,16384 -F 999 -p $P -o $PERF -- sleep 4 >/dev/null 2>&1) & PP=$!; fi
redis-benchmark -p 7010 -n "$N" -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE "[0-9.]+ requests per second" | tail -1
[ -n "$PP" ] && wait $PP
snap > $D/b
redis-cli -p 7010 info all | grep -E "^(value_cache_hits|value_cache_misses|page_reads)" > $D/i2
paste $D/i1 $D/i2 | tr '\r' ' '
join <(awk '{s[$1]+=$2} END{for(k in s) print k, s[k]}' $D/a | sort) <(awk '{s[$1]+=$2} END{for(k in s) print k, s[k]}' $D/b | sort) | awk -v n=$N '{d=$3-$2; if (d>0) printf "%-16s %6.2f us/op\n", $1, d*10000/n}'
redis-cli -p 7010 shutdown nosave >/dev/null 2>&1; wait $P; rm -rf $D
