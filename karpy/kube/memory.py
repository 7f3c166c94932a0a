"""An in-memory Kubernetes API server.

The store behind ``karpy simulate`` and ``karpy sandbox``: it keeps objects by
kind, namespace and name and gives them the semantics karpy's controllers (and
any Kubernetes client) rely on:

* ``metadata.resourceVersion`` from one counter for the whole store, ``uid``,
  ``creationTimestamp`` (from the injected clock) and ``generation`` (bumped
  when anything but metadata and status changes); ``generateName``;
* optimistic concurrency: an update or a patch carrying a stale
  ``resourceVersion`` is a 409 Conflict;
* ``status`` as a subresource for the kinds that have one: writes to the main
  resource keep the stored status, writes to ``/status`` change only status;
* finalizers and ``deletionTimestamp``: deleting an object with finalizers
  marks it; it goes when the last finalizer is removed;
* garbage collection by ``ownerReferences`` (background and orphan
  propagation; foreground is treated as background);
* list and watch with label and field selectors; watches resume from a
  resourceVersion and answer 410 Gone when it is older than the history kept;
* the ``pods/binding`` and ``pods/eviction`` subresources; eviction honours
  PodDisruptionBudgets through the status the disruption controller keeps
  (``disruptionsAllowed``, ``currentHealthy``/``desiredHealthy``,
  ``observedGeneration``, ``unhealthyPodEvictionPolicy``) and answers 429
  when a budget forbids it;
* admission as the API server does it for pods: ``spec.priority`` from the
  PriorityClass, ``spec.overhead`` from the RuntimeClass; and for
  PersistentVolumeClaims: a claim naming no StorageClass gets the newest default one.

Stored objects are never mutated: every write stores a new dict that shares
unchanged subtrees with the old one. Readers get the stored objects and must
not mutate them either.

One lock guards the store, so HTTP handlers and the simulation loop may call
it from different threads.
"""

from __future__ import annotations

import copy
import hashlib
import functools
import threading
from collections import deque
from typing import Any, Callable, Iterable

from . import errors as E
from .names import NameGenerator
from .patch import json_patch, merge_patch
from .port import ADDED, DELETED, JSON_PATCH, MERGE_PATCH, MODIFIED, STRATEGIC_MERGE_PATCH, APPLY_PATCH, WatchEvent
from .registry import BY_KIND, GENERATION_KINDS, is_namespaced
from .selectors import parse_field_selector, parse_label_selector, selector_to_string
from .times import fmt_time, parse_time

HISTORY = 20000  # watch events kept per kind for watches that resume from a resourceVersion
# kinds written in great numbers that are nobody's owner and take no generated name of another object's:
# not indexed by uid, their names not reserved against generated ones (names stay unique per kind)
UNINDEXED_KINDS = frozenset({"Event"})
DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")
PDB_MULTIPLE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
PDB_VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


class _Clock:
    def now(self) -> float:
        return 0.0


def _meta(obj: dict) -> dict:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _matches(obj: dict, ns: str | None, label_pred, field_pred) -> bool:
    meta = _meta(obj)
    if ns and meta.get("namespace") != ns:
        return False
    if label_pred is not None and not label_pred(meta.get("labels") or {}):
        return False
    if field_pred is not None and not field_pred(obj):
        return False
    return True


class MemoryWatch:
    """One watch: a queue the store appends to, filtered by namespace and selectors.

    A watch given ``max_events`` or ``max_bytes`` is bounded: when its reader falls that far behind, the watch
    is closed (its queue dropped, :attr:`overflowed` set), as kube-apiserver closes a watcher that does not keep
    up; the reader resumes from the last resourceVersion it saw."""

    def __init__(self, store: "MemoryAPI", kind: str, ns: str | None, label_pred, field_pred,
                 max_events: int | None = None, max_bytes: int | None = None):
        self.store = store
        self.kind = kind
        self.ns = ns or None
        self.label_pred = label_pred
        self.field_pred = field_pred
        self.queue: deque[WatchEvent] = deque()
        self.cond = threading.Condition(store._lock)
        self.stopped = False
        self.overflowed = False
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._bytes: deque[int] = deque()  # the size of each queued event (bounded watches)
        self._queued_bytes = 0

    @property
    def bounded(self) -> bool:
        return self.max_events is not None or self.max_bytes is not None

    def _offer(self, etype: str, obj: dict, old: dict | None, size: int = 0) -> None:
        before = len(self.queue)
        self._enqueue(etype, obj, old)
        if len(self.queue) == before or not self.bounded:
            return
        self._bytes.append(size)
        self._queued_bytes += size
        if (self.max_events is not None and len(self.queue) > self.max_events) or \
                (self.max_bytes is not None and self._queued_bytes > self.max_bytes):
            self.overflowed = True
            self.queue.clear()
            self._bytes.clear()
            self._queued_bytes = 0
            self.stop()

    def _enqueue(self, etype: str, obj: dict, old: dict | None) -> None:
        if self.label_pred is None and self.field_pred is None and self.ns is None:
            self.queue.append(WatchEvent(etype, obj))
        else:
            now_in = _matches(obj, self.ns, self.label_pred, self.field_pred)
            was_in = old is not None and _matches(old, self.ns, self.label_pred, self.field_pred)
            if etype == MODIFIED:
                if now_in and was_in:
                    self.queue.append(WatchEvent(MODIFIED, obj))
                elif now_in:
                    self.queue.append(WatchEvent(ADDED, obj))
                elif was_in:
                    self.queue.append(WatchEvent(DELETED, obj))
                else:
                    return
            elif now_in:
                self.queue.append(WatchEvent(etype, obj))
            else:
                return
        self.cond.notify_all()

    def poll(self) -> list[WatchEvent]:
        with self.store._lock:
            out = list(self.queue)
            self.queue.clear()
            self._bytes.clear()
            self._queued_bytes = 0
            return out

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        with self.store._lock:
            if not self.queue and not self.stopped:
                self.cond.wait(timeout)
            if self.queue:
                if self._bytes:
                    self._queued_bytes -= self._bytes.popleft()
                return self.queue.popleft()
            return None

    def stop(self) -> None:
        with self.store._lock:
            self.stopped = True
            watchers = self.store._watchers.get(self.kind)
            if watchers and self in watchers:
                watchers.remove(self)
            self.cond.notify_all()


class MemoryAPI:
    """The store. ``clock`` gives the time for timestamps (``now() -> float`` seconds since the epoch)."""

    def __init__(self, clock: Any = None, names: NameGenerator | None = None, history: bool = True):
        self.clock = clock or _Clock()
        self.names = names or NameGenerator()
        self._lock = threading.RLock()
        self._objects: dict[str, dict[tuple[str, str], dict]] = {}
        self._rv = 0
        self._uid_seq = 0
        self._watchers: dict[str, list[MemoryWatch]] = {}
        self._history: dict[str, deque[tuple[int, str, dict, dict | None, int]]] = {}
        self._history_floor: dict[str, int] = {}  # oldest resourceVersion a watch of that kind can resume after
        self.kind_rv: dict[str, int] = {}  # the resourceVersion of each kind's latest change
        self.watch_floor = 0  # no watch resumes from before this resourceVersion (see start_watch_cache)
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}  # owner uid -> dependents
        self._by_uid: dict[str, tuple[str, str, str]] = {}
        self.write_hooks: list[Callable[[str, dict, dict | None], None]] = []  # (type, obj, old) after every write
        self.evicted_uids: set[str] = set()  # pods the Eviction API deleted (until someone takes note)
        self.keep_history = history  # off when no client will resume a watch (karpy simulate)
        self.history_limit: int | None = None  # watch events kept per kind (None: the module's HISTORY)
        self.history_bytes: int | None = None  # and the bytes they may hold in all, per kind (None: no bound)
        self._history_size: dict[str, int] = {}
        self.pod_admission: Callable[[dict], dict] | None = None  # more admission for new pods (karpy sandbox's)
        self._event_seq = 0
        self._scheduled: tuple[str | None, dict] = (None, {})

    # --- reading -----------------------------------------------------------------------------
    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def get(self, kind: str, name: str, namespace: str = "") -> dict:
        ns = self._ns(kind, namespace)
        with self._lock:
            obj = self._objects.get(kind, {}).get((ns, name))
        if obj is None:
            raise E.NotFound(f'{_resource_name(kind)} "{name}" not found', kind=_plural(kind), name=name,
                             group=_group(kind))
        return obj

    def try_get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        return self._objects.get(kind, {}).get((self._ns(kind, namespace), name))

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict], str]:
        lp = parse_label_selector(label_selector) if label_selector else None
        fp = parse_field_selector(field_selector) if field_selector else None
        with self._lock:
            objs = self._objects.get(kind, {})
            if namespace is None and lp is None and fp is None:
                items = list(objs.values())
            else:
                items = [o for (ns, _), o in objs.items() if (not namespace or ns == namespace) and _matches(o, None, lp, fp)]
            return items, str(self._rv)

    def start_watch_cache(self) -> None:
        """From now on, watches resume only from resourceVersions after the current one, as kube-apiserver's
        watch cache holds only what happened since it started (lists at older resourceVersions still work)."""
        with self._lock:
            self.watch_floor = self._rv

    def snapshot(self, kind: str, resource_version: int) -> list[dict]:
        """The objects of a kind as they were at ``resource_version``, from the current ones and the watch
        history; Gone when the history kept does not reach back that far."""
        with self._lock:
            if not self.keep_history or resource_version < self._history_floor.get(kind, 0):
                raise E.Gone(f"too old resource version: {resource_version}")
            objs = dict(self._objects.get(kind, {}))
            for rv, etype, obj, old, _ in reversed(self._history.get(kind, ())):
                if rv <= resource_version:
                    break
                m = _meta(obj)
                key = ((m.get("namespace") or "default") if is_namespaced(kind) else "", m.get("name"))
                if etype == ADDED or old is None:
                    objs.pop(key, None)
                else:
                    objs[key] = old
            return list(objs.values())

    def all(self, kind: str) -> Iterable[dict]:
        """Every object of a kind (no copy of the container; for in-process readers)."""
        return list(self._objects.get(kind, {}).values())

    def count(self, kind: str) -> int:
        return len(self._objects.get(kind, {}))

    def watch(self, kind: str, resource_version: str | None = None, namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              max_events: int | None = None, max_bytes: int | None = None) -> MemoryWatch:
        lp = parse_label_selector(label_selector) if label_selector else None
        fp = parse_field_selector(field_selector) if field_selector else None
        with self._lock:
            w = MemoryWatch(self, kind, namespace, lp, fp, max_events, max_bytes)
            if resource_version not in (None, "", "0"):
                try:
                    since = int(resource_version)
                except ValueError:
                    raise E.BadRequest(f"invalid resourceVersion {resource_version!r}")
                floor = max(self._history_floor.get(kind, 0), self.watch_floor)
                if since < floor:
                    raise E.Gone(f"too old resource version: {since} ({floor})")
                for rv, etype, obj, old, size in self._history.get(kind, ()):
                    if rv > since:
                        w._offer(etype, obj, old, size)
            elif resource_version == "0":
                for obj in self._objects.get(kind, {}).values():
                    w._offer(ADDED, obj, None, object_size(obj) if w.bounded else 0)
            self._watchers.setdefault(kind, []).append(w)
            return w

    # --- writing -----------------------------------------------------------------------------
    def _ns(self, kind: str, namespace: str | None) -> str:
        return (namespace or "default") if is_namespaced(kind) else ""

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _uid(self, kind: str, ns: str, name: str) -> str:
        self._uid_seq += 1
        h = hashlib.md5(f"{kind}/{ns}/{name}#{self._uid_seq}".encode()).hexdigest()
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"

    def _emit(self, kind: str, etype: str, obj: dict, old: dict | None) -> None:
        self.kind_rv[kind] = self._rv
        watchers = self._watchers.get(kind)
        sized = self.history_bytes is not None or (watchers is not None and any(w.bounded for w in watchers))
        size = object_size(obj) if sized else 0
        if self.keep_history:
            rv = int(_meta(obj).get("resourceVersion") or self._rv)
            hist = self._history.get(kind)
            if hist is None:
                hist = self._history[kind] = deque()
            hist.append((rv, etype, obj, old, size))
            held = self._history_size[kind] = self._history_size.get(kind, 0) + size
            limit = HISTORY if self.history_limit is None else self.history_limit
            while len(hist) > limit or (self.history_bytes is not None and held > self.history_bytes and len(hist) > 1):
                dropped = hist.popleft()
                held -= dropped[4]
                self._history_floor[kind] = dropped[0]
            self._history_size[kind] = held
        if watchers:
            for w in tuple(watchers):  # a watch that overflows leaves the list
                w._offer(etype, obj, old, size)
        for hook in self.write_hooks:
            hook(etype, obj, old)

    def event_name(self, involved: str) -> str:
        """A unique Event name, ``<involved object>.<hex sequence>`` (Kubernetes uses a hex timestamp)."""
        with self._lock:
            self._event_seq += 1
            return f"{involved}.{self._event_seq:x}"

    def create_event(self, involved: str, namespace: str, annotations: dict | None, body: dict) -> dict:
        """Create an Event named as :meth:`event_name` names one, stored exactly as :meth:`create` would store
        ``{"apiVersion": "v1", "kind": "Event", "metadata": {"name", "namespace", "annotations"}, **body}``, on a
        short path (Events are most of what a simulation writes): an Event has no owners, no admission, no
        generation and no uid index."""
        with self._lock:
            name = self.event_name(involved)
            ns = namespace or "default"
            store = self._objects.get("Event")
            if store is None:
                store = self._objects["Event"] = {}
            meta: dict[str, Any] = {"name": name, "namespace": ns}
            if annotations:
                meta["annotations"] = annotations
            if (ns, name) in store:  # an Event of that name exists already: create() says so
                return self.create({"apiVersion": "v1", "kind": "Event", "metadata": meta, **body})
            meta["uid"] = self._uid("Event", ns, name)
            meta["resourceVersion"] = str(self._next_rv())
            meta["creationTimestamp"] = fmt_time(self.clock.now())
            new = {"apiVersion": "v1", "kind": "Event", "metadata": meta, **body}
            store[(ns, name)] = new
            self._emit("Event", ADDED, new, None)
            return new

    def new_uid(self, kind: str, namespace: str, name: str) -> str:
        """A uid for an object about to be created (one that must name itself, as a Job's selector does)."""
        with self._lock:
            return self._uid(kind, namespace, name)

    def create(self, obj: dict, namespace: str | None = None, uid: str | None = None) -> dict:
        kind = obj.get("kind")
        if not kind or kind not in BY_KIND:
            raise E.BadRequest(f"unknown kind {kind!r}")
        with self._lock:
            meta = dict(_meta(obj))
            ns = self._ns(kind, namespace or meta.get("namespace"))
            if namespace and meta.get("namespace") and meta["namespace"] != namespace and is_namespaced(kind):
                raise E.BadRequest("the namespace of the provided object does not match the namespace sent on the request")
            name = meta.get("name")
            if not name:
                prefix = meta.get("generateName")
                if not prefix:
                    raise E.Invalid(f"{kind} is invalid: metadata.name: Required value: name or generateName is required",
                                    kind=kind, causes=[{"reason": "FieldValueRequired", "message": "Required value: name or generateName is required", "field": "metadata.name"}])
                while True:
                    name = self.names.generate(prefix)
                    if (ns, name) not in self._objects.get(kind, {}):
                        break
            store = self._objects.setdefault(kind, {})
            if (ns, name) in store:
                raise E.AlreadyExists(f'{_resource_name(kind)} "{name}" already exists', kind=_plural(kind),
                                      name=name, group=_group(kind))
            if kind not in UNINDEXED_KINDS:
                self.names.reserve(name)
            meta["name"] = name
            if is_namespaced(kind):
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            meta["uid"] = uid or self._uid(kind, ns, name)
            meta["resourceVersion"] = str(self._next_rv())
            meta["creationTimestamp"] = fmt_time(self.clock.now())
            if kind in GENERATION_KINDS:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            meta.pop("deletionTimestamp", None)
            new = dict(obj)
            new["metadata"] = meta
            new.setdefault("apiVersion", BY_KIND[kind].api_version)
            if kind == "Pod":
                new = self._admit_pod(new)
            elif kind == "PersistentVolumeClaim":
                new = self._admit_claim(new)
            store[(ns, name)] = new
            if kind not in UNINDEXED_KINDS:
                self._by_uid[meta["uid"]] = (kind, ns, name)
            self._index_owners(kind, ns, name, None, new)
            self._emit(kind, ADDED, new, None)
            return new

    def update(self, obj: dict, subresource: str | None = None) -> dict:
        kind = obj.get("kind")
        meta = _meta(obj)
        with self._lock:
            old = self.get(kind, meta.get("name", ""), meta.get("namespace", ""))
            rv = meta.get("resourceVersion")
            if rv and rv != _meta(old).get("resourceVersion"):
                raise E.Conflict(
                    f'Operation cannot be fulfilled on {_resource_name(kind)} "{meta.get("name")}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    kind=_plural(kind), name=meta.get("name", ""), group=_group(kind))
            return self._replace(kind, old, obj, subresource)

    def patch(self, kind: str, name: str, patch: Any, namespace: str = "", patch_type: str = MERGE_PATCH,
              subresource: str | None = None) -> dict:
        with self._lock:
            old = self.get(kind, name, namespace)
            if patch_type in (MERGE_PATCH, "merge"):
                new = merge_patch(old, patch)
            elif patch_type in (JSON_PATCH, "json"):
                new = json_patch(old, patch)
            elif patch_type in (STRATEGIC_MERGE_PATCH, "strategic", APPLY_PATCH, "apply"):
                from .strategic import strategic_merge_patch

                new = strategic_merge_patch(old, patch, kind)
            else:
                raise E.UnsupportedMediaType(f"the media type {patch_type!r} is not supported for patches")
            if not isinstance(new, dict):
                raise E.BadRequest("the patch does not produce an object")
            rv = _meta(new).get("resourceVersion")
            if rv and rv != _meta(old).get("resourceVersion"):
                raise E.Conflict(
                    f'Operation cannot be fulfilled on {_resource_name(kind)} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    kind=_plural(kind), name=name, group=_group(kind))
            return self._replace(kind, old, new, subresource)

    def _replace(self, kind: str, old: dict, new: dict, subresource: str | None) -> dict:
        om = _meta(old)
        ns, name = om.get("namespace", "") if is_namespaced(kind) else "", om["name"]
        t = BY_KIND.get(kind)
        has_status = t is not None and "status" in t.subresources
        out = dict(new)
        if subresource == "status":
            out = dict(old)
            if "status" in new:
                out["status"] = new["status"]
            else:
                out.pop("status", None)
            nm = dict(om)
            if "managedFields" in _meta(new):  # what a status write's field manager now owns
                nm["managedFields"] = _meta(new)["managedFields"]
        else:
            if has_status:
                if "status" in old:
                    out["status"] = old["status"]
                else:
                    out.pop("status", None)
            nm = dict(_meta(new))
            for k in ("uid", "creationTimestamp", "namespace", "name"):
                if k in om:
                    nm[k] = om[k]
                else:
                    nm.pop(k, None)
            # deletionTimestamp can only be set by a delete
            if "deletionTimestamp" in om:
                nm["deletionTimestamp"] = om["deletionTimestamp"]
            else:
                nm.pop("deletionTimestamp", None)
            if kind in GENERATION_KINDS:
                nm["generation"] = om.get("generation", 1)
                spec_changed = any(out.get(k) != old.get(k) for k in set(out) | set(old)
                                   if k not in ("metadata", "status", "apiVersion", "kind"))
                if spec_changed:
                    nm["generation"] = int(om.get("generation", 1)) + 1
            else:
                nm.pop("generation", None)
        out["metadata"] = nm
        if (subresource == "status" and out.get("status") == old.get("status")) or \
                (subresource != "status" and _same(out, old)):
            return old  # nothing changed: no new resourceVersion, no event
        out["kind"] = kind
        if kind == "Pod" and subresource is None:
            self._check_pod_update(old, out)
        if nm.get("deletionTimestamp") and not nm.get("finalizers"):
            return self._remove(kind, ns, name, old, out)
        nm["resourceVersion"] = str(self._next_rv())
        self._objects[kind][(ns, name)] = out
        if om.get("ownerReferences") is not nm.get("ownerReferences"):
            self._index_owners(kind, ns, name, old, out)
        self._emit(kind, MODIFIED, out, old)
        return out

    def _check_pod_update(self, old: dict, new: dict) -> None:
        on, nn = (old.get("spec") or {}).get("nodeName"), (new.get("spec") or {}).get("nodeName")
        if on and on != nn:
            raise E.Invalid(f'Pod "{_meta(old)["name"]}" is invalid: spec: Forbidden: pod updates may not change fields other '
                            "than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                            "`spec.tolerations` (only additions to existing tolerations), "
                            "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                            kind="Pod", name=_meta(old)["name"])

    def _check_preconditions(self, kind: str, name: str, om: dict, preconditions: dict | None) -> None:
        if preconditions:
            if preconditions.get("uid") and preconditions["uid"] != om.get("uid"):
                raise E.Conflict(f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object "
                                 f"meta: {om.get('uid')}", kind=_plural(kind), name=name)
            if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != om.get("resourceVersion"):
                raise E.Conflict("Precondition failed: resourceVersion", kind=_plural(kind), name=name)

    def _mark(self, kind: str, old: dict, when: float, grace: int | None, status: dict | None = None) -> dict:
        """Store ``old`` marked for deletion (deletionTimestamp ``when``, the grace period if given, generation
        + 1 the first time), emitting MODIFIED."""
        om = _meta(old)
        nm = dict(om)
        first = not om.get("deletionTimestamp")
        nm["deletionTimestamp"] = fmt_time(when)
        if grace is not None:
            nm["deletionGracePeriodSeconds"] = grace
        if first and "generation" in om:
            nm["generation"] = int(om["generation"]) + 1
        nm["resourceVersion"] = str(self._next_rv())
        out = dict(old)
        out["metadata"] = nm
        if status is not None:
            out["status"] = status
        ns = om.get("namespace", "") if is_namespaced(kind) else ""
        self._objects[kind][(ns, om["name"])] = out
        self._emit(kind, MODIFIED, out, old)
        return out

    def delete_gracefully(self, name: str, namespace: str, grace: int | None = None,
                          preconditions: dict | None = None) -> dict:
        """A client's DELETE of a pod, as kube-apiserver and a kubelet play it: the pod is marked with a
        deletionTimestamp its grace period ahead (at once for a pod on no node, or finished), which is what the
        DELETE answers; the kubelet stops it (at once here), marks it with a grace period of 0, and it goes."""
        with self._lock:
            old = self.get("Pod", name, namespace)
            om = _meta(old)
            self._check_preconditions("Pod", name, om, preconditions)
            if om.get("deletionTimestamp"):
                return old
            spec, phase = old.get("spec") or {}, (old.get("status") or {}).get("phase")
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30) or 0)
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
            now = self.clock.now()
            marked = self._mark("Pod", old, now + grace, grace)
            last = marked
            if grace > 0:
                last = self._mark("Pod", marked, now, 0)
            if not om.get("finalizers"):
                ns = om.get("namespace", "") or "default"
                self._remove("Pod", ns, name, last, last)
            return marked

    def mark_terminating(self, kind: str, name: str, namespace: str = "", status: dict | None = None) -> dict:
        """Mark an object for deletion without removing it (a Namespace while its contents go)."""
        with self._lock:
            return self._mark(kind, self.get(kind, name, namespace), self.clock.now(), None, status)

    def remove(self, kind: str, name: str, namespace: str = "") -> dict:
        """Remove an object at once (what a controller does once its finalizing work is done)."""
        with self._lock:
            old = self.get(kind, name, namespace)
            ns = _meta(old).get("namespace", "") if is_namespaced(kind) else ""
            return self._remove(kind, ns, name, old, old)

    def delete(self, kind: str, name: str, namespace: str = "", propagation: str | None = None,
               preconditions: dict | None = None, grace_period_seconds: int | None = None) -> dict | None:
        with self._lock:
            old = self.get(kind, name, namespace)
            om = _meta(old)
            self._check_preconditions(kind, name, om, preconditions)
            ns = om.get("namespace", "") if is_namespaced(kind) else ""
            if om.get("finalizers"):
                if kind == "Pod":
                    return self._delete_held_pod(old, grace_period_seconds)
                if om.get("deletionTimestamp"):
                    return old
                nm = dict(om)
                nm["deletionTimestamp"] = fmt_time(self.clock.now())
                nm["deletionGracePeriodSeconds"] = 0
                nm["resourceVersion"] = str(self._next_rv())
                if "generation" in om:
                    nm["generation"] = int(om["generation"]) + 1  # the API server counts this as a spec change
                out = dict(old)
                out["metadata"] = nm
                self._objects[kind][(ns, name)] = out
                self._emit(kind, MODIFIED, out, old)
                if propagation == "Orphan":
                    self._orphan(om.get("uid"))
                return out
            out = old
            if kind == "Pod":  # a pod's deletion is always graceful: it goes with a deletionTimestamp
                nm = dict(om)
                nm["deletionTimestamp"] = fmt_time(self.clock.now())
                nm.setdefault("deletionGracePeriodSeconds", 0)
                out = dict(old)
                out["metadata"] = nm
            return self._remove(kind, ns, name, old, out, propagation)

    def _delete_held_pod(self, old: dict, grace: int | None) -> dict:
        """DELETE of a pod a finalizer holds, as kube-apiserver answers it: marked with a deletionTimestamp its grace
        period ahead (the pod's terminationGracePeriodSeconds unless the request names one; 0 for a pod on no node or
        finished); a later DELETE with a shorter grace period moves the deletionTimestamp earlier, never later."""
        om = _meta(old)
        spec, phase = old.get("spec") or {}, (old.get("status") or {}).get("phase")
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds", 30) or 0)
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            grace = 0
        now = self.clock.now()
        current = parse_time(om.get("deletionTimestamp"))
        if current is not None and now + grace >= current:
            return old
        return self._mark("Pod", old, now + grace, grace)

    def _remove(self, kind: str, ns: str, name: str, old: dict, last: dict, propagation: str | None = None) -> dict:
        self._objects[kind].pop((ns, name), None)
        uid = _meta(old).get("uid")
        self._by_uid.pop(uid, None)
        self._index_owners(kind, ns, name, old, None)
        nm = dict(_meta(last))
        nm["resourceVersion"] = str(self._next_rv())
        last = dict(last)
        last["metadata"] = nm
        self._emit(kind, DELETED, last, old)
        if propagation == "Orphan":
            self._orphan(uid)
        else:
            self._collect(uid)
        return last

    # --- garbage collection ----------------------------------------------------------------------
    def _index_owners(self, kind: str, ns: str, name: str, old: dict | None, new: dict | None) -> None:
        key = (kind, ns, name)
        for o, add in ((old, False), (new, True)):
            if o is None:
                continue
            for ref in _meta(o).get("ownerReferences") or ():
                uid = ref.get("uid")
                if not uid:
                    continue
                deps = self._dependents.setdefault(uid, set())
                if add:
                    deps.add(key)
                else:
                    deps.discard(key)
                    if not deps:
                        self._dependents.pop(uid, None)

    def _dependents_of(self, uid: str | None) -> Iterable[tuple[str, str, str, dict, list[dict]]]:
        """The dependents of an owner that is going, each with its other owner references (the owner's
        dependents index is dropped)."""
        if not uid:
            return
        for kind, ns, name in sorted(self._dependents.pop(uid, ())):
            obj = self._objects.get(kind, {}).get((ns, name))
            if obj is not None:
                yield kind, ns, name, obj, [r for r in _meta(obj).get("ownerReferences") or () if r.get("uid") != uid]

    def _collect(self, uid: str | None) -> None:
        """Delete the dependents of an owner that is gone (background propagation)."""
        for kind, ns, name, _, refs in self._dependents_of(uid):
            if any(r.get("uid") in self._by_uid for r in refs):
                continue  # another owner still exists
            try:
                self.delete(kind, name, ns)
            except E.NotFound:
                pass

    def _orphan(self, uid: str | None) -> None:
        for kind, _, _, obj, refs in self._dependents_of(uid):
            nm = dict(_meta(obj))
            nm["ownerReferences"] = refs
            if not refs:
                nm.pop("ownerReferences")
            new = dict(obj)
            new["metadata"] = nm
            self._replace(kind, obj, new, None)

    # --- admission -----------------------------------------------------------------------------
    def _admit_pod(self, pod: dict) -> dict:
        spec = pod.get("spec") or {}
        changed = {}
        pc_name = spec.get("priorityClassName")
        priority = None
        pcs = self._objects.get("PriorityClass", {})
        if pc_name:
            pc = pcs.get(("", pc_name))
            if pc is not None:
                priority = int(pc.get("value") or 0)
                if not spec.get("preemptionPolicy") and pc.get("preemptionPolicy"):
                    changed["preemptionPolicy"] = pc["preemptionPolicy"]
            elif pc_name in ("system-cluster-critical", "system-node-critical"):
                priority = 2000000000 if pc_name == "system-cluster-critical" else 2000001000
        else:
            for pc in pcs.values():
                if pc.get("globalDefault"):
                    priority = int(pc.get("value") or 0)
                    changed["priorityClassName"] = _meta(pc).get("name")
                    break
        if priority is not None and spec.get("priority") is None:
            changed["priority"] = priority
        rc = spec.get("runtimeClassName")
        if rc and not spec.get("overhead"):
            rco = self._objects.get("RuntimeClass", {}).get(("", rc))
            fixed = ((rco or {}).get("overhead") or {}).get("podFixed")
            if fixed:
                changed["overhead"] = dict(fixed)
        status = pod.get("status")
        if not isinstance(status, dict) or not status.get("phase"):
            pod = dict(pod)
            pod["status"] = {**(status if isinstance(status, dict) else {}), "phase": "Pending"}
        if changed:
            pod = dict(pod)
            pod["spec"] = {**spec, **changed}
        if self.pod_admission is not None:
            pod = self.pod_admission(pod)
        return pod

    def _admit_claim(self, pvc: dict) -> dict:
        """The DefaultStorageClass admission: a claim created without ``spec.storageClassName`` (absent, not "")
        gets the default StorageClass's name; with several defaults, the newest (by creationTimestamp, then name)."""
        spec = pvc.get("spec") or {}
        if spec.get("storageClassName") is not None or \
                "volume.beta.kubernetes.io/storage-class" in (_meta(pvc).get("annotations") or {}):
            return pvc
        defaults = [sc for sc in self._objects.get("StorageClass", {}).values()
                    if any((_meta(sc).get("annotations") or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)]
        if not defaults:
            return pvc
        newest = min(defaults, key=lambda sc: (-(parse_time(_meta(sc).get("creationTimestamp")) or 0.0),
                                               str(_meta(sc).get("name") or "")))
        return {**pvc, "spec": {**spec, "storageClassName": _meta(newest).get("name")}}

    # --- subresources --------------------------------------------------------------------------
    def bind(self, name: str, namespace: str, node: str) -> None:
        with self._lock:
            pod = self.get("Pod", name, namespace)
            if _meta(pod).get("deletionTimestamp"):
                raise E.Conflict(f"pod {name} is being deleted, cannot be assigned to a host", kind="pods", name=name)
            if (pod.get("spec") or {}).get("nodeName"):
                raise E.Conflict(f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
                                 kind="pods", name=name)
            new = dict(pod)
            new["spec"] = {**pod.get("spec", {}), "nodeName": node}
            status = dict(pod.get("status") or {})
            conds = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
            ts = fmt_time(self.clock.now())
            if self._scheduled[0] != ts:  # pods bound at one instant share the condition (never mutated)
                self._scheduled = (ts, {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts})
            conds.append(self._scheduled[1])
            status["conditions"] = conds
            new["status"] = status
            nm = dict(_meta(pod))
            nm["resourceVersion"] = str(self._next_rv())
            new["metadata"] = nm
            self._objects["Pod"][(self._ns("Pod", namespace), name)] = new
            self._emit("Pod", MODIFIED, new, pod)

    def evict(self, name: str, namespace: str, uid: str | None = None) -> None:
        """Evict a pod as the Eviction API does (see the module docstring)."""
        with self._lock:
            pod = self.get("Pod", name, namespace)
            meta = _meta(pod)
            if uid and meta.get("uid") != uid:
                raise E.Conflict(f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}",
                                 kind="pods", name=name)
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed", "Pending") or meta.get("deletionTimestamp"):
                self._evict_now(pod)
                return
            labels = meta.get("labels") or {}
            pdbs = [p for (ns, _), p in self._objects.get("PodDisruptionBudget", {}).items()
                    if ns == meta.get("namespace") and _pdb_selects(p, labels)]
            if not pdbs:
                self._evict_now(pod)
                return
            if len(pdbs) > 1:
                raise E.InternalError(PDB_MULTIPLE)
            pdb = pdbs[0]
            st = pdb.get("status") or {}
            pname = _meta(pdb).get("name")
            if not _pod_ready(pod):
                # an unready pod doesn't count towards currentHealthy: it goes without using the budget when
                # the policy always allows it, or when the budget is met anyway
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
                healthy, desired = int(st.get("currentHealthy") or 0), int(st.get("desiredHealthy") or 0)
                if policy == "AlwaysAllow" or (desired > 0 and healthy >= desired):
                    self._evict_now(pod)
                    return
            if int(st.get("observedGeneration") or 0) < int(_meta(pdb).get("generation") or 1):
                raise E.TooManyRequests(PDB_VIOLATION, kind="pods", name=name, causes=[{
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {pname} is still being processed by the server."}])
            allowed = int(st.get("disruptionsAllowed") or 0)
            if allowed <= 0:
                raise E.TooManyRequests(PDB_VIOLATION, kind="pods", name=name, causes=[{
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {pname} needs {st.get('desiredHealthy', 0)} healthy pods and has "
                               f"{st.get('currentHealthy', 0)} currently"}])
            nst = dict(st)
            nst["disruptionsAllowed"] = allowed - 1
            nst["disruptedPods"] = {**(st.get("disruptedPods") or {}), name: fmt_time(self.clock.now())}
            npdb = dict(pdb)
            npdb["status"] = nst
            self._replace("PodDisruptionBudget", pdb, npdb, "status")
            self._evict_now(pod)

    def _evict_now(self, pod: dict) -> None:
        meta = _meta(pod)
        self.evicted_uids.add(meta.get("uid", ""))
        self.delete("Pod", meta["name"], meta.get("namespace", ""))

    def scale(self, kind: str, name: str, namespace: str, replicas: int) -> dict:
        """The ``scale`` subresource of Deployments, ReplicaSets and StatefulSets (and Job parallelism)."""
        with self._lock:
            obj = self.get(kind, name, namespace)
            field = "parallelism" if kind == "Job" else "replicas"
            new = dict(obj)
            new["spec"] = {**(obj.get("spec") or {}), field: int(replicas)}
            return self._replace(kind, obj, new, None)


def object_size(obj: dict) -> int:
    """About the bytes an object takes written out (its JSON)."""
    import orjson

    try:
        return len(orjson.dumps(obj))
    except (TypeError, orjson.JSONEncodeError):
        return 1024


def _same(new: dict, old: dict) -> bool:
    if new.keys() != old.keys():
        return False
    for k, v in new.items():
        if k == "metadata":
            a, b = v, old[k]
            if a.keys() - {"resourceVersion"} != b.keys() - {"resourceVersion"}:
                return False
            if any(a[x] != b.get(x) for x in a if x != "resourceVersion"):
                return False
        elif v is not old[k] and v != old[k]:
            return False
    return True


@functools.lru_cache(maxsize=4096)
def _selector(text: str):
    return parse_label_selector(text)


def _pdb_selects(pdb: dict, labels: dict) -> bool:
    sel = (pdb.get("spec") or {}).get("selector")
    if sel is None:
        return False  # a nil selector selects nothing in policy/v1
    return _selector(selector_to_string(sel))(labels)


def _pod_ready(pod: dict) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _resource_name(kind: str) -> str:
    t = BY_KIND.get(kind)
    if t is None:
        return kind.lower()
    return f"{t.plural}.{t.group}" if t.group else t.plural


def _group(kind: str) -> str:
    t = BY_KIND.get(kind)
    return t.group if t is not None else ""


def deep_copy(obj: dict) -> dict:
    """A private copy of a stored object, for callers that want to edit and update it."""
    return copy.deepcopy(obj)


def _plural(kind: str) -> str:
    """The resource an error's ``details.kind`` names: the plural, without the group (kube-apiserver's)."""
    t = BY_KIND.get(kind)
    return t.plural if t is not None else kind.lower()
