#!/usr/bin/env bash
# The in-process plp R-GET (8 KiB values, 128 MiB, bench all's settings) next to the device's
# own reads measured right before it by the same clients (Row::device_reads_beside), and
# fio's random reads at depth 32 right after, ROUNDS times in turn.
# usage: run.sh ROUNDS HARNESS SCRATCH
set -euo pipefail
rounds=${1:-3}; bench=${2:-target/release/lightstore-bench}; scratch=${3:-/tmp/read-beside}
out=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$scratch"
for i in $(seq 1 "$rounds"); do
  rm -rf "$scratch/run"; mkdir -p "$scratch/run"
  "$bench" run-one --system lightstore-local/plp --value-size 8192 --keys 16384 \
    --cache-bytes 8388608 --data-mib 128 --dir "$scratch/run" --json "$out/run-$i.json" > /dev/null
  rm -f "$scratch/fio.img"
  fio --name=w --filename="$scratch/fio.img" --size=128m --rw=write --bs=1m --direct=1 \
    --ioengine=io_uring --output-format=terse > /dev/null
  fio --name=r --filename="$scratch/fio.img" --size=128m --rw=randread --bs=8k --iodepth=32 \
    --direct=1 --ioengine=io_uring --number_ios=16384 --output-format=json > "$out/fio-$i.json"
  python3 - "$out/run-$i.json" "$out/fio-$i.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
fio = json.load(open(sys.argv[2]))["jobs"][0]["read"]["iops"]
r = next(r for r in rows if r["workload"] == "R-GET")
b = r["device_reads_beside"]
print(f"R-GET {r['ops_per_sec']:.0f}/s  device beside {b:.0f}/s ({r['ops_per_sec']/b:.2f}x)  "
      f"fio after {fio:.0f}/s ({r['ops_per_sec']/fio:.2f}x; beside/fio {b/fio:.2f})")
PY
done
