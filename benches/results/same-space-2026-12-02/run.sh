#!/bin/bash
# Sustained random overwrite at 80% full (1 GiB device), RocksDB BlobDB (no WAL) with its
# peak space metered, then LightStore plp on a device of BlobDB's peak space with BlobDB's
# keys and overwrites, then LightStore plp on the 1 GiB device; ROUNDS rounds, one line each.
# usage: run.sh ROUNDS HARNESS SCRATCH   (HARNESS: a lightstore-bench built with `peers`)
set -eu
rounds=$1 bench=$2 scratch=$3
mkdir -p "$scratch"
one() { # name args...
    local name=$1; shift
    rm -rf "$scratch/d"
    "$bench" run-overwrite "$@" --dir "$scratch/d" --json "$scratch/$name.json" > /dev/null
    rm -rf "$scratch/d"
}
for r in $(seq 1 "$rounds"); do
    one blobdb --system rocksdb-blobdb/no-wal --device-mib 1024 --fill-percent 80
    one same --system lightstore-local/plp --device-mib 1024 --fill-percent 80 \
        --same-space-as "$scratch/blobdb.json"
    one plp --system lightstore-local/plp --device-mib 1024 --fill-percent 80
    python3 - "$scratch" "$r" <<'PY'
import json, sys
d, r = sys.argv[1], sys.argv[2]
out = []
for n in ("blobdb", "same", "plp"):
    j = json.load(open(f"{d}/{n}.json"))
    out.append(f"{n} {j['capacity_bytes']>>20}MiB keys {j['keys']} ops/s {j['ops_per_sec']:.0f} WA {j['final_wa']:.2f} peak {j['peak_footprint_bytes']>>20}MiB")
b = json.load(open(f"{d}/blobdb.json"))["ops_per_sec"]
s = json.load(open(f"{d}/same.json"))["ops_per_sec"]
p = json.load(open(f"{d}/plp.json"))["ops_per_sec"]
print(f"round {r}: " + " | ".join(out) + f" | same/blobdb {s/b:.2f} plp/blobdb {p/b:.2f}", flush=True)
PY
done
