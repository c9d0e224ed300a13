"""A seeded chat-serving workload and the FCFS scheduler that replays it on `verikv.CacheManager`.

Shape: a number of requests arriving as a Poisson process; every fresh conversation
opens with one of a few shared system prompts (picked with Zipf weights); about 30 % of requests
are a later turn of a recent conversation, resending its prompt and outputs plus a new user turn;
prompt lengths 200-2,000 tokens and output lengths 50-500 (log-normal, clipped); output tokens are
part of the workload, so every run sees the same tokens.

The scheduler works in steps. Each step it (1) admits waiting requests in arrival order while
fewer than `max_running` run: prefix lookup, then one `allocate_slots` for the uncached rest of the
prompt; the first failure ends admission for that step. An admitted request samples one token.
(2) Every other running request decodes one token with a one-slot `allocate_slots`; when that
fails, the most recently admitted running request is preempted (freed, progress reset, put back at
the head of the queue) until the allocation fits or the request preempted itself. (3) Requests that
produced all their outputs are freed and their page hashes dropped.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TIMED_CALLS = ("new_request", "lookup", "allocate", "append", "free")


@dataclass(frozen=True)
class WorkloadConfig:
    """Parameters of the synthetic chat workload (defaults: the shape of the anchors harness's default trace)."""

    num_requests: int = 1000
    seed: int = 0
    num_system_prompts: int = 4
    arrival_rate: float = 0.4  # requests per scheduler step
    followup_fraction: float = 0.3
    prompt_range: tuple[int, int] = (200, 2000)
    prompt_median: int = 700
    output_range: tuple[int, int] = (50, 500)
    output_median: int = 150
    length_sigma: float = 0.6
    vocab_size: int = 32000


@dataclass(frozen=True)
class TraceRequest:
    """One request of the workload: when it arrives, its prompt, and the tokens it will output."""

    request_id: str
    arrival_step: int
    prompt: tuple[int, ...]
    output: tuple[int, ...]


def _clipped_lognormal(rng: np.random.Generator, median: int, sigma: float, bounds: tuple[int, int]) -> int:
    return int(np.clip(round(median * rng.lognormal(0.0, sigma)), *bounds))


def generate_workload(cfg: WorkloadConfig) -> list[TraceRequest]:
    """Build the request list for `cfg`, sorted by arrival step (ties keep creation order)."""
    rng = np.random.default_rng(cfg.seed)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.integers(0, cfg.vocab_size, size=n).tolist())

    systems = [tokens(int(rng.integers(100, 601))) for _ in range(cfg.num_system_prompts)]
    zipf = 1.0 / np.arange(1, cfg.num_system_prompts + 1)
    zipf /= zipf.sum()
    arrivals = np.cumsum(rng.exponential(1.0 / cfg.arrival_rate, size=cfg.num_requests))
    made: list[TraceRequest] = []
    for i, when in enumerate(arrivals):
        arrival = int(when)
        output = tokens(_clipped_lognormal(rng, cfg.output_median, cfg.length_sigma, cfg.output_range))
        prompt: tuple[int, ...] | None = None
        if made and rng.random() < cfg.followup_fraction:
            parent = made[-50:][int(rng.integers(0, min(50, len(made))))]
            resent = parent.prompt + parent.output + tokens(int(rng.integers(20, 201)))
            if len(resent) <= cfg.prompt_range[1]:
                prompt = resent
                arrival = max(arrival, parent.arrival_step + len(parent.output) + int(rng.integers(5, 51)))
        if prompt is None:
            system = systems[int(rng.choice(cfg.num_system_prompts, p=zipf))]
            total = _clipped_lognormal(rng, cfg.prompt_median, cfg.length_sigma, cfg.prompt_range)
            prompt = system + tokens(max(total - len(system), 1))
        made.append(TraceRequest(f"req-{i}", arrival, prompt, output))
    return sorted(made, key=lambda r: r.arrival_step)  # stable: ties stay in creation order


@dataclass
class ReplayResult:
    """What one replay did: counters, per-call time, and checksums of every allocation decision."""

    wall_s: float = 0.0
    cpu_s: float = 0.0  # process CPU time: less sensitive than wall time to other processes
    steps: int = 0
    admitted: int = 0
    preemptions: int = 0
    hit_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    failed_allocations: int = 0
    pages_hashed: int = 0
    hashing_cpu_s: float = 0.0  # CPU time inside PageHasher.hash_request (incremental hashing)
    peak_pages_used: int = 0
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIMED_CALLS, 0))
    ns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIMED_CALLS, 0))
    alloc_sizes_sha: str = ""
    page_ids_sha: str = ""

    def us_per_call(self, name: str) -> float:
        """Mean microseconds per call of `name` (0 when it was never called)."""
        return self.ns[name] / 1e3 / max(self.calls[name], 1)

    def as_dict(self) -> dict[str, Any]:
        """Flat JSON-ready view, with `us_<call>` means added."""
        out = {k: v for k, v in vars(self).items() if k not in ("calls", "ns")}
        for name in TIMED_CALLS:
            out[f"calls_{name}"] = self.calls[name]
            out[f"us_{name}"] = self.us_per_call(name)
        return out


class _Running:
    """Scheduler-side state of one request: its spec, the engine request, outputs produced so far."""

    __slots__ = ("produced", "request", "spec")

    def __init__(self, spec: TraceRequest, request: Any) -> None:
        self.spec, self.request, self.produced = spec, request, 0


def make_manager(num_pages: int, page_size: int = 16, max_model_len: int = 8192, **options: Any) -> Any:
    """A single-group (full attention) `verikv.CacheManager`; `options` go to its constructor."""
    import verikv

    spec = verikv.FullAttentionSpec(
        page_size=page_size, num_kv_heads=8, head_size=128, dtype=np.float16, use_mla=False
    )
    return verikv.CacheManager(
        num_pages=num_pages,
        kv_cache_groups=[verikv.CacheGroupSpec(kv_cache_spec=spec)],
        max_model_len=max_model_len,
        enable_caching=True,
        **options,
    )


def replay(trace: list[TraceRequest], manager: Any, max_running: int = 64) -> ReplayResult:
    """Run the step scheduler described in the module docstring over `trace` on `manager`."""
    import verikv

    res = ReplayResult()
    clock = time.perf_counter_ns
    calls, ns = res.calls, res.ns
    num_pages = manager.page_pool.num_pages
    min_free = manager.page_pool.get_num_free_pages()
    sizes: list[int] = []
    ids_digest = hashlib.sha256()

    def timed(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        t = clock()
        out = fn(*args)
        ns[name] += clock() - t
        calls[name] += 1
        return out

    def allocate(run: _Running, n_new: int, n_hit: int = 0, hit_pages: Any = None) -> bool:
        new = timed("allocate", manager.allocate_slots, run.request, n_new, n_hit, hit_pages)
        if new is None:
            sizes.append(-1)
            return False
        ids = new.get_page_ids()[0]
        sizes.append(len(ids))
        if ids:
            ids_digest.update(",".join(map(str, ids)).encode() + b";")
        run.request.num_computed_tokens += n_hit + n_new
        return True

    def emit_token(run: _Running) -> None:
        timed("append", run.request.append_output_token_ids, [run.spec.output[run.produced]])
        run.produced += 1

    hasher = manager.hasher
    hash_request = hasher.hash_request

    def counted_hash_request(*args: Any, **kwargs: Any) -> Any:
        """The manager's hasher, counting pages and CPU time (extend() goes through it too)."""
        t = time.process_time_ns()
        keys = hash_request(*args, **kwargs)
        res.hashing_cpu_s += (time.process_time_ns() - t) / 1e9
        res.pages_hashed += len(keys)
        return keys

    hasher.hash_request = counted_hash_request  # instance attribute: shadows the method
    arrivals = deque(trace)
    waiting: deque[_Running] = deque()
    running: list[_Running] = []
    started, started_cpu = time.perf_counter(), time.process_time()
    step = 0
    while arrivals or waiting or running:
        while arrivals and arrivals[0].arrival_step <= step:
            spec = arrivals.popleft()
            waiting.append(_Running(spec, timed("new_request", verikv.Request, spec.request_id, list(spec.prompt))))
        admitted: set[int] = set()
        while waiting and len(running) < max_running:
            run = waiting[0]
            n_tokens = len(run.spec.prompt) + run.produced
            hit_pages, n_hit = timed("lookup", manager.get_computed_pages, run.request)
            if not allocate(run, n_tokens - n_hit, n_hit, hit_pages):
                if not running:
                    raise RuntimeError(f"{run.spec.request_id} ({n_tokens} tokens) does not fit in an empty pool")
                break
            waiting.popleft()
            running.append(run)
            admitted.add(id(run))
            res.admitted += 1
            res.hit_tokens += n_hit
            res.prefill_tokens += n_tokens - n_hit
            emit_token(run)
        for run in list(running):
            if id(run) in admitted or run not in running:
                continue
            while not allocate(run, 1):
                victim = running.pop()
                timed("free", manager.free, victim.request)
                victim.request.num_computed_tokens = 0
                waiting.appendleft(victim)
                res.preemptions += 1
                if victim is run:
                    break
            else:
                emit_token(run)
                res.decode_tokens += 1
        min_free = min(min_free, manager.page_pool.get_num_free_pages())
        for run in [r for r in running if r.produced >= len(r.spec.output)]:
            running.remove(run)
            timed("free", manager.free, run.request)
            manager.free_page_hashes(run.request)
        step += 1
    res.wall_s = time.perf_counter() - started
    del hasher.hash_request
    res.cpu_s = time.process_time() - started_cpu
    res.steps = step
    res.peak_pages_used = num_pages - 1 - min_free
    res.failed_allocations = sizes.count(-1)
    res.alloc_sizes_sha = hashlib.sha256(repr(sizes).encode()).hexdigest()[:16]
    res.page_ids_sha = ids_digest.hexdigest()[:16]
    return res
