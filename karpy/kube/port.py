"""The interface karpy's controllers use to reach a Kubernetes API server.

Objects travel as JSON-shaped dicts, exactly as the API server returns them.
Objects handed out by :meth:`KubeAPI.get`, :meth:`KubeAPI.list` and watches
are shared with the cache: **never mutate them**; build a new dict (or a
patch) and write it back. Errors are :mod:`karpy.kube.errors` exceptions with
Kubernetes' codes (404 NotFound, 409 Conflict, 410 Gone, 422 Invalid, 429
TooManyRequests from the Eviction API, ...).

Two implementations exist: :class:`karpy.kube.memory.MemoryAPI` (the embedded
API server of ``karpy simulate`` and ``karpy sandbox``) and the client of a
real API server used by ``karpy controller``.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Protocol

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class WatchEvent(NamedTuple):
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK | ERROR
    object: dict


class Watch(Protocol):
    """A stream of changes to one kind, from a resourceVersion on."""

    def poll(self) -> list[WatchEvent]:
        """Events that have arrived, without waiting."""

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event, waiting up to ``timeout`` seconds; None when it timed out or the watch stopped."""

    def stop(self) -> None:
        ...


class KubeAPI(Protocol):
    def get(self, kind: str, name: str, namespace: str = "") -> dict:
        """The object, or NotFound."""

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict], str]:
        """The matching objects and the list's resourceVersion (to watch from)."""

    def watch(self, kind: str, resource_version: str | None = None, namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None) -> Watch:
        """Changes after ``resource_version`` (Gone when it is too old)."""

    def create(self, obj: dict, namespace: str | None = None) -> dict:
        ...

    def update(self, obj: dict, subresource: str | None = None) -> dict:
        """Replace the object; Conflict when ``metadata.resourceVersion`` is stale."""

    def patch(self, kind: str, name: str, patch: Any, namespace: str = "", patch_type: str = MERGE_PATCH,
              subresource: str | None = None) -> dict:
        ...

    def delete(self, kind: str, name: str, namespace: str = "", propagation: str | None = None,
               preconditions: dict | None = None, grace_period_seconds: int | None = None) -> dict | None:
        """Delete (or mark for deletion when finalizers remain); returns the object as it then is."""

    def evict(self, name: str, namespace: str, uid: str | None = None) -> None:
        """The Eviction subresource: deletes the pod unless a PodDisruptionBudget forbids it (TooManyRequests)."""

    def bind(self, name: str, namespace: str, node: str) -> None:
        """The Binding subresource: assign a pending pod to a node."""


def obj_kind_name(obj: dict) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return obj.get("kind", ""), str(meta.get("namespace") or ""), str(meta.get("name") or "")


def names(objs: Iterable[dict]) -> list[str]:
    return [(o.get("metadata") or {}).get("name", "") for o in objs]
