"""Bounds on what one client's object may be: how deep it nests and how large it is once stored.

kube-apiserver's JSON decoder allows 10,000 levels of nesting, but karpy's
JSON encoder (orjson) writes at most 254, and an object stored deeper could
never be read back. The sandbox refuses any body, and any result of a patch,
nested deeper than :data:`MAX_DEPTH` levels of objects and arrays: a margin
below the encoder's limit for what wraps an object on the way out (a list's
items, a watch event, a Table row, the managed fields that mirror its shape).
Real objects nest a dozen levels; a CRD's schema a few dozen.

:data:`MAX_OBJECT_BYTES` is etcd's default request limit (1.5 MiB), past which
kube-apiserver cannot store an object.
"""

from __future__ import annotations

from typing import Any

from .errors import ApiError

MAX_DEPTH = 200
MAX_OBJECT_BYTES = 1536 * 1024  # etcd's --max-request-bytes default


def deeper_than(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` nests more than ``limit`` objects and arrays (without recursion, so any depth is safe to
    ask about; shared subtrees are visited once per depth they appear at, at most)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    seen: set[tuple[int, int]] = set()
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            children = o.values()
        elif isinstance(o, list):
            children = o
        else:
            continue
        if d > limit:
            return True
        key = (id(o), d)
        if key in seen:
            continue
        seen.add(key)
        for c in children:
            if isinstance(c, (dict, list)):
                stack.append((c, d + 1))
    return False


class RequestEntityTooLarge(ApiError):
    """kube-apiserver's 413: a body past its cap, a JSON patch of too many operations."""

    code, reason = 413, "RequestEntityTooLarge"
