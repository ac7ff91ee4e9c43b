"""Reconnection delays: exponential, capped, with jitter so that the
clients a server restart cut off do not all come back at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import random as _random


@dataclass(frozen=True)
class Backoff:
    #: The first delay's upper bound, in seconds.
    initial: float = 0.25
    #: The largest delay, in seconds.
    maximum: float = 30.0


def backoff_delay(
    backoff: Backoff, attempt: int, random: Callable[[], float] = _random.random
) -> float:
    """The delay before try ``attempt`` (0 first): half the exponential
    bound plus a random part of the other half ("equal jitter")."""
    bound = min(backoff.maximum, backoff.initial * 2 ** min(attempt, 30))
    return bound / 2 + random() * (bound / 2)
