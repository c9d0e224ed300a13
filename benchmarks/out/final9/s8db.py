import gc, sys, statistics
sys.argv = sys.argv[:1]
from benchmarks import decode_batch as d
for scheme in ("sha256", "builtin"):
    for mode in ("gc on", "gc off"):
        xs = []
        for _ in range(7):
            r = d.verikv_running(scheme, 1024, 16)
            gc.collect()
            if mode == "gc off": gc.disable()
            xs.append(d.batch_us(r, 16))
            gc.enable()
        ys = []
        for _ in range(7):
            r = d.verikv_running(scheme, 1024, 16)
            gc.collect()
            if mode == "gc off": gc.disable()
            ys.append(d.per_call_us(r, 16))
            gc.enable()
        print(scheme, mode, "batch", " ".join(f"{x:.2f}" for x in sorted(xs)), "| single", " ".join(f"{x:.2f}" for x in sorted(ys)))
