"""The process-wide cache of evaluation results the dashboard's services read first
(:mod:`sde_core.services.cascade`: cache, then the results store, then the session)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

__all__ = ["ResultCache"]


class ResultCache:
    """A small thread-safe LRU mapping, for evaluation results keyed by content hashes.

    Args:
        max_entries: entries kept; the least recently used is dropped first.
    """

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        """The value stored under ``key`` (marked as recently used), or None."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key``, dropping the oldest entries beyond the limit."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry (a cold start, e.g. for a bench)."""
        with self._lock:
            self._items.clear()
