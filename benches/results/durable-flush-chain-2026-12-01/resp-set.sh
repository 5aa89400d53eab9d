#!/bin/bash
# resp-set.sh ROUNDS DRIVE_A DRIVE_B: a fresh durable drive (`--durability sync`, default device),
# 100,000 SETs of 8 KiB over 100,000 keys by redis-benchmark (C connections x P pipelined,
# default 4 x 8, the harness's RESP rows), the two drives in turn; prints requests per second.
R=$1; A=$2; B=$3; PORT=${PORT:-7101}; D=${WS:-/work/ws}/rs
for i in $(seq $R); do
  for bin in $A $B; do
    rm -rf $D && mkdir -p $D
    $bin --bind 127.0.0.1 --port $PORT --capacity 4GiB --data-dir $D --durability sync > $D.log 2>&1 &
    pid=$!
    for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
    r=$(redis-benchmark -p $PORT -c ${C:-4} -P ${P:-8} -n 100000 -r 100000 -d 8192 -t set -q 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1)
    echo "round $i $(basename $bin) $r"
    kill $pid; wait $pid 2>/dev/null
  done
done
rm -rf $D
