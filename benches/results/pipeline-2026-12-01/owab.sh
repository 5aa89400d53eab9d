#!/bin/bash
# owab.sh ROUNDS A B: paired sustained random overwrite, plp, 1024 MiB device at 80% (as the full report)
R=$1; A=$2; B=$3; WS=${WS:-/work/ws}
for r in $(seq 1 $R); do
  if [ $((r % 2)) -eq 1 ]; then ORDER="$A $B"; else ORDER="$B $A"; fi
  for X in $ORDER; do
    rm -rf $WS/ow && mkdir -p $WS/ow
    $X run-overwrite --system lightstore-local/plp --device-mib ${DEV:-1024} --fill-percent 80 --dir $WS/ow --json $WS/ow.json > /dev/null 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[2])); print(sys.argv[1], round(d['ops_per_sec']), round(d['samples'][-1]['wa_cumulative'],2))" "round $r $(basename $X)" $WS/ow.json
  done
done
rm -rf $WS/ow
