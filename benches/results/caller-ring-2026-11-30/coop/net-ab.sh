#!/bin/bash
# usage: net-ab.sh ROUNDS DRIVE_A DRIVE_B: fresh plp drive per run; 20,000 keys of 8 KiB
# (160 MB, over the 64 MiB value cache); GET at 50 connections (pipeline 1 and 16), SET at 50.
set -u
R=$1; A=$2; B=$3
measure() { # label pid name n args...
  local label=$1 pid=$2 name=$3 n=$4; shift 4
  local U0 S0 U1 S1 X
  read -r U0 S0 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  X=$(redis-benchmark -p 7010 -n "$n" -q "$@" 2>/dev/null | tr '\r' '\n' | grep -oE "[0-9.]+ requests per second" | tail -1 | awk '{print $1}')
  read -r U1 S1 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  printf "%-12s %-8s %10s ops/s  CPU %6.2f s/M\n" "$label" "$name" "$X" "$(echo "($U1-$U0+$S1-$S0)/100/($n/1000000)" | bc -l)"
}
one() {
  local BIN=$1 D P
  D=$(mktemp -d /tmp/netab.XXXX)
  "$BIN" --port 7010 --data-dir "$D/data" --durability plp --capacity 2GiB > "$D/log" 2>&1 &
  P=$!
  for _ in $(seq 100); do redis-cli -p 7010 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-benchmark -p 7010 -r 20000 -n 40000 -c 50 -P 16 -t set -d 8192 >/dev/null 2>&1
  local L; L=$(basename "$BIN")
  measure "$L" $P GET 100000 -r 20000 -c 50 -t get -d 8192
  measure "$L" $P GET-P16 200000 -r 20000 -c 50 -P 16 -t get -d 8192
  measure "$L" $P SET 60000 -r 20000 -c 50 -t set -d 8192
  redis-cli -p 7010 shutdown nosave >/dev/null 2>&1; wait $P 2>/dev/null; rm -rf "$D"
}
for r in $(seq "$R"); do
  if [ $((r % 2)) -eq 1 ]; then one "$A"; one "$B"; else one "$B"; one "$A"; fi
done
