import sys, time, gc
sys.path.insert(0, "/work/shared/anchors")
from trace import PROFILES, make_trace, run_trace
import adapters, bench
prof = sys.argv[1]; kind = sys.argv[2]
pr = PROFILES.get(prof)
kw = pr["trace"] if pr else {}
req = pr["requests"] if pr else 1000
npages = pr["num_pages"] if pr else 2048
mr = pr["max_running"] if pr else 64
mml = pr["max_model_len"] if pr else 8192
kw.setdefault("arrival_rate", 0.4)
trace = make_trace(req, 0, **kw)
adapters.load(kind)
for rep in range(2):
    t = bench.Timed(adapters.make(kind, npages, 16, max_model_len=mml))
    gc.collect()
    c = time.process_time()
    st = run_trace(t, trace, mr, npages)
    c = time.process_time() - c
    print(kind, f"cpu {c:.3f}", " ".join(f"{k}:{t.calls[k]}/{t.ns[k]/1e9:.3f}s" for k in bench.TIMED))
