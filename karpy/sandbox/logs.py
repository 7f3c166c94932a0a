"""``GET .../pods/{name}/log``: a container's log, as kube-apiserver and a kubelet serve it.

kube-apiserver checks the options (``PodLogOptions``: a 422 for a negative ``tailLines``, a
``limitBytes`` or ``sinceSeconds`` below 1, both ``sinceSeconds`` and ``sinceTime``; a 400 for a value
that is not a number or a time) and the container (a 400 ``container X is not valid for pod Y``; with
several containers and none named, ``a container name must be specified for pod Y, choose one of:
[...]``); a pod not bound to a node has an empty log. The kubelet's part: ``tailLines`` keeps the last
lines, then ``sinceSeconds``/``sinceTime`` those written since, ``timestamps`` puts each line's time
(RFC 3339 with nanoseconds) and a space before it, ``limitBytes`` stops after that many bytes (timestamps
counted, the last line possibly cut), ``follow`` goes on with the lines written after, until the pod is
gone or the server stops. A container that has not started yet is a 400 ``... is waiting to start:
ContainerCreating``; ``previous`` is a 400 (no container of the sandbox has restarted).

In karpy sandbox only Karpenter's pod writes a log (:mod:`karpy.sandbox.karpenter`, read from a
:class:`~karpy.runtime.log.LogBuffer`); the simulated workloads' containers write nothing. Times are the
sandbox's clock (``--speed`` times real time), as every timestamp it shows.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

from ..kube import errors as E
from ..runtime.log import LogBuffer
from ..state import pods as P
from ..timeutil import format_rfc3339, parse_rfc3339

FOLLOW_POLL = 1.0  # wall seconds a follower waits for a line before it checks the pod and the server again


@dataclass
class LogOptions:
    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: float | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None


def _bool(v: str) -> bool:
    """A query flag as kube-apiserver's parameter conversion reads it: anything but "0" and "false" is true."""
    return not (v == "0" or v.lower() == "false")


def _int(v: str) -> int:
    """A number as Go's ``strconv.ParseInt`` reads it (an optional sign, ASCII digits), else its 400."""
    digits = v[1:] if v[:1] in ("+", "-") else v
    if not digits or not digits.isascii() or not digits.isdigit():
        raise E.BadRequest(f'strconv.ParseInt: parsing "{v}": invalid syntax')
    n = int(v)
    if not -(1 << 63) <= n < (1 << 63):
        raise E.BadRequest(f'strconv.ParseInt: parsing "{v}": value out of range')
    return n


def parse_options(query: dict, name: str) -> LogOptions:
    """The options of the query, checked as kube-apiserver checks ``PodLogOptions``."""
    o = LogOptions(container=str(query.get("container") or ""))
    for key, attr in (("follow", "follow"), ("previous", "previous"), ("timestamps", "timestamps")):
        if key in query:
            setattr(o, attr, _bool(str(query[key])))
    for key, attr in (("sinceSeconds", "since_seconds"), ("tailLines", "tail_lines"), ("limitBytes", "limit_bytes")):
        if key in query:
            setattr(o, attr, _int(str(query[key])))
    if query.get("sinceTime"):
        v = str(query["sinceTime"])
        try:
            o.since_time = parse_rfc3339(v)
        except ValueError:
            raise E.BadRequest(f'parsing time "{v}" as "2006-01-02T15:04:05Z07:00": cannot parse "{v}" as "2006"')
    errors: list[tuple[str, str, str]] = []  # (field, reason, message)
    if o.tail_lines is not None and o.tail_lines < 0:
        errors.append(("tailLines", "FieldValueInvalid",
                       f"Invalid value: {o.tail_lines}: must be greater than or equal to 0"))
    if o.limit_bytes is not None and o.limit_bytes < 1:
        errors.append(("limitBytes", "FieldValueInvalid", f"Invalid value: {o.limit_bytes}: must be greater than 0"))
    if o.since_seconds is not None and o.since_time is not None:
        # the root path: Go writes its empty name before the colon
        errors.append(("", "FieldValueForbidden", "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be "
                                                  "specified"))
    elif o.since_seconds is not None and o.since_seconds < 1:
        errors.append(("sinceSeconds", "FieldValueInvalid",
                       f"Invalid value: {o.since_seconds}: must be greater than 0"))
    if errors:
        parts = [f"{f}: {m}" for f, _, m in errors]
        body = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        raise E.Invalid(f'PodLogOptions "{name}" is invalid: {body}', kind="PodLogOptions", name=name,
                        causes=[{"reason": r, "message": m, "field": f} for f, r, m in errors])
    return o


def container_names(pod: dict) -> list[str]:
    """Every container of the pod: init containers, containers, ephemeral containers (kube-apiserver's order)."""
    spec = pod.get("spec") or {}
    return [str(c.get("name")) for k in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(k) or () if isinstance(c, dict)]


def resolve_container(pod: dict, container: str) -> str:
    name = (pod.get("metadata") or {}).get("name", "")
    if container:
        if container not in container_names(pod):
            raise E.BadRequest(f"container {container} is not valid for pod {name}")
        return container
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) == 1:
        return str(containers[0].get("name"))
    if not containers:
        raise E.BadRequest(f"a container name must be specified for pod {name}")
    raise E.BadRequest(f"a container name must be specified for pod {name}, choose one of: "
                       f"[{' '.join(container_names(pod))}]")


def rfc3339_nano(t: float) -> str:
    """A time as Go's ``time.RFC3339Nano`` writes it (nanoseconds, trailing zeros dropped): a kubelet's
    ``--timestamps`` prefix."""
    whole = math.floor(t)
    ns = min(999_999_999, int(round((t - whole) * 1e9)))
    frac = f"{ns:09d}".rstrip("0")
    return format_rfc3339(whole)[:-1] + (f".{frac}" if frac else "") + "Z"


class LogStream:
    """What one request of a container's log reads: the lines of a buffer, formatted and cut to its options."""

    def __init__(self, buffer: LogBuffer, opts: LogOptions, now: float, alive: Callable[[], bool],
                 stopping: threading.Event):
        self.buffer = buffer
        self.opts = opts
        self.alive = alive
        self.stopping = stopping
        self.left = opts.limit_bytes  # bytes still allowed (None: no limit)
        if opts.since_seconds is not None:
            self.since: float | None = now - opts.since_seconds
        else:
            self.since = opts.since_time

    def _format(self, entries: list[tuple[int, float, bytes]]) -> bytes:
        out = []
        for _, t, line in entries:
            if self.since is not None and t < self.since:
                continue
            out.append((rfc3339_nano(t) + " ").encode() + line if self.opts.timestamps else line)
        data = b"".join(out)
        if self.left is not None:
            data = data[:self.left]
            self.left -= len(data)
        return data

    def first(self) -> tuple[bytes, int]:
        """The lines there are now (the last ``tailLines`` of them, those since ``since``), and the
        sequence number of the next line."""
        entries, nxt = self.buffer.lines()
        if self.opts.tail_lines is not None:
            entries = entries[len(entries) - self.opts.tail_lines:] if self.opts.tail_lines else []
        return self._format(entries), nxt

    def follow(self, first: bytes, seq: int) -> Iterator[bytes]:
        if first:
            yield first
        while not self.stopping.is_set() and (self.left is None or self.left > 0):
            entries, seq = self.buffer.after(seq, FOLLOW_POLL)
            if entries:
                data = self._format(entries)
                if data:
                    yield data
            elif not self.alive():
                return


def pod_log(pod: dict, opts: LogOptions, now: float, source: Callable[[dict, str], LogBuffer | None],
            alive: Callable[[], bool], stopping: threading.Event) -> tuple[bytes, Iterator[bytes] | None]:
    """A pod's log for the request's options (:func:`parse_options`): the body, or (``follow``) a stream
    of chunks. ``source`` says which buffer holds a container's log (None: a container that writes
    nothing); ``alive`` whether the pod is still there, for a follower."""
    name = (pod.get("metadata") or {}).get("name", "")
    container = resolve_container(pod, opts.container)
    if not P.node_name(pod):
        return b"", None  # kube-apiserver: a pod with no node has no log to fetch
    if opts.previous:
        raise E.BadRequest(f'previous terminated container "{container}" in pod "{name}" not found')
    if P.phase(pod) == "Pending":
        raise E.BadRequest(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
    buffer = source(pod, container)
    if buffer is None:
        buffer = LogBuffer(1)  # a simulated workload's container: it writes nothing
    stream = LogStream(buffer, opts, now, alive, stopping)
    first, seq = stream.first()
    if not opts.follow or P.is_terminal(pod):
        return first, None
    return b"", stream.follow(first, seq)

