#!/bin/bash
# hsab.sh ROUNDS BIN_A BIN_B [redis-benchmark args]: paired fresh plp drives (order alternating), one redis-benchmark load each; rps and drive CPU us/op
R=$1; A=$2; B=$3; shift 3; ARGS=${@:--c 4 -P 1 -n 200000 -r 50000 -d 100 -t hset}
N=$(echo "$ARGS" | grep -oE "\-n [0-9]+" | cut -d' ' -f2)
one() {
    local bin=$1 d=/work/ws/hs7005; rm -rf $d; mkdir -p $d
    $bin --bind 127.0.0.1 --port 7005 --capacity 2GiB --data-dir $d/d --durability plp > $d.log 2>&1 &
    local pid=$!
    for _ in $(seq 100); do redis-cli -p 7005 ping > /dev/null 2>&1 && break; sleep 0.2; done
    local t0; t0=$(awk '{print $14+$15}' /proc/$pid/stat)
    local out; out=$(redis-benchmark -p 7005 $ARGS -q 2>&1 | tr "\r" "\n" | grep -a "requests per" | tail -1)
    local t1; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
    kill $pid; wait $pid 2>/dev/null
    echo "$(basename $bin) $(echo $out | cut -c1-60) cpu_us_per_op=$(python3 -c "print(round(($t1-$t0)*10000/$N,2))")"
}
for i in $(seq $R); do
  if [ $((i % 2)) = 1 ]; then one $A; one $B; else one $B; one $A; fi
done
