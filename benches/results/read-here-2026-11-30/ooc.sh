#!/bin/bash
# out-of-cache HGETALL: ooc.sh BIN N CACHE ARGS...
BIN=$1; N=$2; CACHE=$3; shift 3
D=$(mktemp -d /tmp/ooc.XXXX)
$BIN --port 7010 --data-dir "$D/data" --durability plp --capacity 2GiB --value-cache-size $CACHE > "$D/log" 2>&1 & P=$!
for _ in $(seq 100); do redis-cli -p 7010 ping >/dev/null 2>&1 && break; sleep 0.1; done
V=$(head -c 100 /dev/zero | tr '\0' 'v'); FIELDS=""; for i in $(seq 0 9); do FIELDS="$FIELDS field$i $V"; done
redis-benchmark -p 7010 -r 20000 -n 100000 -c 4 -P 4 HSET user__rand_int__ $FIELDS >/dev/null 2>&1
redis-cli -p 7010 dbsize
redis-cli -p 7010 info all | grep -E "^(value_cache_hits|value_cache_misses|page_reads|reads_answered_inline)" > $D/i1
snap() { for t in /proc/$P/task/*; do echo "$(cat $t/comm) $(awk '{print $14+$15}' $t/stat)"; done | sort; }
snap > $D/a
redis-benchmark -p 7010 -n "$N" -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE "[0-9.]+ requests per second" | tail -1
snap > $D/b
redis-cli -p 7010 info all | grep -E "^(value_cache_hits|value_cache_misses|page_reads|reads_answered_inline)" > $D/i2
paste $D/i1 $D/i2 | tr '\r' ' '
join <(awk '{s[$1]+=$2} END{for(k in s) print k, s[k]}' $D/a | sort) <(awk '{s[$1]+=$2} END{for(k in s) print k, s[k]}' $D/b | sort) | awk -v n=$N '{d=$3-$2; if (d>0) printf "%-16s %6.2f us/op\n", $1, d*10000/n}'
redis-cli -p 7010 shutdown nosave >/dev/null 2>&1; wait $P; rm -rf $D
