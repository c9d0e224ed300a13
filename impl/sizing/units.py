"""Human-readable counts and byte sizes on the command line (``32k`` tokens, ``80GiB``).

Counts (``--max-model-len``, ``--max-num-batched-tokens``, ``--max-num-seqs``, ``--tp``,
``--dp``, ``--page-size``, ``--weights-shards``) follow vLLM's ``human_readable_int``:
a lowercase suffix is decimal (``k`` 10^3, ``m`` 10^6, ``g`` 10^9, ``t`` 10^12; ``32k`` is
32,000, ``25.6k`` is 25,600), an uppercase one binary (``K`` 2^10, ``M`` 2^20, ``G`` 2^30,
``T`` 2^40; ``32K`` is 32,768) and takes no decimals.

Byte sizes (``--memory-bytes`` and the other ``*-bytes`` options) accept the same forms (vLLM's
``--kv-cache-memory-bytes`` does), plus unit names: SI ``kB`` / ``KB``, ``MB``, ``GB``, ``TB``
(powers of 1000), IEC ``KiB``, ``MiB``, ``GiB``, ``TiB`` (powers of 1024), and ``B``.

A value must come out as a whole number (``1.5GiB`` is fine, ``1.0001k`` is refused, never
truncated), and the text is at most ``MAX_CHARS`` characters with at most 20 digits on each
side of the point, so parsing is instant whatever is typed. The text is exactly that: ASCII
digits ``0-9``, an optional ``.`` and digits, an optional unit, with no sign, no spaces, no
underscores and no other script's digits (``int()`` accepts ``" 1_2 "``, ``"١٢"`` and
``"１２"``; these are refused).
"""

from __future__ import annotations

import re
from fractions import Fraction

from verikv.errors import SizingError

MAX_CHARS = 48

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_BYTE_UNITS = {
    "B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_NUMBER = re.compile(r"([0-9]{1,20}(?:\.[0-9]{1,20})?)([A-Za-z]{0,3})", re.ASCII)


class UnitError(SizingError):
    """Text that is not a count or size in the accepted forms."""


def parse_count(text: str) -> int:
    """A count such as ``8192``, ``32k`` (32,000) or ``32K`` (32,768)."""
    return _parse(text, {**_DECIMAL, **_BINARY}, "count")


def parse_bytes(text: str) -> int:
    """A byte size such as ``85899345920``, ``80GiB``, ``80GB``, ``80G`` (GiB) or ``80g`` (GB)."""
    return _parse(text, {**_DECIMAL, **_BINARY, **_BYTE_UNITS}, "byte size")


def _parse(text: str, units: dict[str, int], what: str) -> int:
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        raise UnitError(f"not a {what} (at most {MAX_CHARS} characters)")
    match = _NUMBER.fullmatch(text)
    if not match or match.group(2) not in {"", *units}:
        raise UnitError(f"not a {what}: {text!r}; use digits with an optional suffix ({', '.join(units)})")
    number, suffix = match.groups()
    if "." in number and suffix in _BINARY:
        raise UnitError(f"{text!r}: no decimals with the binary suffix {suffix} (use {suffix.lower()} for decimal)")
    value = Fraction(number) * units.get(suffix, 1)
    if value.denominator != 1:
        raise UnitError(f"{text!r} is not a whole number ({float(value)})")
    return int(value)
