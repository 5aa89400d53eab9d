#!/bin/bash
# RocksDB BlobDB (no WAL) running the sustained overwrite at 80% full inside a file system
# of the LightStore device's size: an ext4 file system (no reserved blocks, 1032 MiB free
# for files, more than the 1024 MiB device file) on a loop device over an image file.
# Needs root (losetup, mount). usage: bounded.sh HARNESS SCRATCH [X_BLOB_* env: see README]
set -eu
bench=$1 scratch=$2
mkdir -p "$scratch/mnt"
truncate -s 1100M "$scratch/fs.img"
mkfs.ext4 -q -F -m 0 "$scratch/fs.img"
loop=$(losetup --direct-io=on -f --show "$scratch/fs.img")
mount "$loop" "$scratch/mnt"
trap 'umount "$scratch/mnt"; losetup -d "$loop"; rm -f "$scratch/fs.img"' EXIT
df -m "$scratch/mnt" | tail -1
"$bench" run-overwrite --system rocksdb-blobdb/no-wal --device-mib 1024 --fill-percent 80 \
    --dir "$scratch/mnt/b" --json "$scratch/bounded.json" 2>&1 \
    | grep -E "^workload|^Error" || true
