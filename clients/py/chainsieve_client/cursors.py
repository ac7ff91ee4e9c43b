"""Where an application keeps its subscriptions' cursors so that it
resumes after its own restart, not only after a dropped socket."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Protocol


class CursorStore(Protocol):
    """Cursors by subscription key. ``save`` is called with each
    notification's cursor as the provider hands it to web3.py (which queues
    it for the application: a restarted application resumes after the
    last one handed, maybe a few past the last it handled); ``load`` once,
    when a subscription of that key is made. Either may be a coroutine."""

    def load(self, key: str) -> str | None | Awaitable[str | None]: ...

    def save(self, key: str, cursor: str) -> None | Awaitable[None]: ...


def subscription_key(params: list[Any], finality: Any) -> str:
    """A subscription's key: its topic, filter and finality, as compact
    JSON (the JavaScript package's keys, so both can share a store)."""
    value = params if finality is None else [*params, {"finality": finality}]
    return json.dumps(value, separators=(",", ":"))


class MemoryCursorStore:
    """Cursors in memory, for tests and for a store to wrap."""

    def __init__(self) -> None:
        self.cursors: dict[str, str] = {}

    def load(self, key: str) -> str | None:
        return self.cursors.get(key)

    def save(self, key: str, cursor: str) -> None:
        self.cursors[key] = cursor
