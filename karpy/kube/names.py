"""Deterministic names in Kubernetes' style (``inflate-6d5f8b7c9d-x2k4p``).

Kubernetes draws name suffixes at random; the simulator derives them from a
hash of the owner and a counter so the same input always gives the same names.
"""

from __future__ import annotations

import hashlib
import json

# The alphabet apiserver's generateName uses (no vowels, no confusable characters).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _encode(data: bytes, n: int) -> str:
    digest = hashlib.sha256(data).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:n])


def suffix(seed: str, n: int = 5) -> str:
    return _encode(seed.encode(), n)


def template_hash(template: object) -> str:
    """A pod-template-hash style value for a ReplicaSet made from a Deployment template."""
    return _encode(json.dumps(template, sort_keys=True, default=str).encode(), 10)


class NameGenerator:
    """Unique generated names per prefix, reproducible run to run."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._counters: dict[str, int] = {}

    def generate(self, prefix: str, n: int = 5) -> str:
        while True:
            i = self._counters.get(prefix, 0)
            self._counters[prefix] = i + 1
            name = f"{prefix}{suffix(f'{prefix}#{i}', n)}"
            if name not in self._used:
                self._used.add(name)
                return name

    def reserve(self, name: str) -> None:
        self._used.add(name)
