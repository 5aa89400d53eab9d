# serve.sh, sourced: starts redis-server (BIN=redis) or the drive BIN on PORT with its data in
# $d (simulated device of ${CAP:-4GiB}, no timing, plp), sets pid, and waits for PING.
rm -rf $d; mkdir -p $d
if [ "$BIN" = redis ]; then
  redis-server --port $PORT --save "" --appendonly no --dir $d > $d.log 2>&1 &
else
  $BIN --bind 127.0.0.1 --port $PORT --device ${DEV:-sim} --capacity ${CAP:-4GiB} --timing none --data-dir $d --durability plp > $d.log 2>&1 &
fi
pid=$!
for _ in $(seq 100); do redis-cli -p $PORT ping > /dev/null 2>&1 && break; sleep 0.2; done
