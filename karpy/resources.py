"""Kubernetes quantities, resource lists and durations, in exact integer units.

Every resource amount inside karpy is an ``int``: CPU in millicores, every other
resource (memory, ephemeral-storage, pods, extended resources such as
``nvidia.com/gpu``) in its base unit, rounded up as the API server rounds a
quantity that is finer than it can store.
"""

from __future__ import annotations

import functools
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


# A quantity's significant digits and decimal exponent are kept exact up to these sizes. Beyond
# them a value is either far outside the int64 range karpy can store (reported as such by
# quantity_range_error) or far below one unit (it rounds up to one unit, as the API server rounds
# a quantity finer than it can store); approximating those keeps "1e999999999" from hanging karpy.
_MAX_DIGITS = 1000
_MAX_MAGNITUDE = 1000  # decimal orders of magnitude


def _decimal(digits: str, exp10: int) -> Fraction:
    """``0.digits`` scaled: the value of a mantissa written ``digits`` (no sign, maybe a '.') times 10**exp10."""
    whole, _, frac = digits.partition(".")
    sig = (whole + frac).lstrip("0")
    if not sig:
        return Fraction(0)
    exp = exp10 - len(frac)  # value == int(sig) * 10**exp
    magnitude = exp + len(sig)  # 10**(magnitude-1) <= value < 10**magnitude
    if magnitude > _MAX_MAGNITUDE:
        return Fraction(10) ** (_MAX_MAGNITUDE + 1)
    if magnitude < -_MAX_MAGNITUDE:
        return Fraction(1, 10 ** (_MAX_MAGNITUDE + 1))
    if len(sig) > _MAX_DIGITS:
        # round the magnitude up, as the API server rounds quantities up
        dropped = sig[_MAX_DIGITS:]
        exp += len(dropped)
        sig = str(int(sig[:_MAX_DIGITS]) + (1 if dropped.strip("0") else 0))
    return Fraction(int(sig)) * Fraction(10) ** exp


def _exponent(text: str) -> int:
    """A decimal exponent ("+3", "-12", "0000000000000009"), clamped far beyond any use."""
    sign = -1 if text[:1] == "-" else 1
    body = text.lstrip("+-").lstrip("0") or "0"
    if len(body) > 7:
        return sign * 10**7
    return sign * int(body)


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes quantity ("100m", "1.5Gi", "2e3", 4) to an exact Fraction.

    Never raises anything but ValueError; never takes long (see ``_MAX_MAGNITUDE``).
    """
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
    exp10 = _exponent(m.group("exp")[1:]) if m.group("exp") else 0
    num = _decimal(m.group("num"), exp10)
    if m.group("sign") == "-":
        num = -num
    if m.group("bin"):
        return num * _BINARY[m.group("bin")]
    if m.group("exp"):
        return num
    return num * _DECIMAL[m.group("dec") or ""]


# --- the int64 range ----------------------------------------------------------------
#
# The API server keeps a quantity's value as a 64-bit integer (resource.Quantity's Value() and
# MilliValue() are int64), and karpy keeps every amount as an int in its own unit -- millicores
# for cpu, bytes for memory and storage, a count for pods and extended resources -- which its
# scheduler packs into int64 arrays. So a quantity is accepted only when its value in that unit,
# rounded up as karpy stores it, fits in a signed 64-bit integer: -2^63 <= units <= 2^63 - 1.
# Anything else is reported where the loader reads it, as
#   Invalid value: "8Ei": must be less than 2^63 bytes (8Ei): Kubernetes quantities are 64-bit integers
# (and "must be greater than or equal to -2^63 ..." below the range).

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_BYTE_RESOURCES = frozenset({MEMORY, EPHEMERAL, "storage"})


def _units(resource: str, q: Fraction) -> int:
    return math.ceil(q * 1000 if resource == CPU else q)


def _unit_text(resource: str, sign: str) -> str:
    if resource == CPU:
        return f"{sign}2^63 millicores ({sign}9223372036854775808m)"
    if resource in _BYTE_RESOURCES or resource.startswith("hugepages-"):
        return f"{sign}2^63 bytes ({sign}8Ei)"
    return f"{sign}2^63 ({sign}9223372036854775808)"


def quantity_range_error(resource: str, q: Fraction) -> str | None:
    """Why quantity ``q`` of ``resource`` cannot be stored (see above), or None when it fits."""
    units = _units(resource, q)
    if units > INT64_MAX:
        return f"must be less than {_unit_text(resource, '')}: Kubernetes quantities are 64-bit integers"
    if units < INT64_MIN:
        return f"must be greater than or equal to {_unit_text(resource, '-')}: Kubernetes quantities are 64-bit integers"
    return None


def to_units(resource: str, value: object) -> int:
    """A quantity as karpy's integer unit for that resource (millicores for CPU).

    Raises ValueError for a value that is not a quantity or does not fit in an int64.
    """
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        key = (resource if resource == CPU else "", value)
        hit = _UNITS_CACHE.get(key)
        if hit is not None:
            return hit
        units = _to_units(resource, value)
        if len(_UNITS_CACHE) > 100_000:
            _UNITS_CACHE.clear()
        _UNITS_CACHE[key] = units
        return units
    return _to_units(resource, value)


_UNITS_CACHE: dict[tuple, int] = {}


def _to_units(resource: str, value: object) -> int:
    q = parse_quantity(value)
    problem = quantity_range_error(resource, q)
    if problem:
        raise ValueError(problem)
    return _units(resource, q)


@functools.lru_cache(maxsize=65536)
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


class DurationRangeError(ValueError):
    """A duration in Go's syntax that is longer than a Go time.Duration can be."""


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
        number = m.group(1)
        if len(number.partition(".")[0].lstrip("0")) > 20:
            seconds = _MAX_DURATION + 1  # more digits than any int64 count of nanoseconds
            break
        seconds += Fraction(number[:40]) * _DURATION_UNITS[m.group(2)]
        if seconds > _MAX_DURATION + 1:
            break
        pos = m.end()
    # Go's time.Duration is an int64 count of nanoseconds; time.ParseDuration refuses anything longer
    if seconds > (_MAX_DURATION + Fraction(1, 10**9) if sign < 0 else _MAX_DURATION):
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise DurationRangeError(
            f"invalid duration {shown!r}: out of range; Go durations go from -2562047h47m16.854775808s "
            "to 2562047h47m16.854775807s"
        )
    return float(sign * seconds)


_MAX_DURATION = Fraction(2**63 - 1, 10**9)  # seconds


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
