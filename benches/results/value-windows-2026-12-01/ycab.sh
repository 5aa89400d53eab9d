#!/bin/bash
# ycab.sh ROUNDS DRIVE_A DRIVE_B: YCSB (stock redis binding, 4 threads, 20,000 records) on a
# fresh plp drive of each build in turn (value cache $CACHE, default 4MiB), workloads $W (c)
R=$1; A=$2; B=$3; W=${W:-c}; CACHE=${CACHE:-4MiB}; PORT=7012
run() {
  local bin=$1 d=/tmp/ycab
  rm -rf $d; mkdir -p $d
  $bin --bind 127.0.0.1 --port $PORT --device sim --capacity 2GiB --timing none --data-dir $d/d --durability plp --value-cache-size $CACHE > $d.log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
  local t0; t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  (cd /work/main && cargo xtask ycsb --workload $W --binding redis --records 20000 --threads 4 --hosts 127.0.0.1:$PORT) > $d.ycsb 2>&1
  local t1; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  local hr; hr=$(redis-cli -p $PORT info | tr -d '\r' | grep -E "^value_cache_hit_rate|^page_reads" | tr '\n' ' ')
  kill $pid; wait $pid 2>/dev/null
  echo "$(basename $bin) $(grep -A20 '== YCSB' $d.ycsb | awk 'NR>2 && NF>2 {printf "%s=%s ", $1, $3}') cpu_s=$(( (t1-t0) ))cs $hr"
}
for i in $(seq $R); do
  if [ $((i % 2)) = 1 ]; then run $A; run $B; else run $B; run $A; fi
done
