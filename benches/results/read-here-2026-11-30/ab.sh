#!/bin/bash
# Paired rounds, base build then new build in turn: ab.sh ROUNDS BASE NEW
# (each script starts a fresh plp drive; see ooc.sh, rget.sh and ../cpu-per-op-2026-11-30b/threads.sh)
R=$1; A=$2; B=$3; H=$(dirname "$0")
F=""; for i in $(seq 0 9); do F="$F field$i"; done
for r in $(seq "$R"); do
  for bin in "$A" "$B"; do
    echo "=== round $r $(basename "$bin")"
    echo "--- HGETALL, 20,000 hashes, 4 MiB value cache, 4 connections"
    "$H/ooc.sh" "$bin" 40000 4MiB -r 20000 -c 4 HGETALL user__rand_int__
    echo "--- HMGET of ten fields, 20,000 hashes, 4 MiB value cache, 4 connections"
    "$H/ooc.sh" "$bin" 40000 4MiB -r 20000 -c 4 HMGET user__rand_int__ $F
    echo "--- GET 8 KiB, 40,000 keys, 64 MiB value cache, 4 connections x pipeline 8"
    "$H/rget.sh" "$bin" 200000 -r 40000 -c 4 -P 8 -t get -d 8192
    echo "--- HMGET of ten fields, 5,000 hashes (in the cache), 4 connections"
    "$H/../cpu-per-op-2026-11-30b/threads.sh" "$bin" 200000 -r 5000 -c 4 HMGET user__rand_int__ $F
  done
done
