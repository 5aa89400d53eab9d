# Value cache granularity: YCSB scrambled zipfian reads of 1.1 KB records, 7 records per 8 KiB page,
# LRU of 4 MiB: whole pages vs per-record entries vs per-record with upgrade on a second miss.
import random, collections, sys
N=20000; PER=7; CAP=4*1024*1024; OVH=64; REC=1130; PAGE=8192
# YCSB ScrambledZipfian: zipfian over 10^10 items (theta .99) hashed mod N; approximate with zipf over N then FNV-hash scramble
import hashlib
random.seed(1)
def zipf_sampler(n, theta=0.99):
    import bisect, itertools
    w=[1/(i**theta) for i in range(1,n+1)]
    c=list(itertools.accumulate(w)); t=c[-1]
    return lambda: bisect.bisect_left(c, random.random()*t)
z=zipf_sampler(N)
perm=list(range(N)); random.shuffle(perm)
# records were inserted in hashed order by 4 threads: page of record r = position in insert order // PER
ins=list(range(N)); random.shuffle(ins); pos={r:i for i,r in enumerate(ins)}
def page_of(r): return pos[r]//PER
class LRU:
    def __init__(s): s.d=collections.OrderedDict(); s.w=0
    def get(s,k):
        if k in s.d: s.d.move_to_end(k); return s.d[k]
    def put(s,k,v,w):
        if k in s.d: s.w-=s.d[k][1]; del s.d[k]
        s.d[k]=(v,w); s.w+=w
        while s.w>CAP: _,(vv,ww)=s.d.popitem(last=False); s.w-=ww
ops=[perm[z()] for _ in range(300000)]
def run(policy):
    c=LRU(); miss=0
    for i,r in enumerate(ops):
        p=page_of(r)
        e=c.get(p)
        hit = e is not None and (e[0]=='page' or r in e[0])
        if i>=100000 and not hit: miss+=1
        if hit: continue
        if policy=='page': c.put(p,'page',PAGE+OVH)
        elif policy=='rec': 
            s=set(e[0]) if e else set(); s.add(r); c.put(p,s,len(s)*REC+OVH)
        elif policy=='upgrade':
            if e: c.put(p,'page',PAGE+OVH)
            else: c.put(p,{r},REC+OVH)
    return miss/200000
for pol in ['page','rec','upgrade']: print(pol, 'miss rate %.3f'%run(pol))
