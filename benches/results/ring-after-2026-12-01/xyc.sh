#!/bin/bash
# xyc.sh ROUNDS W: the harness's YCSB (stock binding, both sides, 1 run each) in /work/full-run (1ac432a) and /work/main in turn
R=$1; W=$2
for i in $(seq $R); do
  if [ $((i % 2)) = 1 ]; then ORDER="/work/full-run /work/main"; else ORDER="/work/main /work/full-run"; fi
  for dir in $ORDER; do
    (cd $dir && timeout 900 cargo xtask ycsb --workload $W --binding redis --against both --durability plp --records 5000 --threads 4 --repeat 1 > /work/ws/xyc-run.log 2>&1)
    row=$(grep -E "^\| [A-F] \| [0-9]" /work/ws/xyc-run.log | head -2 | tr '\n' ' ')
    echo "round $i $(basename $dir) $(git -C $dir log --oneline | head -1 | cut -c1-7): $row"
  done
done
