"""RFC 3339 timestamps as karpy reads and writes them.

:func:`parse_rfc3339` is the one parser of input times: it accepts every
RFC 3339 ``date-time`` (section 5.6) -- fractional seconds of any length,
lower-case ``t`` and ``z``, numeric offsets ``+hh:mm``/``-hh:mm`` -- plus the
space separator that RFC 3339 allows "for the sake of readability" (and that
karpy accepted before). It returns float seconds since the Unix epoch, UTC.

Like Go's ``time.Parse`` (and therefore the API server), it refuses a leap
second (``:60``): karpy's clock, like POSIX time, has none.

A time is representable when its UTC instant lies between
``0001-01-01T00:00:00Z`` and ``9999-12-31T23:59:59.999999999Z``: karpy prints
times as RFC 3339 UTC with a four-digit year, which cannot name an instant
outside those years. :data:`MIN_TIME` and :data:`MAX_TIME` are the first and
the last whole second of that range, for a simulator that clamps its clock.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_RFC3339 = re.compile(
    r"^(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[Tt ](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<frac>\d+))?(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<oh>\d{2}):(?P<om>\d{2}))$",
    re.ASCII,
)

_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


MIN_TIME = float(_days_from_civil(1, 1, 1) * 86400)  # 0001-01-01T00:00:00Z
MAX_TIME = float(_days_from_civil(9999, 12, 31) * 86400 + 86399)  # 9999-12-31T23:59:59Z

_EXPECTED = 'must be an RFC 3339 date-time such as "2026-01-01T00:00:00Z"'


def _exact(value: str) -> Fraction:
    """The instant ``value`` names, as exact seconds since the epoch; raises ValueError."""
    if not isinstance(value, str):
        raise ValueError(f"{_EXPECTED}, got {type(value).__name__}")
    m = _RFC3339.match(value)
    if not m:
        raise ValueError(_EXPECTED)
    y, mo, d = int(m["y"]), int(m["mo"]), int(m["d"])
    h, mi, s = int(m["h"]), int(m["mi"]), int(m["s"])
    if not 1 <= mo <= 12:
        raise ValueError(f"{_EXPECTED}: month out of range")
    days = _DAYS_IN_MONTH[mo - 1] + (1 if mo == 2 and _is_leap(y) else 0)
    if not 1 <= d <= days:
        raise ValueError(f"{_EXPECTED}: day out of range")
    if h > 23:
        raise ValueError(f"{_EXPECTED}: hour out of range")
    if mi > 59:
        raise ValueError(f"{_EXPECTED}: minute out of range")
    if s > 59:
        raise ValueError(f"{_EXPECTED}: second out of range (leap seconds are not supported)")
    offset = 0
    if m["sign"]:
        oh, om = int(m["oh"]), int(m["om"])
        if oh > 23 or om > 59:
            raise ValueError(f"{_EXPECTED}: time zone offset out of range")
        offset = (oh * 3600 + om * 60) * (1 if m["sign"] == "+" else -1)
    seconds = Fraction(_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset)
    frac = m["frac"]
    if frac:
        frac = frac[:30]  # finer than 10^-30 s cannot move a float, and keeps the arithmetic small
        seconds += Fraction(int(frac), 10 ** len(frac))
    return seconds


def _in_range(value: str) -> Fraction:
    seconds = _exact(value)
    if not MIN_TIME <= seconds < MAX_TIME + 1:
        raise ValueError("must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z in UTC")
    return seconds


def parse_rfc3339(value: str) -> float:
    """Seconds since the Unix epoch (UTC) of an RFC 3339 date-time; raises ValueError with the reason.

    ``parse_rfc3339("2026-01-01T00:00:00Z") == 1767225600.0``; fractions are
    kept (``...00:00.5Z`` gives ``...600.5``), offsets applied
    (``2026-01-01T02:00:00+02:00`` is the same instant).
    """
    return float(_in_range(value))


def is_rfc3339(value: object) -> bool:
    """Is ``value`` an RFC 3339 date-time (a real calendar date and time of day, any year)?

    This is the OpenAPI ``date-time`` format check; it does not ask for the
    instant to be representable (see :func:`parse_rfc3339` for that).
    """
    try:
        _exact(value)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


def format_rfc3339(seconds: float) -> str:
    """The whole second at or before ``seconds``, as RFC 3339 UTC ("2026-01-01T00:00:00Z").

    This is how Kubernetes serializes a ``metav1.Time``: UTC, whole seconds.
    """
    t = math.floor(seconds)
    if not MIN_TIME <= t <= MAX_TIME:
        raise ValueError(f"time {seconds!r} is outside 0001-01-01T00:00:00Z..9999-12-31T23:59:59Z")
    days, rem = divmod(t, 86400)
    y, mo, d = _civil_from_days(days)
    h, rem = divmod(rem, 3600)
    mi, s = divmod(rem, 60)
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z"


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return y + (m <= 2), m, d


def normalize_rfc3339(value: str) -> str:
    """An RFC 3339 date-time as the API server stores a ``metav1.Time``: UTC, whole seconds (fraction dropped)."""
    return format_rfc3339(float(math.floor(_in_range(value))))


__all__ = ["MAX_TIME", "MIN_TIME", "format_rfc3339", "is_rfc3339", "normalize_rfc3339", "parse_rfc3339"]
