"""chainsieve's Python client: a web3.py provider that reconnects and
resumes every subscription from its last cursor (docs/src/clients.md)."""

from .backoff import Backoff, backoff_delay
from .cursors import CursorStore, MemoryCursorStore, subscription_key
from .provider import ResumeRefusedError, ResumingWebSocketProvider, cursor_block

__all__ = [
    "Backoff",
    "CursorStore",
    "MemoryCursorStore",
    "ResumeRefusedError",
    "ResumingWebSocketProvider",
    "backoff_delay",
    "cursor_block",
    "subscription_key",
]
