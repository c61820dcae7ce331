"""The caches behind the per-call work tritonconv skips, and the one switch that empties them.

Every cache (plans by call signature, launch plans, compiled-kernel handles) is a
:class:`BoundedCache`: bounded (the oldest entries are dropped first) and safe with several
threads (lookups are single dictionary reads, insertions hold a lock, and two threads racing to
build one entry build equal entries). Each registers itself, so :func:`clear_caches` reaches
all of them.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict

_ALL: list[BoundedCache] = []

# A new number whenever a cache is emptied: a plan kept outside the caches
# (``functional.PlanMemo``, a module's last plan) holds the generation it was made in and is
# not used after a clear. Drawn from a counter (atomic under the GIL): two clears at once
# each get their own number, and no number comes back.
_generations = itertools.count(1)
generation = 0


class BoundedCache:
    """A bounded, thread-safe map (see the module docstring)."""

    def __init__(self, name: str, size: int = 4096):
        self.name = name
        self.size = size
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        _ALL.append(self)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key):
        return self.entries.get(key)

    def put(self, key, value) -> None:
        if self.size <= 0:  # (a cache turned off keeps nothing)
            return
        with self.lock:
            while len(self.entries) >= self.size:
                # (an ordered dict: popping a plain dict's first entry costs a scan over the
                # slots already popped, 4 µs a put at 8192 entries; session 48)
                self.entries.popitem(last=False)
            self.entries[key] = value

    def clear(self) -> None:
        global generation
        with self.lock:
            self.entries.clear()
            generation = next(_generations)


def clear_caches() -> None:
    """Forget every cached plan, launch plan and compiled-kernel handle (Triton's own on-disk
    and in-memory caches are untouched). Never needed for correctness: every cache is keyed by
    all it depends on; for tests that patch internals, and to measure a first call."""
    for cache in _ALL:
        cache.clear()
