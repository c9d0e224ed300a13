import sys, timeit
from operator import attrgetter, is_not, itemgetter
from itertools import repeat
import numpy as np
sys.argv = sys.argv[:1]
from benchmarks import decode_batch as d
r = d.verikv_running("builtin", 1024, 16)
co = r.manager.coordinator
reqs = r.requests
print("decode_work listcomp", min(timeit.repeat(lambda: co.decode_work(reqs, 1), number=200, repeat=7)) / 200 / 1024 * 1e9, "ns/request")
from verikv.coordinators import _NO_RECORD
get = co.records.get
rid, nct, st = attrgetter("_request_id"), attrgetter("_num_computed_tokens"), attrgetter("_status")
rq, pg, ca = attrgetter("request"), attrgetter("pages"), attrgetter("cache_at")
first = itemgetter(0)
ps = 16
def vec():
    recs = list(map(get, map(rid, reqs), repeat(_NO_RECORD)))
    bad_obj = list(map(is_not, map(rq, recs), reqs))
    pages = list(map(pg, recs))
    if None in pages: return None
    held = np.fromiter(map(len, map(first, pages)), np.int64, len(reqs))
    n = np.fromiter(map(nct, reqs), np.int64, len(reqs)) + 1
    cat = np.fromiter(map(ca, recs), np.int64, len(reqs))
    status = np.fromiter(map(st, reqs), np.int64, len(reqs))
    ok = (cat > n) & (n <= held * ps) & (status <= 2) & ~np.array(bad_obj)
    return np.flatnonzero(~ok).tolist()
print("numpy gather", min(timeit.repeat(vec, number=200, repeat=7)) / 200 / 1024 * 1e9, "ns/request")
