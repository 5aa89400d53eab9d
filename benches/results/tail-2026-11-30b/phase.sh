#!/bin/bash
# Usage: phase.sh RUN_ERR [MIN_MS]: where within the host's 100 ms scheduling period the slow
# batches (SLOW lines of slow-trace.patch) ended, in 5 ms bins of CLOCK_MONOTONIC mod 100 ms.
grep SLOW "$1" | awk -v min="${2:-15}" '{lat=$7+0; if (lat>min) print $NF, lat}' | python3 -c "
import sys,collections
c=collections.Counter(); n=0
for l in sys.stdin:
    m,lat=map(float,l.split()); c[round((m*1000)%100)//5*5]+=1; n+=1
print(n, 'batches; ends by phase (ms: count):', sorted(c.items()))"
