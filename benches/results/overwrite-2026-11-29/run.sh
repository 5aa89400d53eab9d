#!/bin/bash
# Interleaved A/B of the sustained overwrite: before (89cc48c) and after, plus BlobDB, 3 rounds.
OUT=/work/ow/ab
for r in 1 2 3; do
  for spec in "base lightstore-local/plp" "new lightstore-local/plp" "base lightstore-local" "new lightstore-local" "newpeers rocksdb-blobdb/no-wal"; do
    set -- $spec; b=$1; sys=$2
    bin=/work/ow/$b-bench; [ $b = newpeers ] && bin=/work/ow/new-peers
    tag=$(echo $sys | tr '/' '-')
    rm -rf /work/ow/d
    $bin run-overwrite --system $sys --device-mib 1024 --fill-percent 80 --dir /work/ow/d --json $OUT/$b-$tag-r$r.json > /dev/null 2>&1
    python3 -c "import json,statistics;d=json.load(open('$OUT/$b-$tag-r$r.json'));print('r$r','$b','$sys',round(d['ops_per_sec']),round(d['final_wa'],3),d.get('block_wa') and round(d['block_wa'],3),round(statistics.median([s['p99_us'] for s in d['samples']])))"
  done
done
