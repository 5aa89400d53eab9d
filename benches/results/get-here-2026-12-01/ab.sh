#!/bin/bash
# Paired redis-benchmark GETs against two drive builds on the same loaded device.
# usage: ab.sh ROUNDS BIN_A BIN_B   (env: C connections, P pipeline, N requests, D value
# size, K keys, DIR data dir, CMD the workload: `-t get` unless given, e.g.
# `MGET key:__rand_int__ ...`; the device is loaded with K keys on first use)
set -u
R=$1; A=$2; B=$3
C=${C:-50}; P=${P:-1}; N=${N:-300000}; D=${D:-8192}; K=${K:-100000}; DIR=${DIR:-/tmp/get-here-data}
PORT=7001
start() { # bin -> pid
  "$1" --bind 127.0.0.1 --port $PORT --device sim --capacity 8GiB --timing none \
    --data-dir "$DIR" --durability plp > "$DIR.log" 2>&1 &
  echo $!
}
# The drive runs in a command substitution's subshell: not this shell's child to `wait` for.
stop() { kill -TERM "$1"; while kill -0 "$1" 2> /dev/null; do sleep 0.1; done; }
wait_up() { for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && return; sleep 0.2; done; }
if [ ! -d "$DIR" ]; then
  pid=$(start "$A"); wait_up
  redis-benchmark -p $PORT -t set -n $((2 * K)) -r $K -d $D -c 50 -P 16 -q > /dev/null 2>&1
  stop $pid
fi
run() { # label bin
  local pid; pid=$(start "$2"); wait_up
  local t0; t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  local out; out=$(redis-benchmark -p $PORT -n $N -r $K -d $D -c $C -P $P -q ${CMD:--t get} 2> /dev/null \
    | tr '\r' '\n' | grep "requests per second" | tail -1)
  local t1; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  stop $pid
  local rps; rps=$(echo "$out" | sed -E 's/.*: ([0-9.]+) requests.*/\1/')
  python3 -c "c=($t1-$t0)/100; print(f'$1 c=$C P=$P d=$D rps={$rps:.0f} cpu_s={c:.2f} cpu_us_per_op={1e6*c/$N:.1f}')"
}
for i in $(seq "$R"); do
  if [ $((i % 2)) = 1 ]; then run A "$A"; run B "$B"; else run B "$B"; run A "$A"; fi
done
