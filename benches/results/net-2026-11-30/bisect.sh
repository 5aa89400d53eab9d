#!/bin/bash
# usage: bisect.sh ROUNDS BIN...   8 KiB SET c1 and 100 B SET c50 P1, CPU per op
set -u
ROUNDS=$1; shift
measure() {
  local label=$1 pid=$2 name=$3 n=$4; shift 4
  local U0 S0 U1 S1 R
  read -r U0 S0 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  R=$(redis-benchmark -p 7010 -n "$n" -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE "[0-9.]+ requests per second" | tail -1 | awk '{print $1}')
  read -r U1 S1 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  printf "%-16s %-10s %10s ops/s  user %6.1f  sys %6.1f  us/op\n" "$label" "$name" "$R" \
    "$(echo "($U1-$U0)*10000/$n" | bc -l)" "$(echo "($S1-$S0)*10000/$n" | bc -l)"
}
one() {
  local BIN=$1 D P
  D=$(mktemp -d /tmp/bisect.XXXX)
  if [ "$BIN" = redis-server ]; then redis-server --port 7010 --save "" --appendonly no > "$D/log" 2>&1 &
  else "$BIN" --port 7010 --data-dir "$D/data" --durability plp --capacity 2GiB > "$D/log" 2>&1 & fi
  P=$!
  for _ in $(seq 100); do redis-cli -p 7010 ping >/dev/null 2>&1 && break; sleep 0.1; done
  local L; L=$(basename "$BIN")
  measure "$L" $P SET8K-c1 20000 -r 100000 -d 8192 -c 1 -t set
  measure "$L" $P SET100-c50 200000 -r 100000 -d 100 -c 50 -t set
  redis-cli -p 7010 shutdown nosave >/dev/null 2>&1; wait $P 2>/dev/null; rm -rf "$D"
}
for r in $(seq "$ROUNDS"); do echo "== round $r"; for b in "$@"; do one "$b"; done; done
