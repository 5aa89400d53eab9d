#!/bin/bash
# Z-GET op count A/B: old harness (one pass per key) vs new (ZIPF_MIN_OPS), same drive binary.
cd /work/p38/zab
for r in $(seq 1 $1); do
  for b in old new; do
    ./bench-$b all --system lightstore-net/plp --system redis --data-mib 128 --skip-extras --repeat 1 \
      --lightstore /work/main/target/release/lightstore --out $b-$r --scratch /work/p38/zab/s > $b-$r.log 2>&1
    echo "$b-$r: $(grep -h 'Z-GET' $b-$r.log | sed 's/.*Z-GET/Z-GET/' | tr '\n' ' ')"
  done
done
