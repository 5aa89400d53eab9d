#!/bin/bash
# ab3.sh ROUNDS A B: paired in-process plp run-one (bench binaries A and B alternating),
# printing each SET row with its write-stall counters (abp.py). VS value size, KEYS, DATA MiB.
R=$1; A=$2; B=$3; KEYS=${KEYS:-131072}; DATA=${DATA:-1024}; WS=/work/ws
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for X in $ORDER; do
    rm -rf $WS/ab && mkdir -p $WS/ab
    $X run-one --system ${SYS:-lightstore-local/plp} --value-size ${VS:-8192} --keys $KEYS --cache-bytes $((DATA * 65536)) --data-mib $DATA --dir $WS/ab --json $WS/ab.json > /dev/null 2>&1
    python3 "$(dirname "$0")/abp.py" "round $r $(basename $X)" $WS/ab.json
  done
done
