import json,sys
d=json.load(open(sys.argv[2])); rows=d['rows'] if isinstance(d,dict) and 'rows' in d else d
def st(r):
    c=r.get('engine_counters') or {}
    return f"stall{c.get('write_stall_micros',0)//1000}ms/m{c.get('write_stalls_memtable',0)}/f{c.get('flushes',0)}/c{c.get('compactions',0)}"
print(sys.argv[1], ' '.join(f"{r['workload']}={r['ops_per_sec']/1000:.1f}K/{r['cpu_s_per_mop']:.1f}/wa{(r.get('write_amp') or 0):.2f}/p999={r['p999_us']/1000:.1f}ms/{st(r)}" for r in rows if 'SET' in r['workload']))
