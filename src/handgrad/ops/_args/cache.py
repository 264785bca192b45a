"""The base of every op cache, and the one check every ``*_backward`` runs on its cache.

Each forward returns a cache that records which op made it (``cache.op``), so a
backward given ``None``, a foreign object or another op's cache raises a
``TypeError`` that names the backward, the forward it expects and what it got.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import describe


@dataclass(frozen=True)
class Cache:
    """Base of every op cache: ``op`` names the forward that returned it."""

    op: str


def _received(cache, forward, kind) -> str:
    if cache is None:
        return "None"
    if not isinstance(cache, Cache):
        return describe(cache)
    if cache.op != forward or isinstance(cache, kind):
        return f"the cache of {cache.op}"
    return (f"the cache of {cache.op} from another implementation ({type(cache).__name__}; "
            f"expected a {kind.__name__})")


def check_cache(op, cache, forward, kind=Cache):
    """Return ``cache`` if it is a ``kind`` made by ``forward``; else raise a TypeError
    naming ``op``, ``forward`` and what was received."""
    if isinstance(cache, kind) and cache.op == forward:
        return cache
    raise TypeError(f"{op}: 'cache' must be the cache returned by {forward}; received "
                    f"{_received(cache, forward, kind)}")
