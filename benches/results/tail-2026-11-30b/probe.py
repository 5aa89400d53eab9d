import time,sys
end=time.monotonic()+float(sys.argv[1]); last=time.monotonic()
st0=None
def steal():
    with open('/proc/stat') as f: return int(f.readline().split()[8])
while True:
    time.sleep(0.001)
    t=time.monotonic()
    if t-last>0.006: print('GAP end %.3f %.1f ms steal %d'%(t,(t-last)*1e3,steal()),flush=True)
    last=t
    if t>end: break
