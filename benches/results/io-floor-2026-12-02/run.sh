#!/bin/bash
# fio's own CPU per 8 KiB I/O on this host (io_uring, O_DIRECT, a 2 GiB file on the scratch
# file system): random reads at depth 32, 4 and 1; sequential and random 8 KiB writes at
# depth 32; sequential writes of 32-128 KiB (pages merged) at depth 8.
# Usage: run.sh DIR (a scratch directory on the file system under test).
set -e
cd "$1"
fallocate -l 2G fio.img
cpu() { python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))['jobs'][0]
side = j['read'] if j['read']['total_ios'] else j['write']
rt = j['job_runtime'] / 1000
pages = side['io_bytes'] / 8192
cpu = (j['usr_cpu'] + j['sys_cpu']) / 100 * rt
print(f"{sys.argv[2]}: {side['total_ios']/rt:,.0f} I/O/s, {pages/rt:,.0f} 8K pages/s, "
      f"CPU {cpu/side['total_ios']*1e6:.1f} us per I/O, {cpu/pages*1e6:.2f} us per 8K page, "
      f"mean latency {side['lat_ns']['mean']/1000:.0f} us")
PY
}
job() { fio --name=x --filename=fio.img --size=2g --rw=$1 --bs=$2 --iodepth=$3 --ioengine=io_uring \
  --direct=1 --runtime=8 --time_based --output-format=json > out.json 2>/dev/null; cpu out.json "$1 bs=$2 qd$3"; }
# Every block written once first (not measured): a laid-out file's first writes convert its
# extents, and reads of blocks never written cost no device read.
fio --name=layout --filename=fio.img --size=2g --rw=write --bs=1m --iodepth=8 --ioengine=io_uring \
  --direct=1 --output-format=json > /dev/null 2>&1
job write 8k 32
job randwrite 8k 32
for qd in 32 4 1; do job randread 8k $qd; done
for bs in 32k 64k 128k; do job write $bs 8; done
rm -f fio.img out.json
