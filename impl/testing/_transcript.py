"""The calls a conformance run made to an adapter, kept as readable lines for its failure report.

`RecordedAdapter` wraps an adapter: the operations (``new_request``, ``lookup``, ``allocate``,
``free``, ``finish``, ``cache``, ``reset``, and arming a key failure) are forwarded and written
down with their answers; reading calls (``usage``, ``num_free_pages``, ``page_ids``,
``abstraction``) and anything else are forwarded unrecorded. A line shows only what the call
carried: a request's salt, LoRA identity, images and prompt logprobs appear when it has them
(never under ``features=frozenset()``), keyword arguments when they differ from their defaults,
and requests by their ids::

    r0 = new_request(tokens=[0, 1, 2, 0, 1, 1, 0, 2])
    lookup(r0) -> [[]], 0 tokens
    allocate(r0, num_new_tokens=1) -> [[1]]
    free(r0)
"""

from __future__ import annotations

from typing import Any

from verikv.spec.manager import RequestView
from verikv.testing.adapter import PageManagerAdapter, page_ids_of

MAX_ARGUMENT_CHARS = 120
"""An argument or answer longer than this is cut (an adapter may answer with anything)."""


def _short(text: str) -> str:
    return text if len(text) <= MAX_ARGUMENT_CHARS else text[:MAX_ARGUMENT_CHARS - 3] + "..."


def _ids(value: Any) -> str:
    """Page ids per group as nested lists, or the value itself when it is not page ids."""
    try:
        return _short(str([list(group) for group in page_ids_of(value)]))
    except Exception:  # a malformed answer is shown as it is (the machine reports it)
        return _short(repr(value))


def _request_fields(view: RequestView) -> str:
    """The fields a request carries: its tokens, and the optional ones only when set."""
    fields = [f"tokens={list(view.tokens)}"]
    optional = (("cache_salt", view.cache_salt, None), ("lora_id", view.lora_id, None),
                ("lora_name", view.lora_name, None), ("lora_path", view.lora_path, None),
                ("mm_features", view.mm_features, ()), ("prompt_logprobs", view.prompt_logprobs, False))
    fields += [f"{name}={value!r}" for name, value, absent in optional if value != absent]
    return ", ".join(fields)


def _keywords(**arguments: Any) -> str:
    """``, name=value`` for each argument whose value is not its default (given as a pair)."""
    return "".join(f", {name}={value}" for name, (value, default) in arguments.items() if value != default)


class RecordedAdapter:
    """An adapter whose operations are recorded in ``calls`` (see the module docstring)."""

    def __init__(self, adapter: PageManagerAdapter) -> None:
        self.adapter: PageManagerAdapter = adapter
        self.calls: list[str] = []
        self._names: dict[int, str] = {}
        """id() of each engine request -> its request id (the harness keeps the requests alive)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # (also keeps copy and pickle from recursing before __init__)
            raise AttributeError(name)
        return getattr(self.adapter, name)

    def _name(self, request: Any) -> str:
        return self._names.get(id(request), "<unknown request>")

    def _record(self, call: str, run: Any) -> Any:
        """Run ``run()``; record ``call`` with its answer (or what it raised)."""
        try:
            answer = run()
        except Exception as exc:
            first_line = next(iter(str(exc).splitlines()), "")
            self.calls.append(f"{call} raised {type(exc).__name__}: {_short(first_line)}")
            raise
        return answer

    def new_request(self, view: RequestView) -> Any:
        request = self._record(f"{view.request_id} = new_request({_request_fields(view)})",
                               lambda: self.adapter.new_request(view))
        self._names[id(request)] = view.request_id
        self.calls.append(f"{view.request_id} = new_request({_request_fields(view)})")
        return request

    def lookup(self, request: Any, dp_shard_hint: int | None = None,
               data_parallel_size: int | None = None) -> tuple[Any, int]:
        call = (f"lookup({self._name(request)}"
                f"{_keywords(dp_shard_hint=(dp_shard_hint, None), data_parallel_size=(data_parallel_size, None))})")
        answer = self._record(call, lambda: self.adapter.lookup(request, dp_shard_hint=dp_shard_hint,
                                                               data_parallel_size=data_parallel_size))
        try:
            hit, num_tokens = answer
            shown = f"{_ids(hit)}, {_short(repr(num_tokens))} tokens"
        except Exception:  # not a pair: the machine reports it
            shown = _short(repr(answer))
        self.calls.append(f"{call} -> {shown}")
        return answer  # type: ignore[no-any-return]

    def allocate(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int, hit: Any,
                 num_lookahead_tokens: int, delay_cache: bool, dp_shard_hint: int | None = None,
                 data_parallel_size: int | None = None) -> Any:
        call = (f"allocate({self._name(request)}, num_new_tokens={num_new_tokens}"
                + _keywords(num_new_computed_tokens=(num_new_computed_tokens, 0))
                + ("" if hit is None else f", hit={_ids(hit)}")
                + _keywords(num_lookahead_tokens=(num_lookahead_tokens, 0), delay_cache=(delay_cache, False),
                            dp_shard_hint=(dp_shard_hint, None), data_parallel_size=(data_parallel_size, None))
                + ")")
        answer = self._record(call, lambda: self.adapter.allocate(
            request, num_new_tokens, num_new_computed_tokens, hit, num_lookahead_tokens, delay_cache,
            dp_shard_hint=dp_shard_hint, data_parallel_size=data_parallel_size))
        self.calls.append(f"{call} -> {'None' if answer is None else _ids(answer)}")
        return answer

    def free(self, request: Any) -> None:
        self._plain(f"free({self._name(request)})", lambda: self.adapter.free(request))

    def finish(self, request: Any) -> None:
        self._plain(f"finish({self._name(request)})", lambda: self.adapter.finish(request))

    def cache(self, request: Any, num_tokens: int) -> None:
        self._plain(f"cache({self._name(request)}, num_tokens={num_tokens})",
                    lambda: self.adapter.cache(request, num_tokens))

    def reset(self) -> bool:
        answer = self._record("reset()", self.adapter.reset)
        self.calls.append(f"reset() -> {_short(repr(answer))}")
        return answer  # type: ignore[no-any-return]

    def arm_key_failure(self, after: int) -> None:
        self.calls.append(f"# the hash function raises at its call number {after} from here")
        self.adapter.arm_key_failure(after)  # type: ignore[attr-defined]

    def disarm_key_failure(self) -> None:
        self.calls.append("# the hash function works again")
        self.adapter.disarm_key_failure()  # type: ignore[attr-defined]

    def _plain(self, call: str, run: Any) -> None:
        self._record(call, run)
        self.calls.append(call)
