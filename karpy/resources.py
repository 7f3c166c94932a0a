"""Kubernetes quantities, resource lists and durations, in exact integer units.

Every resource amount inside karpy is an ``int``: CPU in millicores, every other
resource (memory, ephemeral-storage, pods, extended resources such as
``nvidia.com/gpu``) in its base unit, rounded up as the API server rounds a
quantity that is finer than it can store.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Iterable, Mapping

from .errors import FieldProblem

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL = "ephemeral-storage"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity ("100m", "1.5Gi", "2e3", 4) to an exact Fraction."""
    if isinstance(value, bool):
        raise ValueError(f"quantities must match the regular expression of a Kubernetes quantity, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid quantity {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise ValueError(f"quantity must be a string or a number, got {type(value).__name__}")
    m = _QUANTITY.match(value.strip())
    if not m:
        raise ValueError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {value!r}"
        )
    num = Fraction(m.group("num"))
    if m.group("sign") == "-":
        num = -num
    if m.group("bin"):
        return num * _BINARY[m.group("bin")]
    if m.group("exp"):
        return num * Fraction(10) ** int(m.group("exp")[1:])
    return num * _DECIMAL[m.group("dec") or ""]


def to_units(resource: str, value: object) -> int:
    """A quantity as karpy's integer unit for that resource (millicores for CPU)."""
    q = parse_quantity(value)
    if resource == CPU:
        q *= 1000
    return math.ceil(q)


def format_units(resource: str, units: int) -> str:
    """Render integer units back as a canonical Kubernetes quantity string."""
    if resource == CPU:
        if units % 1000 == 0:
            return str(units // 1000)
        return f"{units}m"
    if resource in (MEMORY, EPHEMERAL) and units:
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units % factor == 0:
                return f"{units // factor}{suffix}"
    return str(units)


def parse_resource_list(obj: Mapping[str, object] | None, field: str = "") -> dict[str, int]:
    """Parse a ResourceList ({"cpu": "1", "memory": "1Gi"}) to integer units."""
    out: dict[str, int] = {}
    if not obj:
        return out
    if not isinstance(obj, Mapping):
        raise FieldProblem(field, "must be a map of resource name to quantity")
    for name, value in obj.items():
        try:
            units = to_units(str(name), value)
        except ValueError as e:
            raise FieldProblem(f"{field}.{name}" if field else str(name), str(e)) from None
        if units < 0:
            raise FieldProblem(f"{field}.{name}" if field else str(name), "must be greater than or equal to 0")
        out[str(name)] = units
    return out


def format_resource_list(res: Mapping[str, int]) -> dict[str, str]:
    return {k: format_units(k, v) for k, v in sorted(res.items())}


def add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def subtract(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def merge_max(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        if v > out.get(k, 0):
            out[k] = v
    return out


def total(items: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        for k, v in item.items():
            out[k] = out.get(k, 0) + v
    return out


def fits(requests: Mapping[str, int], available: Mapping[str, int]) -> bool:
    """True when every requested resource is available (absent means zero)."""
    for k, v in requests.items():
        if v > 0 and v > available.get(k, 0):
            return False
    return True


# --- durations -------------------------------------------------------------

_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}


def parse_duration(value: object) -> float:
    """Parse a Go duration ("1h30m", "5s", "300ms") to seconds."""
    if isinstance(value, str) and value in _DURATION_CACHE:
        return _DURATION_CACHE[value]
    seconds = _parse_duration(value)
    if isinstance(value, str) and len(_DURATION_CACHE) < 4096:
        _DURATION_CACHE[value] = seconds
    return seconds


_DURATION_CACHE: dict[str, float] = {}


def _parse_duration(value: object) -> float:
    if not isinstance(value, str) or not value:
        raise ValueError(f"invalid duration {value!r}: expected a string such as \"30s\", \"5m\" or \"1h\"")
    s = value
    sign = 1
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0.0
    pos = 0
    seconds = Fraction(0)
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if not m or m.group(1) in ("", "."):
            raise ValueError(f"invalid duration {value!r}: expected a string such as \"30s\", \"5m\" or \"1h\"")
        seconds += Fraction(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return float(sign * seconds)


def format_duration(seconds: float) -> str:
    """Render seconds as a Go-style duration ("1h2m3s")."""
    if seconds == 0:
        return "0s"
    total_s = int(round(seconds))
    h, rem = divmod(total_s, 3600)
    m, s = divmod(rem, 60)
    out = ""
    if h:
        out += f"{h}h"
    if h or m:
        out += f"{m}m"
    out += f"{s}s"
    return out
