#!/bin/bash
# vs-rocksdb.sh ROUNDS OLD NEW: in-process durable LightStore (two builds of lightstore-bench with
# the `peers` feature) and RocksDB leveled with a synced WAL, in turn: 8 KiB values, DATA MiB of
# data (default 128, the full report's scale; DATA * 128 keys), cache 1/16 of the data. Prints
# each row's ops/s.
R=$1; OLD=$2; NEW=$3; WS=${WS:-/work/ws/rk}; DATA=${DATA:-128}; KEYS=$((DATA * 128))
one() { # BIN SYSTEM LABEL
  rm -rf $WS/d && mkdir -p $WS/d
  $1 run-one --system $2 --value-size 8192 --keys $KEYS --cache-bytes $((DATA * 65536)) --data-mib $DATA \
    --dir $WS/d --json $WS/r.json > /dev/null 2>&1
  python3 -c "
import json,sys; d=json.load(open(sys.argv[2])); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
print(sys.argv[1], ' '.join(f\"{r['workload']}={r['ops_per_sec']/1000:.1f}K\" for r in rows))" "$3" $WS/r.json
}
for r in $(seq $R); do
  one $NEW rocksdb-leveled/wal-sync "round $r rocksdb-wal-sync"
  one $OLD lightstore-local "round $r lightstore-before"
  one $NEW lightstore-local "round $r lightstore-chain"
done
