#!/bin/bash
# CPU per operation of drive builds (plp) on YCSB's record shape, one fresh drive per run,
# interleaved round by round: 5,000 hashes of ten 100-byte fields loaded, then 50,000 HSETs
# of one field (YCSB's updates: the memtable then holds ~100K versions in several runs),
# then HGETALL (YCSB's read) and HMGET of all ten fields at 4 connections, and 100-byte
# GET of the hashes' neighbours' strings at 50 connections x pipeline 16.
# User and system CPU-seconds per million operations from /proc/<pid>/stat around each run.
#
# usage: run.sh ROUNDS BIN [BIN...]     (BIN: a drive binary, or `redis-server`)
set -u
ROUNDS=$1; shift
V=$(head -c 100 /dev/zero | tr '\0' 'v')
FIELDS=""; NAMES=""
for i in $(seq 0 9); do FIELDS="$FIELDS field$i $V"; NAMES="$NAMES field$i"; done
measure() { # label pid name n args...
  local label=$1 pid=$2 name=$3 n=$4; shift 4
  local U0 S0 U1 S1 R
  read -r U0 S0 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  R=$(redis-benchmark -p 7010 -n "$n" -q "$@" 2>/dev/null | tr '\r' '\n' \
      | grep -oE "[0-9.]+ requests per second" | tail -1 | awk '{print $1}')
  read -r U1 S1 < <(awk '{print $14, $15}' /proc/"$pid"/stat)
  printf "%-14s %-8s %10s ops/s  user %6.2f  sys %6.2f  CPU-s/M\n" "$label" "$name" "$R" \
    "$(echo "($U1-$U0)/100/($n/1000000)" | bc -l)" "$(echo "($S1-$S0)/100/($n/1000000)" | bc -l)"
}
one() { # bin
  local BIN=$1 D P
  D=$(mktemp -d /tmp/cpu-per-op.XXXX)
  if [ "$BIN" = redis-server ]; then
    redis-server --port 7010 --save "" --appendonly no > "$D/log" 2>&1 &
  else
    "$BIN" --port 7010 --data-dir "$D/data" --durability plp --capacity 2GiB > "$D/log" 2>&1 &
  fi
  P=$!
  for _ in $(seq 100); do redis-cli -p 7010 ping >/dev/null 2>&1 && break; sleep 0.1; done
  # shellcheck disable=SC2086
  redis-benchmark -p 7010 -r 5000 -n 5000 -c 8 -P 8 HSET user__rand_int__ $FIELDS >/dev/null 2>&1
  redis-benchmark -p 7010 -r 5000 -n 50000 -c 4 HSET user__rand_int__ field3 "$V" >/dev/null 2>&1
  local L; L=$(basename "$BIN")
  # shellcheck disable=SC2086
  measure "$L" $P HGETALL 200000 -r 5000 -c 4 HGETALL user__rand_int__
  # shellcheck disable=SC2086
  measure "$L" $P HMGET 200000 -r 5000 -c 4 HMGET user__rand_int__ $NAMES
  measure "$L" $P HSET 200000 -r 5000 -c 4 HSET user__rand_int__ field3 "$V"
  redis-cli -p 7010 shutdown nosave >/dev/null 2>&1; wait $P 2>/dev/null; rm -rf "$D"
}
for r in $(seq "$ROUNDS"); do
  echo "== round $r"
  for b in "$@"; do one "$b"; done
done
