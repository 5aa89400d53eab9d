#!/bin/bash
# CPU per operation of the drive (plp) against redis-server, pipelined 100 B GET and SET over
# a hot set of 20,000 keys (50 connections x pipeline 16), for one or more drive binaries,
# interleaved round by round: user and system CPU-seconds per million operations read from
# /proc/<pid>/stat around each redis-benchmark run.
#
# usage: run.sh ROUNDS BIN [BIN...]
set -u
ROUNDS=$1; shift
run() { # label port pid args...
  local name=$1 port=$2 pid=$3; shift 3
  read -r U0 S0 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  local R
  R=$(redis-benchmark -p "$port" -r 20000 -d 100 "$@" -q 2>/dev/null | tr '\r' '\n' \
      | grep -oE "[0-9.]+ requests per second" | tail -1 | awk '{print $1}')
  read -r U1 S1 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  local N
  N=$(echo "$@" | grep -oE "\-n [0-9]+" | awk '{print $2}')
  printf "%-14s %-30s %10s ops/s  user %5.2f sys %5.2f CPU-s/M\n" "$name" "$*" "$R" \
    "$(echo "($U1-$U0)/100/($N/1000000)" | bc -l)" "$(echo "($S1-$S0)/100/($N/1000000)" | bc -l)"
}
one() { # bin
  local BIN=$1 D
  D=$(mktemp -d /tmp/cpu-per-op.XXXX)
  "$BIN" --port 7010 --data-dir "$D/data" --durability plp --capacity 2GiB > "$D/log" 2>&1 &
  local DP=$!
  redis-server --port 7011 --save "" --appendonly no > "$D/rlog" 2>&1 &
  local RP=$!
  for _ in $(seq 100); do
    redis-cli -p 7010 ping >/dev/null 2>&1 && redis-cli -p 7011 ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  for p in 7010 7011; do
    redis-benchmark -p $p -t set -r 20000 -n 100000 -c 50 -P 16 -d 100 -q >/dev/null 2>&1
  done
  for args in "-t get -n 1000000 -c 50 -P 16" "-t set -n 1000000 -c 50 -P 16"; do
    # shellcheck disable=SC2086
    run "$(basename "$BIN")" 7010 $DP $args
    # shellcheck disable=SC2086
    run redis-server 7011 $RP $args
  done
  kill $DP $RP; wait $DP $RP 2>/dev/null; rm -rf "$D"
}
for r in $(seq "$ROUNDS"); do
  echo "== round $r"
  for b in "$@"; do one "$b"; done
done
