import re, collections
events=[]  # (time, kind, data, stack)
cur=None
hdr=re.compile(r'^(\S.*?)\s+(\d+)\s+([\d.]+):\s+(sched:\w+):\s+(.*)$')
with open('offcpu.txt') as f:
    for line in f:
        if not line.strip():
            if cur: events.append(cur); cur=None
            continue
        m=hdr.match(line)
        if m:
            if cur: events.append(cur)
            cur=[float(m.group(3)), m.group(4), m.group(5), [], m.group(1), int(m.group(2))]
        elif cur is not None:
            p=line.strip().split(None,1)
            cur[3].append(p[1] if len(p)>1 else p[0])
if cur: events.append(cur)
out={}  # tid -> (time, stack, comm)
long=[]
for t,kind,data,stack,comm,tid in events:
    if kind!='sched:sched_switch': continue
    pm=re.search(r'prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+)',data)
    nm=re.search(r'next_comm=(.*?) next_pid=(\d+)',data)
    prev=int(pm.group(1)); state=pm.group(2); nxt=int(nm.group(2))
    out[prev]=(t,stack,comm,state)
    if nxt in out:
        t0,st,c,s=out.pop(nxt)
        d=(t-t0)*1000
        if d>8: long.append((d,t0,nxt,c,s,st))
long.sort(key=lambda x:x[1])
print(len(long),'off-CPU periods > 8 ms')
sig=collections.Counter()
for d,t0,tid,c,s,st in long:
    frames=[x for x in st if not x.startswith(('ffffffff','__schedule','schedule'))]
    rust=[x for x in st if '::' in x][:6]
    sig[(c, ' <- '.join(rust[:5]))]+=1
for (c,k),v in sig.most_common(20):
    print(v, c, k[:400])
print('---- iou-wrk long waits: kernel stacks')
ks=collections.Counter()
for d,t0,tid,c,s,st in long:
    if c.startswith('iou-wrk'):
        ks[' <- '.join([x for x in st if not x.startswith('ffffffff')][:7])]+=1
for k,v in ks.most_common(8): print(v,k[:300])
print('---- timeline (ms from first event) of waits > 15 ms')
t00=events[0][0]
for d,t0,tid,c,s,st in long:
    if d>15:
        rust=[x for x in st if '::' in x][:3]
        print(f"{(t0-t00)*1000:9.1f} {d:6.1f} {c} {tid} {s} {' <- '.join(rust)[:160]}")
