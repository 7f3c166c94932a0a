"""Kubernetes Events, as Karpenter's recorder publishes them, written through the API port."""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..kube.registry import BY_KIND, is_namespaced
from ..kube.times import fmt_time

OWNER_ANNOTATION = "karpy.dev/owner"
LABELS_ANNOTATION = "karpy.dev/labels"


def ref(obj: Mapping[str, Any] | None, kind: str | None = None, name: str | None = None,
        namespace: str | None = None) -> dict:
    """An ``involvedObject`` reference to an object (or to a kind and name)."""
    meta = (obj or {}).get("metadata") or {}
    kind = kind or (obj or {}).get("kind") or ""
    out = {"kind": kind, "name": name or meta.get("name", "")}
    ns = namespace if namespace is not None else meta.get("namespace")
    if ns and is_namespaced(kind):
        out["namespace"] = ns
    if meta.get("uid"):
        out["uid"] = meta["uid"]
    t = BY_KIND.get(kind)
    if t is not None:
        out["apiVersion"] = t.api_version
    return out


def pod_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """The owner (``Kind/name``) and labels of a pod, for the Events about it going away."""
    meta = pod.get("metadata") or {}
    owner = ""
    for r in meta.get("ownerReferences") or ():
        if r.get("controller"):
            owner = f"{r.get('kind')}/{r.get('name')}"
            break
    return {OWNER_ANNOTATION: owner, LABELS_ANNOTATION: json.dumps(meta.get("labels") or {}, sort_keys=True)}


def _dedupe_key(kind: Any, namespace: Any, name: Any, reason: str, message: str, dedupe_on: tuple | None) -> tuple:
    """What makes two events repeats of each other (see Recorder)."""
    return (kind, namespace, name, reason) + ((message,) if dedupe_on is None else dedupe_on)


class Recorder:
    """Publishes Events. ``dedupe`` suppresses, within that many seconds, an event that repeats one already
    published, as upstream's recorder does for its noisy events. What counts as a repeat is upstream's
    ``DedupeValues``: the same object and reason, and ``dedupe_on`` when given (upstream names only the object
    for most events: the first message stands for the whole window), else the same message."""

    def __init__(self, api: Any, clock: Any, component: str = "karpenter"):
        self.api = api
        self.clock = clock
        self.component = component
        self._seen: dict[tuple, float] = {}
        self._seq = 0
        # Events by one component share their source (stored objects are never mutated): a long simulation
        # keeps hundreds of thousands of Events
        self._sources: dict[str, dict] = {}

    def suppressed(self, kind: str, name: str, reason: str, message: str, dedupe: float,
                   namespace: str | None = None, dedupe_on: tuple | None = None) -> bool:
        """Whether :meth:`publish` with ``dedupe`` (and ``dedupe_on``) would drop this event now (a repeat is that
        recent): a caller can skip building the reference. Records nothing."""
        last = self._seen.get(_dedupe_key(kind, namespace, name, reason, message, dedupe_on))
        return last is not None and self.clock.now() - last < dedupe

    def publish(self, involved: dict, reason: str, message: str, etype: str = "Normal",
                dedupe: float | None = None, annotations: Mapping[str, str] | None = None,
                component: str | None = None, dedupe_on: tuple | None = None) -> None:
        now = self.clock.now()
        if dedupe:
            key = _dedupe_key(involved.get("kind"), involved.get("namespace"), involved.get("name"), reason, message,
                              dedupe_on)
            last = self._seen.get(key)
            if last is not None and now - last < dedupe:
                return
            self._seen[key] = now
        ns = involved.get("namespace") or "default"
        base = involved.get("name", "event")
        ts = fmt_time(now)
        comp = component or self.component
        source = self._sources.get(comp)
        if source is None:
            source = self._sources[comp] = {"component": comp}
        body = {"involvedObject": dict(involved), "reason": reason, "message": message, "type": etype,
                "source": source, "reportingComponent": comp, "firstTimestamp": ts, "lastTimestamp": ts, "count": 1}
        fast = getattr(self.api, "create_event", None)
        if fast is not None:  # the in-memory API server names and stores it on its short path
            fast(base, ns, dict(annotations) if annotations else None, body)
            return
        namer = getattr(self.api, "event_name", None)
        meta: dict[str, Any] = {"name": namer(base), "namespace": ns} if namer is not None else \
            {"generateName": f"{base}.", "namespace": ns}
        if annotations:
            meta["annotations"] = dict(annotations)
        self.api.create({"apiVersion": "v1", "kind": "Event", "metadata": meta, **body})
