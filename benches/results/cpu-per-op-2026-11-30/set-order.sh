#!/bin/bash
# Pipelined 100 B SET (50 x 16) on fresh drives of the given builds, in the order given, three rounds.
# usage: set-order.sh BIN...
for r in 1 2 3; do for BIN in "$@"; do
D=$(mktemp -d /tmp/s.XXXX); $BIN --port 7010 --data-dir $D/data --durability plp --capacity 2GiB > $D/log 2>&1 & P=$!
for _ in $(seq 100); do redis-cli -p 7010 ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p 7010 -t set -r 20000 -n 200000 -c 50 -P 16 -d 100 -q >/dev/null 2>&1
read -r U0 S0 < <(awk '{print $14, $15}' /proc/$P/stat)
R=$(redis-benchmark -p 7010 -t set -r 20000 -n 1000000 -c 50 -P 16 -d 100 -q 2>/dev/null | tr '\r' '\n' | grep -oE "[0-9.]+ requests per second" | tail -1)
read -r U1 S1 < <(awk '{print $14, $15}' /proc/$P/stat)
echo "$(basename $BIN) $R user $(( U1-U0 )) sys $(( S1-S0 )) (ticks per 1M)"
redis-cli -p 7010 shutdown nosave >/dev/null 2>&1; wait $P; rm -rf $D
done; done
