exec(open('offcpu.py').read().split("print(len(long)")[0])
import collections
c2=collections.Counter()
for d,t0,tid,c,s,st in long:
    if c.startswith('bench') and any('io_uring_enter' in x for x in st) and d>8:
        rust=[x for x in st if '::' in x][3:12]
        c2[' <- '.join(rust)]+=1
for k,v in c2.most_common(5): print(v, k[:900]); print()
