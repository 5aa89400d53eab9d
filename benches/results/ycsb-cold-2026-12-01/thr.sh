#!/bin/bash
# thr.sh PID SECS: CPU ms per thread over SECS
pid=$1; s=$2
snap() { for t in /proc/$pid/task/*; do echo "$(cat $t/comm) $(awk '{print $14, $15}' $t/stat)"; done; }
a=$(snap); sleep $s; b=$(snap)
paste <(echo "$a") <(echo "$b") | awk '{u=($5-$2)*10; k=($6-$3)*10; if (u+k>0) printf "%-12s usr %5d ms sys %5d ms\n", $1, u, k}'
