"""Which variant answers a request: a sticky, weighted choice. Pure functions, no I/O.

A keyed request hashes its key to a bucket in [0, 100); it goes to the challenger when the
bucket is below the challenger's weight. So the same key always lands on the same variant
for a given weight, and when the canary raises the weight keys only ever move champion ->
challenger (never back), which keeps a user's experience consistent through a rollout.
Unkeyed requests are split at random with the same weight.
"""

from __future__ import annotations

import hashlib
import random
from typing import Callable

from tasks.registry.serving import CHALLENGER, CHAMPION


def key_bucket(key: str) -> float:
    """A key's stable position in [0, 100): the first 8 bytes of its SHA-256, scaled.

    SHA-256 rather than Python's hash(): it is the same in every process and replica
    (hash() is salted per process), so a key sticks across restarts and pods."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100.0


def choose_variant(
    key: str | None, challenger_weight: float, has_challenger: bool, rand: Callable[[], float] = random.random
) -> str:
    """CHAMPION or CHALLENGER for one request in split mode.

    `challenger_weight` is a percentage (0..100). Without a challenger every request is the
    champion's. `rand` (returning [0, 1)) is injectable so tests can pin the random path."""
    if not has_challenger or challenger_weight <= 0:
        return CHAMPION
    if challenger_weight >= 100:
        return CHALLENGER
    position = key_bucket(key) if key else rand() * 100.0
    return CHALLENGER if position < challenger_weight else CHAMPION
