"""The Kubernetes REST semantics of the sandbox, over :class:`~karpy.kube.memory.MemoryAPI`.

:class:`RestAPI` turns one HTTP request (method, path, query, headers, body)
into a :class:`Response` -- a JSON body, or for a watch a stream of JSON lines --
without knowing anything about sockets (:mod:`karpy.sandbox.server` carries it
over HTTP). It does what kube-apiserver does around its storage:

* routing of ``/api/v1/...`` and ``/apis/<group>/<version>/...`` paths
  (namespaced, cluster-scoped and all-namespaces collections, the legacy
  ``/watch/`` prefix, subresources) onto the kinds table;
* admission and validation: objects written by clients (create, update, patch)
  are validated and defaulted with karpy's API validation
  (:func:`karpy.api.loader.validate_object`, the CRDs' OpenAPI and CEL rules
  and the built-in kinds' Go validation); an invalid object is a 422 with one
  cause per field; server-set metadata is ignored on create, status is reset
  to the kind's zero status (except for Nodes), namespaces must exist; what
  kube-apiserver's decoder, strategies and admission plugins add besides
  (Service addresses, a pod's ServiceAccount and tolerations, ...) comes from
  :mod:`karpy.sandbox.admission`;
* ``metadata.managedFields`` for every write, and server-side apply with field
  ownership, conflicts and ``force`` (:mod:`karpy.sandbox.fields`);
* patches: JSON merge, strategic merge (415 for custom resources, as
  kube-apiserver answers), JSON patch, and server-side apply;
* the ``status``, ``scale`` (autoscaling/v1 Scale), ``eviction`` (429 from a
  PodDisruptionBudget), ``binding`` and ``log`` (:mod:`karpy.sandbox.logs`) subresources; deletion with
  ``propagationPolicy``/``orphanDependents``/preconditions, answering the
  object or a Status as kube-apiserver does for the kind (pods are deleted
  gracefully, Namespaces go Terminating, Jobs orphan their pods by default);
  ``deletecollection``; deleting a Namespace deletes what is in it;
* list and watch with label and field selectors and resourceVersion
  (``resourceVersionMatch``, lists at an exact resourceVersion from the watch
  history, ``limit``/``continue`` pages with ``remainingItemCount``; a watch
  too old answers an ``ERROR`` event with a 410 Status, as kube-apiserver does),
  ``timeoutSeconds`` and ``allowWatchBookmarks`` (``sendInitialEvents`` is a
  422, the WatchList feature gate being off in kube-apiserver v1.33); a
  field selector on a field the kind cannot be selected on is kube-apiserver's
  400 (``field label not supported: spec.foo``);
* the access and identity reviews ``kubectl auth can-i`` and ``kubectl auth
  whoami`` send (the sandbox authorizes every request);
* ``metrics.k8s.io/v1beta1`` node and pod metrics from the simulated usage, for ``kubectl top``
  (:mod:`karpy.sandbox.metrics`);
* request bodies in JSON, YAML, or Kubernetes' protobuf for the built-in kinds
  (what kubectl's generators send; :mod:`karpy.sandbox.protobuf` decodes them
  into the same dicts), with kube-apiserver's 400 and 415 for what it cannot
  read; responses are JSON, which every client accepts;
* content negotiation: plain JSON, server-side ``Table`` (kubectl get) and
  ``PartialObjectMetadata``;
* discovery, ``/version``, OpenAPI v3 and the health endpoints.

``tests/realcluster/test_sandbox_parity.py`` plays the same probes against the
sandbox and kube-apiserver v1.33 and holds what a client sees to be the same.

Every read and write of the store happens under the sandbox's lock (the one
the real-time loop of the simulated world holds while it runs), so the
single-threaded controllers never see a request half done.
"""

from __future__ import annotations

import copy
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from ..kube import errors as E
from ..kube.memory import MemoryAPI
from ..kube import limits as L
from ..kube import yamlsafe
from ..kube.patch import MAX_COPY_BYTES, MAX_OPERATIONS, json_patch, merge_patch
from ..kube.port import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from ..kube.registry import BY_KIND
from ..kube.times import fmt_time
from ..kube.selectors import escape_field_value, field_selector_terms, selector_to_string
from . import discovery as D
from . import admission as A
from . import fields as F
from . import logs as LG
from . import metrics as M
from . import protobuf as P
from . import tables as T
from .crds import printer_columns

DEFAULT_WATCH_TIMEOUT = 1800.0  # kube-apiserver's --min-request-timeout
BOOKMARK_EVERY = 60.0  # wall seconds between bookmarks on a watch that asked for them (and one 2 s before its end)
# a watch whose client falls this far behind is closed, as kube-apiserver closes a watcher that does not keep up
# (the client resumes from the last resourceVersion it saw)
WATCH_BUFFER_EVENTS = 5000
WATCH_BUFFER_BYTES = 16 * 1024 * 1024
TOO_LARGE_RV_WAIT = 3.0  # wall seconds a read waits for a resourceVersion the store has not reached
_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list.")
SERVER_SET_META = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "managedFields", "selfLink")
KEEP_STATUS_ON_CREATE = frozenset({"Node"})  # every other kind with a status subresource starts without one
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Response:
    status: int = 200
    body: Any = None  # JSON-able, or bytes, or str
    content_type: str = "application/json"
    stream: Iterator[bytes] | None = None  # a watch: one JSON line per item
    headers: dict[str, str] = field(default_factory=dict)

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return orjson.dumps(self.body) + b"\n"  # as Go's JSON encoder ends what it writes


def _status_ok(code: int = 200, details: dict | None = None) -> dict:
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details:
        out["details"] = details
    return out


def error_response(e: E.ApiError) -> Response:
    headers = {}
    if e.retry_after is not None:
        headers["Retry-After"] = str(e.retry_after)
    return Response(e.code, e.status(), headers=headers)


@dataclass
class Route:
    served: D.Served
    namespace: str | None
    name: str | None
    sub: str | None
    watch_prefix: bool = False


def _meta(o: dict) -> dict:
    m = o.get("metadata")
    return m if isinstance(m, dict) else {}


# --- events.k8s.io/v1 <-> core/v1 Events -------------------------------------------------------------
_EV_FIELDS = (("regarding", "involvedObject"), ("note", "message"), ("deprecatedSource", "source"),
              ("deprecatedFirstTimestamp", "firstTimestamp"), ("deprecatedLastTimestamp", "lastTimestamp"),
              ("deprecatedCount", "count"), ("reportingController", "reportingComponent"),
              ("reportingInstance", "reportingInstance"), ("eventTime", "eventTime"), ("reason", "reason"),
              ("type", "type"), ("action", "action"), ("related", "related"), ("series", "series"))


def _event_to_v1(core: dict) -> dict:
    out: dict[str, Any] = {"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": _meta(core)}
    for new, old in _EV_FIELDS:
        if core.get(old) is not None:
            out[new] = core[old]
    return out


def _event_from_v1(ev: dict) -> dict:
    out: dict[str, Any] = {"kind": "Event", "apiVersion": "v1", "metadata": _meta(ev)}
    for new, old in _EV_FIELDS:
        if ev.get(new) is not None:
            out[old] = ev[new]
    return out


class RestAPI:
    def __init__(self, api: MemoryAPI, lock: threading.RLock, clock: Any, *, stopping: threading.Event | None = None,
                 ready: Callable[[], bool] | None = None, server_address: str = "127.0.0.1:6443",
                 ca_pem: str | None = None, service_ips: A.ServiceIPs | None = None):
        self.api = api
        self.lock = lock
        self.clock = clock
        self.ca_pem = ca_pem  # the CA the kube-root-ca.crt ConfigMap of each namespace holds
        self.client_cert_sha256: str | None = None  # the kubeconfig's client certificate, as SelfSubjectReview tells
        self.service_ips = service_ips or A.ServiceIPs()
        with lock:
            for svc in api.all("Service"):
                self.service_ips.note(svc)
        self.stopping = stopping or threading.Event()
        self.ready = ready or (lambda: True)
        self.server_address = server_address
        self._watches: set = set()
        self._watches_lock = threading.Lock()
        self._openapi_cache: dict[str, Any] = {}
        self._tls = threading.local()
        # which buffer holds a container's log (karpy sandbox: Karpenter's pod); None: it writes nothing
        self.log_source: Callable[[dict, str], Any] = lambda pod, container: None

    @property
    def _warnings(self) -> list[str]:
        w = getattr(self._tls, "warnings", None)
        if w is None:
            w = self._tls.warnings = []
        return w

    # --- entry point ------------------------------------------------------------------------------
    def handle(self, method: str, target: str, headers: Any, body: bytes) -> Response:
        parts = urlsplit(target)
        path = unquote(parts.path).rstrip("/") or "/"  # as Go's server decodes it: "%3A" is ":", "%2F" a "/"
        lists = parse_qs(parts.query, keep_blank_values=True)
        query: dict[str, Any] = {k: v[-1] for k, v in lists.items()}
        if "dryRun" in lists:
            query["dryRun"] = lists["dryRun"]  # every value: each must be "All"
        self._tls.warnings = []
        try:
            resp = self._dispatch(method.upper(), path, query, headers, body)
            if self._tls.warnings:
                resp.headers["Warning"] = ", ".join('299 - "%s"' % w.replace('"', "'") for w in self._tls.warnings)
            return resp
        except E.ApiError as e:
            return error_response(e)
        except _PageNotFound:
            return Response(404, "404 page not found\n", "text/plain; charset=utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})
        except _NotFoundPath:
            return Response(404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "the server could not find the requested resource", "reason": "NotFound",
                                  "details": {}, "code": 404})

    def _dispatch(self, method: str, path: str, query: dict, headers: Any, body: bytes) -> Response:
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/", "/readyz/")):
            if path.startswith("/readyz") and (not self.ready() or self.stopping.is_set()):
                return Response(503, "[-]sandbox not ready\nreadyz check failed\n", "text/plain; charset=utf-8")
            return Response(200, "ok", "text/plain; charset=utf-8")
        if path == "/version":
            return Response(200, D.VERSION_INFO)
        if path == "/api":
            return Response(200, D.api_versions(self.server_address))
        if path == "/apis":
            return Response(200, D.api_group_list())
        if path.startswith("/openapi/"):
            return self._openapi(path, headers)
        segs = [s for s in path.split("/") if s]
        if not segs or segs[0] not in ("api", "apis"):
            raise _PageNotFound()
        if segs[0] == "api":
            if len(segs) < 2:
                raise _NotFoundPath()
            group, version, rest = "", segs[1], segs[2:]
        else:
            g = D.api_group(segs[1])
            if g is None:
                raise _PageNotFound()  # no group of that name: not even a handler answers
            if len(segs) == 2:
                return Response(200, g)
            group, version, rest = segs[1], segs[2], segs[3:]
            if version not in D.group_versions().get(group, ()) and group in D.custom_resource_groups():
                raise _PageNotFound()  # the custom resources' handler knows only the versions it serves
        if not rest:
            rl = D.resource_list(group, version)
            if rl is None:
                raise _NotFoundPath()
            return Response(200, rl)
        if (group, version) == (M.GROUP, M.VERSION):  # kubectl top
            with self.lock:
                metrics = M.serve(self.api, self.clock.now(), method, rest, query)
            if metrics is None:
                raise _NotFoundPath()
            return Response(200, metrics)
        rv = self._review_route(group, version, rest)
        if rv is not None:
            return self._review(method, rv[0], rv[1], group, version, query, headers, body)
        route = self._route(group, version, rest)
        return self._resource(method, route, query, headers, body)

    # --- reviews ------------------------------------------------------------------------------------------
    def _review_route(self, group: str, version: str, rest: list[str]) -> tuple[str, str | None] | None:
        if len(rest) == 1 and D.review(group, version, rest[0]) is not None:
            return rest[0], None
        if len(rest) == 3 and rest[0] == "namespaces" and D.review(group, version, rest[2]) is not None:
            return rest[2], rest[1]
        return None

    def _review(self, method: str, plural: str, ns: str | None, group: str, version: str, query: dict,
                headers: Any, body: bytes) -> Response:
        """Access and identity reviews. The sandbox authorizes every request, so it answers as kube-apiserver
        answers a cluster admin (system:masters): allowed, to everything."""
        kind, namespaced = D.review(group, version, plural)
        if (ns is not None) != namespaced:
            raise _NotFoundPath()
        if method != "POST":
            raise _method_not_allowed()
        av = f"{group}/{version}"
        obj = _parse_body(body, headers, expect=(av, kind))
        if not isinstance(obj, dict):
            raise E.BadRequest("the body of the request is not a JSON object")
        now = fmt_time(self.clock.now())
        out: dict[str, Any] = {"kind": kind, "apiVersion": av, "metadata": {"creationTimestamp": None}}
        if kind == "SelfSubjectReview":
            out["metadata"] = {"creationTimestamp": now}
            user: dict[str, Any] = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
            if self.client_cert_sha256:
                user["extra"] = {"authentication.kubernetes.io/credential-id": [f"X509SHA256={self.client_cert_sha256}"]}
            out["status"] = {"userInfo": user}
        elif kind == "SelfSubjectRulesReview":
            out["spec"] = obj.get("spec") or {}
            out["status"] = ADMIN_RULES
        else:
            spec = obj.get("spec") or {}
            out["metadata"]["managedFields"] = [F.entry(_manager(query, headers), "Update", av, now,
                                                        F.field_set({"spec": spec}, F.Shape(kind)), None)]
            if ns is not None:
                out["metadata"]["namespace"] = ns
            out["spec"] = spec
            out["status"] = {"allowed": True}
        return Response(201, out)

    def _route(self, group: str, version: str, rest: list[str]) -> Route:
        watch_prefix = False
        if rest[0] == "watch":
            watch_prefix, rest = True, rest[1:]
            if not rest:
                raise _NotFoundPath()
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and (group, version, rest[2]) in D.SERVED:
            ns, rest = rest[1], rest[2:]
        elif group == "" and rest[0] == "namespaces" and len(rest) == 3 and rest[2] == "bindings":
            # the legacy POST /api/v1/namespaces/{ns}/bindings (the Binding names the pod)
            return Route(D.SERVED[("", "v1", "pods")], rest[1], None, "bindings", watch_prefix)
        served = D.SERVED.get((group, version, rest[0]))
        if served is None or len(rest) > 3:
            raise _NotFoundPath()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if ns is not None and not served.namespaced:
            raise _NotFoundPath()
        if sub in _NO_CONTAINERS and served.type.kind == "Pod":
            raise E.BadRequest(f"karpy sandbox runs no containers: pods/{sub} has no process to connect to")
        if sub is not None and sub not in served.subresources:
            raise _NotFoundPath()
        return Route(served, ns, name, sub, watch_prefix)

    # --- field selectors ----------------------------------------------------------------------------
    def _field_selector(self, s: D.Served, fs: str | None) -> str | None:
        """A list's or watch's field selector, checked as kube-apiserver checks it (400 for what it cannot
        parse and for a field the kind does not select on, with its messages) and written with the names of
        the stored object's fields (events.k8s.io's ``regarding.kind`` is core's ``involvedObject.kind``)."""
        terms = field_selector_terms(fs)
        if not terms:
            return None
        out = []
        for label, op, value in terms:
            out.append(f"{self._field_label(s, label)}{op}{escape_field_value(value)}")
        return ",".join(out)

    def _field_label(self, s: D.Served, label: str) -> str:
        if s.view == "events.k8s.io":
            mapped = _EVENTS_V1_FIELDS.get(label)
            if mapped is None:
                raise E.BadRequest(f"field label not supported: {label}")
            return mapped
        if s.group and s.kind in _crd_kinds():
            if label == "metadata.name" or (label == "metadata.namespace" and s.namespaced):
                return label
            if label in self._selectable_fields(s):
                return label
            raise E.BadRequest(f"field label not supported: {label}")
        labels = _FIELD_LABELS.get(s.kind)
        if labels is None:
            if label in ("metadata.name", "metadata.namespace"):
                return label
            raise E.BadRequest(f'{json.dumps(label)} is not a known field selector: only "metadata.name", '
                               '"metadata.namespace"')
        if label in labels:
            return labels[label]
        if s.kind == "Job":
            raise E.BadRequest(f"field label {json.dumps(label)} not supported for Job")
        raise E.BadRequest(f"field label not supported: {label}")

    def _selectable_fields(self, s: D.Served) -> set[str]:
        """The CRD's ``selectableFields`` of the version (``.spec.color`` selects as ``spec.color``)."""
        with self.lock:
            crd = self.api.try_get("CustomResourceDefinition", f"{s.plural}.{s.group}")
        for v in ((crd or {}).get("spec") or {}).get("versions") or ():
            if isinstance(v, dict) and v.get("name") == s.version:
                return {str(f.get("jsonPath", "")).lstrip(".") for f in v.get("selectableFields") or ()
                        if isinstance(f, dict)}
        return set()

    # --- wire conversion ----------------------------------------------------------------------------
    def _out(self, s: D.Served, obj: dict) -> dict:
        if s.view == "events.k8s.io":
            return _event_to_v1(obj)
        if not s.group or s.kind not in _crd_kinds():
            obj = canonical_quantities(obj)
        if obj.get("apiVersion") != s.api_version or obj.get("kind") != s.kind:
            obj = dict(obj)
            obj["apiVersion"] = s.api_version
            obj["kind"] = s.kind
        return obj

    def _in(self, s: D.Served, obj: Any) -> dict:
        if not isinstance(obj, dict):
            raise E.BadRequest("the body of the request is not a JSON object")
        if s.view == "events.k8s.io":
            obj = _event_from_v1(obj)
        obj = dict(obj)
        obj.setdefault("kind", s.kind)
        if obj.get("kind") != s.kind:
            raise E.BadRequest(_kind_mismatch(s, obj))
        av = obj.get("apiVersion") or s.api_version
        if s.view != "events.k8s.io" and av not in (f"{s.group}/{v}" if s.group else v for v in s.type.served_versions()):
            raise E.BadRequest(f"the API version in the data ({av}) does not match the expected API version "
                               f"({s.api_version})")
        obj["apiVersion"] = s.api_version if s.view != "events.k8s.io" else "v1"
        meta = obj.get("metadata")
        meta = dict(meta) if isinstance(meta, dict) else {}
        for k in ("labels", "annotations", "finalizers", "ownerReferences"):
            if k in meta and meta[k] in ({}, [], None):
                del meta[k]  # empty, they are not written (omitempty)
        obj["metadata"] = meta
        return obj

    # --- resources ----------------------------------------------------------------------------------
    def _resource(self, method: str, r: Route, query: dict, headers: Any, body: bytes) -> Response:
        s = r.served
        if r.name is not None and not r.watch_prefix:
            bad = _path_segment_errors(r.name)
            if bad:
                raise E.BadRequest(f"Name parameter invalid: {json.dumps(r.name)}: {';'.join(bad)}")
        if r.sub == "bindings":
            if method != "POST":
                raise _method_not_allowed()
            b = _parse_body(body, headers, expect=("v1", "Binding"))
            name = _meta(b if isinstance(b, dict) else {}).get("name")
            if not name:
                raise _invalid("Binding", "", "", [("metadata.name", "Required value")])
            return self._bind(Route(s, r.namespace, name, "binding"), b)
        if r.name is None:
            if method == "GET":
                if r.watch_prefix or _truthy(query.get("watch")):
                    return self._watch(r, query, headers)
                return self._list(r, query, headers)
            if method == "POST":
                return self._create(r, query, headers, body)
            if method == "DELETE":
                return self._delete_collection(r, query, headers, body)
            raise _method_not_allowed()
        if r.watch_prefix:
            if method != "GET":
                raise _method_not_allowed()
            query = dict(query, fieldSelector=_and_selector(query.get("fieldSelector"),
                                                            f"metadata.name={escape_field_value(r.name)}"))
            return self._watch(Route(s, r.namespace, None, None, True), query, headers)
        if r.sub == "log":
            if method != "GET":
                raise _method_not_allowed()
            return self._pod_log(r, query)
        if r.sub == "scale":
            return self._scale(method, r, query, headers, body)
        if r.sub in ("eviction", "binding"):
            if method != "POST":
                raise _method_not_allowed()
            if r.sub == "eviction":
                return self._evict(r, _parse_body(body, headers, expect=("policy/v1", "Eviction")) if body else {})
            return self._bind(r, _parse_body(body, headers, expect=("v1", "Binding")))
        if method == "GET":
            with self.lock:
                obj = self.api.get(s.kind, r.name, self._ns(r))
            return self._render_one(s, obj, headers)
        if method == "PUT":
            return self._update(r, query, headers, body)
        if method == "PATCH":
            return self._patch(r, query, headers, body)
        if method == "DELETE":
            if r.sub:
                raise _method_not_allowed()
            return self._delete(r, query, headers, body)
        raise _method_not_allowed()

    def _pod_log(self, r: Route, query: dict) -> Response:
        """A container's log (:mod:`karpy.sandbox.logs`): the options are checked before the pod is read."""
        opts = LG.parse_options(query, r.name or "")
        ns = self._ns(r)
        with self.lock:
            pod = self.api.get("Pod", r.name, ns)
        uid = _meta(pod).get("uid")

        def alive() -> bool:
            with self.lock:
                p = self.api.try_get("Pod", r.name, ns)
            return p is not None and _meta(p).get("uid") == uid

        body, stream = LG.pod_log(pod, opts, self.clock.now(), self.log_source, alive, self.stopping)
        if stream is not None:
            return Response(200, stream=stream, content_type="text/plain")
        return Response(200, body, "text/plain")

    def _ns(self, r: Route) -> str:
        return (r.namespace or "default") if r.served.namespaced else ""

    def _render_one(self, s: D.Served, obj: dict, headers: Any, status: int = 200) -> Response:
        fmt = _accept(headers)
        if fmt == "Table":
            cols, row = self._table_for(s)
            return Response(status, T.table([self._out(s, obj)], cols, row, self.clock.now(),
                                            _meta(obj).get("resourceVersion", ""), "Metadata"))
        if fmt == "PartialObjectMetadata":
            return Response(status, T.partial_metadata(obj))
        return Response(status, self._out(s, obj))

    def _table_for(self, s: D.Served):
        if s.type.group and s.kind not in ("CustomResourceDefinition",) and s.type.kind in _crd_kinds():
            crd = self.api.try_get("CustomResourceDefinition", f"{s.plural}.{s.group}")
            return T.crd_table(printer_columns(crd, s.version, s.kind))
        return T.BUILTIN.get(s.kind, T.GENERIC)

    # --- list -----------------------------------------------------------------------------------------
    def _list(self, r: Route, query: dict, headers: Any) -> Response:
        s = r.served
        ns = r.namespace if s.namespaced else None
        opts = _list_options(query, watch=False)
        fs = self._field_selector(s, query.get("fieldSelector"))
        ls = query.get("labelSelector") or None
        rv, match, limit, cont = opts["rv"], opts["match"], opts["limit"], opts["continue"]
        paged = limit > 0 and rv != "0"
        start = ""
        with self.lock:
            if cont is not None:
                at, start = cont
                items = self._snapshot(s.kind, at, ns, ls, fs, too_old=_CONTINUE_TOO_OLD)
                list_rv = str(at)
            elif rv in ("", "0") or (match != "Exact" and not (paged and match == "")):
                if rv not in ("", "0") and int(rv) > int(self.api.resource_version):
                    items, list_rv = self._list_not_older_than(s.kind, int(rv), ns, ls, fs)
                else:
                    items, list_rv = self.api.list(s.kind, ns or None, ls, fs)
            else:  # an exact resourceVersion (or a page of a list at one, as etcd serves it)
                at = int(rv)
                if at > int(self.api.resource_version):
                    e = E.ApiError("etcdserver: mvcc: required revision is a future revision")
                    e.reason = ""  # etcd's error, passed on as kube-apiserver does: a 500 without a reason
                    raise e
                items = self._snapshot(s.kind, at, ns, ls, fs, too_old="The resourceVersion for the provided list is too old.")
                list_rv = str(at)
        items = sorted(items, key=_list_key)
        meta: dict[str, Any] = {"resourceVersion": list_rv}
        if paged:
            if start:
                items = [o for o in items if _list_key(o) > start]
            if len(items) > limit:
                rest = len(items) - limit
                items = items[:limit]
                meta["continue"] = _continue_token(int(list_rv), _list_key(items[-1]))
                if ls is None and fs is None:
                    meta["remainingItemCount"] = rest
        fmt = _accept(headers)
        if fmt == "Table":
            cols, row = self._table_for(s)
            out = T.table([self._out(s, o) for o in items], cols, row, self.clock.now(), list_rv,
                          query.get("includeObject") or "Metadata")
            out["metadata"] = meta
            return Response(200, out)
        if fmt == "PartialObjectMetadata":
            return Response(200, {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                                  "metadata": meta, "items": [T.partial_metadata(o) for o in items]})
        return Response(200, {"kind": f"{s.kind}List", "apiVersion": s.api_version, "metadata": meta,
                              "items": [self._list_item(s, o) for o in items]})

    def _list_item(self, s: D.Served, obj: dict) -> dict:
        """An item of a list: built-in kinds come without their apiVersion and kind (the list says them),
        custom resources with them, as kube-apiserver serves each."""
        out = self._out(s, obj)
        if _expect(s) is not None and ("apiVersion" in out or "kind" in out):
            out = {k: v for k, v in out.items() if k not in ("apiVersion", "kind")}
        return out

    def _snapshot(self, kind: str, at: int, ns: str | None, ls: str | None, fs: str | None, too_old: str) -> list[dict]:
        from ..kube.memory import _matches
        from ..kube.selectors import parse_field_selector, parse_label_selector

        try:
            objs = self.api.snapshot(kind, at)
        except E.Gone:
            raise E.Gone(too_old) from None
        lp = parse_label_selector(ls) if ls else None
        fp = parse_field_selector(fs) if fs else None
        return [o for o in objs if _matches(o, ns, lp, fp)]

    def _list_not_older_than(self, kind: str, at: int, ns: str | None, ls: str | None,
                             fs: str | None) -> tuple[list[dict], str]:
        """A list at a resourceVersion the store has not reached: kube-apiserver's watch cache waits up to
        3 seconds for it, then answers 504 (the lock is held by the caller and let go while waiting)."""
        deadline = time.monotonic() + TOO_LARGE_RV_WAIT
        while int(self.api.resource_version) < at:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _too_large(at, self.api.resource_version)
            self.lock.release()
            try:
                time.sleep(min(0.05, left))
            finally:
                self.lock.acquire()
        return self.api.list(kind, ns or None, ls, fs)

    # --- watch ----------------------------------------------------------------------------------------
    def _watch(self, r: Route, query: dict, headers: Any) -> Response:
        s = r.served
        ns = r.namespace if s.namespaced else None
        opts = _list_options(query, watch=True)
        rv = opts["rv"]
        fmt = _accept(headers)
        timeout = opts["timeout"] if opts["timeout"] is not None else DEFAULT_WATCH_TIMEOUT
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        fs = self._field_selector(s, query.get("fieldSelector"))
        ls = query.get("labelSelector") or None
        if rv not in ("", "0"):
            try:
                int(rv)
            except ValueError:  # kube-apiserver fails this one late, as an internal error without a reason
                return Response(500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": _bad_rv_message(rv), "code": 500})
        with self.lock:
            try:
                w = self.api.watch(s.kind, rv if rv not in ("",) else "0", ns or None, ls, fs,
                                   max_events=WATCH_BUFFER_EVENTS, max_bytes=WATCH_BUFFER_BYTES)
            except E.Gone as e:
                status = e.status()
                return Response(200, stream=iter([orjson.dumps({"type": "ERROR", "object": status}) + b"\n"]),
                                content_type="application/json")
            # where the watch stands: the resourceVersion it asked for, else the kind's latest change
            start_rv = rv if rv not in ("", "0") else str(self.api.kind_rv.get(s.kind, 0))
        with self._watches_lock:
            self._watches.add(w)
        table = self._table_for(s) if fmt == "Table" else None
        crd = _expect(s) is None

        def encode(etype: str, obj: dict) -> bytes:
            if table is not None:
                o = T.table([self._out(s, obj)], table[0], table[1], self.clock.now(),
                            _meta(obj).get("resourceVersion", ""), query.get("includeObject") or "Metadata")
            elif fmt == "PartialObjectMetadata":
                o = T.partial_metadata(obj)
            else:
                o = self._out(s, obj)
            return orjson.dumps({"type": etype, "object": o}) + b"\n"

        def bookmark(rv_: str) -> bytes:
            # an object of the kind holding only its resourceVersion (a built-in kind's empty creationTimestamp
            # is written out as null, as Go's encoder writes the zero time)
            meta: dict[str, Any] = {"resourceVersion": rv_} if crd else {"resourceVersion": rv_, "creationTimestamp": None}
            obj = {"apiVersion": s.api_version, "kind": s.kind, "metadata": meta} if crd else \
                {"kind": s.kind, "apiVersion": s.api_version, "metadata": meta}
            return orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n"

        def stream() -> Iterator[bytes]:
            now = time.monotonic()
            deadline = now + max(0.0, timeout)
            next_mark = _next_bookmark(now, deadline)
            last_rv = start_rv
            try:
                while not self.stopping.is_set():
                    now = time.monotonic()
                    left = deadline - now
                    if left <= 0:
                        return
                    if bookmarks and next_mark is not None and now >= next_mark:
                        next_mark = _next_bookmark(now + 1.0, deadline)
                        # a bookmark only moves a watch on: the kind changed since what it last saw (in events
                        # that did not match its selectors, say), as kube-apiserver's watch cache sends them
                        latest = self.api.kind_rv.get(s.kind, 0)
                        if latest > int(last_rv or 0):
                            last_rv = str(latest)
                            yield bookmark(last_rv)
                        continue
                    wait = min(1.0, left, max(0.0, next_mark - now) if bookmarks and next_mark is not None else 1.0)
                    ev = w.next(timeout=wait)
                    if w.stopped and ev is None:
                        return
                    if ev is not None:
                        last_rv = _meta(ev.object).get("resourceVersion") or last_rv
                        yield encode(ev.type, ev.object)
            finally:
                w.stop()
                with self._watches_lock:
                    self._watches.discard(w)

        return Response(200, stream=stream(), content_type="application/json")

    def stop_watches(self) -> None:
        with self._watches_lock:
            ws = list(self._watches)
        for w in ws:
            w.stop()

    # --- create -------------------------------------------------------------------------------------
    def _create(self, r: Route, query: dict, headers: Any, body: bytes) -> Response:
        s = r.served
        obj = self._in(s, _parse_body(body, headers, expect=_expect(s)))
        meta = obj["metadata"]
        if s.namespaced:
            if r.namespace is None and not meta.get("namespace"):
                meta["namespace"] = "default"
            elif r.namespace is not None:
                if meta.get("namespace") and meta["namespace"] != r.namespace:
                    raise E.BadRequest("the namespace of the provided object does not match the namespace sent on "
                                       "the request")
                meta["namespace"] = r.namespace
        else:
            meta.pop("namespace", None)
        for k in SERVER_SET_META:
            meta.pop(k, None)
        if "status" in s.type.subresources and s.kind not in KEEP_STATUS_ON_CREATE:
            obj.pop("status", None)
        dry = _dry_run(query, "CreateOptions")
        with self.lock:
            if s.namespaced:
                self._require_namespace(meta["namespace"])
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix:
                    raise _invalid(s.kind, s.group, "", [("metadata.name", "Required value: name or generateName is required")])
                meta["name"] = self._generate_name(s.kind, meta.get("namespace", ""), prefix)
            obj = self._validate(s, obj, None, query.get("fieldValidation", ""))
            _check_name_segment(obj)
            obj = self._defaults(s, obj, None)
            obj = self._track(s, None, obj, _manager(query, headers), seen=_as_field_manager_sees(s, obj))
            obj = self._strategy_on_create(s, obj)
            if dry:
                if self.api.try_get(s.kind, meta["name"], meta.get("namespace", "")) is not None:
                    raise E.AlreadyExists(f'{_resource(s)} "{meta["name"]}" already exists', kind=s.plural,
                                          name=meta["name"], group=s.group)
                return Response(201, self._out(s, self._dry_created(_storable(obj))))
            created = self._store_new(s, obj)
        return self._render_one(s, created, headers, 201)

    def _defaults(self, s: D.Served, obj: dict, old: dict | None) -> dict:
        """The defaults kube-apiserver's decoder gives a kind karpy's validation leaves alone (its field manager
        owns these)."""
        if s.view == "events.k8s.io":
            return obj
        if s.kind in ("ConfigMap", "Secret"):
            obj = {k: v for k, v in obj.items() if k not in ("data", "binaryData", "stringData") or v}
            return A.default_secret(obj) if s.kind == "Secret" else obj
        if s.kind == "Service":
            return A.default_service(obj)
        if s.kind == "Event":
            io_ns = (obj.get("involvedObject") or {}).get("namespace")
            if io_ns and io_ns != _meta(obj).get("namespace"):
                raise _invalid("Event", "", r_name(obj), [("involvedObject.namespace", f'Invalid value: "{io_ns}": '
                                                                                    "does not match event.namespace")])
            return A.default_event(obj)
        if s.kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
            # a pod template's metadata holds the zero time Go writes as null
            spec = obj.get("spec")
            tmpl = spec.get("template") if isinstance(spec, dict) else None
            if isinstance(tmpl, dict) and "creationTimestamp" not in (tmpl.get("metadata") or {}):
                obj = {**obj, "spec": {**spec, "template": {**tmpl, "metadata": {**(tmpl.get("metadata") or {}),
                                                                                 "creationTimestamp": None}}}}
        if s.kind == "DaemonSet":
            obj = A.default_daemonset(obj, old)
        if (s.kind == "Pod" and old is None) or s.kind == "Job":
            obj = dict(obj)
            obj["spec"] = {**(obj.get("spec") or {})}
            obj["spec"].setdefault("enableServiceLinks" if s.kind == "Pod" else "manualSelector",
                                   True if s.kind == "Pod" else False)
        return obj

    def _strategy_on_create(self, s: D.Served, obj: dict) -> dict:
        """What kube-apiserver's strategy and admission set after its field manager has seen the object."""
        if s.kind == "Namespace":
            obj = dict(obj)
            obj["spec"] = {"finalizers": ["kubernetes"], **(obj.get("spec") or {})}
            obj["status"] = {"phase": "Active"}
        elif s.kind == "Service":
            obj = A.allocate_service(obj, self.service_ips)
        elif s.kind == "Node":
            obj = A.taint_new_node(obj)
        elif s.kind == "Job":
            obj = _job_labels(obj)
        elif s.kind == "PersistentVolumeClaim" or s.kind == "PersistentVolume":
            obj = {**A.protect_volume(obj), "status": {"phase": "Pending"}}
        if "status" in s.type.subresources and "status" not in obj:
            zero = F.empty_object(s.kind, _expect(s) is None).get("status")
            if zero is not None:
                obj = dict(obj)
                obj["status"] = zero
        return obj

    def _store_new(self, s: D.Served, obj: dict) -> dict:
        """Create the object in the store (a Job under the uid its selector names), and what comes with it."""
        uid = None
        if s.kind == "Job":
            generated = _meta(obj).get("uid")
            if generated:
                m = _meta(obj)
                uid = self.api.new_uid("Job", m.get("namespace", ""), m.get("name", ""))
                obj = json.loads(json.dumps(obj).replace(generated, uid))
        created = self.api.create(_storable(obj), uid=uid)
        if s.kind == "Namespace":
            self.populate_namespace(_meta(created)["name"])
        return created

    def populate_namespace(self, ns: str) -> None:
        """The ServiceAccount and ConfigMap kube-controller-manager puts in each namespace."""
        for o in A.namespace_objects(ns, self.ca_pem):
            if self.api.try_get(o["kind"], o["metadata"]["name"], ns) is None:
                self.api.create(o)

    def _dry_created(self, obj: dict) -> dict:
        """A dry-run create's answer: the object with the uid and creationTimestamp it would have had (and no
        resourceVersion, since nothing was written)."""
        from ..kube.registry import GENERATION_KINDS

        m = _meta(obj)
        meta = {**m, "uid": self.api.new_uid(str(obj.get("kind")), m.get("namespace", ""), m.get("name", "")),
                "creationTimestamp": fmt_time(self.clock.now())}
        if obj.get("kind") in GENERATION_KINDS:
            meta["generation"] = 1
        return {**obj, "metadata": meta}

    def _generate_name(self, kind: str, ns: str, prefix: str) -> str:
        while True:
            name = self.api.names.generate(prefix)
            if self.api.try_get(kind, name, ns) is None:
                return name

    def _require_namespace(self, ns: str) -> None:
        n = self.api.try_get("Namespace", ns)
        if n is None:
            raise E.NotFound(f'namespaces "{ns}" not found', kind="namespaces", name=ns)
        if _meta(n).get("deletionTimestamp") or (n.get("status") or {}).get("phase") == "Terminating":
            raise E.Forbidden(f"unable to create new content in namespace {ns} because it is being terminated",
                              kind="namespaces", name=ns)

    def _validate(self, s: D.Served, obj: dict, old: dict | None, field_validation: str = "") -> dict:
        """The object validated and defaulted; unknown fields are an error under ``fieldValidation=Strict``
        (400, as the API server's strict decoding says) and dropped otherwise (``Warn``, the default, adds a
        warning)."""
        from ..api.kinds import BY_KIND as LOADER_KINDS
        from ..api.loader import validate_object

        if s.kind == "Namespace" and isinstance(_meta(obj).get("name"), str):
            # kube-apiserver's defaulting labels every Namespace with its name, on every write
            meta = obj["metadata"] = dict(_meta(obj))
            meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
        if s.kind not in LOADER_KINDS or s.kind == "Scenario":
            name = _meta(obj).get("name")
            if not name:
                raise _invalid(s.kind, s.group, "", [("metadata.name", "Required value: name or generateName is required")])
            check = _NAME_CHECKS.get(s.kind)
            bad = check(str(name)) if check is not None else []
            if not bad and s.kind == "CustomResourceDefinition":
                spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
                names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
                if name != f"{names.get('plural')}.{spec.get('group')}":
                    bad = ['must be spec.names.plural+"."+spec.group']
            if bad:
                shown = json.dumps(name, ensure_ascii=False)
                raise _invalid(s.kind, s.group, str(name), [("metadata.name", f"Invalid value: {shown}: {m}") for m in bad])
            return self._prune(s, obj, field_validation)
        if s.kind == "Job" and old is not None:
            obj = _without_kept_job_selector(obj, old)
        rv = _meta(obj).get("resourceVersion")
        doc, errors = validate_object(obj, file="request", old=old, api_notes=True)
        unknown = [e for e in errors if _is_unknown_field(e.message)]
        if unknown and all(_is_unknown_field(e.message) or e.field == "<nil>" for e in errors):
            if field_validation == "Strict":
                raise E.BadRequest(f'{s.kind} in version "{s.version}" cannot be handled as a {s.kind}: strict decoding '
                                   "error: " + ", ".join(f'unknown field "{e.field}"' for e in unknown))
            pruned = copy.deepcopy(obj)
            for e in unknown:
                _drop_path(pruned, e.field)
            doc, errors = validate_object(pruned, file="request", old=old, api_notes=True)
            if not errors and field_validation != "Ignore":
                self._warnings.extend(f'unknown field "{e.field}"' for e in unknown)
        if errors:
            raise _invalid(s.kind, s.group, _meta(obj).get("name") or "", [(e.field, e.message) for e in errors])
        out = doc.obj if doc is not None else obj
        if s.kind in _POD_FIELDS:
            self._check_pods(s.kind, out, _pods_of(out))
        m = _meta(out)
        if rv is not None and m.get("resourceVersion") != rv:
            out = dict(out)
            out["metadata"] = {**m, "resourceVersion": rv}
        return out

    def _prune(self, s: D.Served, obj: dict, field_validation: str) -> dict:
        """A built-in kind karpy's API validation does not cover, without the fields the kind does not have (as
        kube-apiserver's decoder drops them, with a warning; ``fieldValidation=Strict``: a 400), and within the
        size kube-apiserver's validation allows a ConfigMap's or a Secret's data."""
        if s.view == "events.k8s.io" or _expect(s) is None and s.kind != "CustomResourceDefinition":
            return obj
        pruned, unknown = P.prune(obj, s.api_version, s.kind)
        if unknown:
            if field_validation == "Strict":
                raise E.BadRequest(f'{s.kind} in version "{s.version}" cannot be handled as a {s.kind}: strict '
                                   "decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown))
            if field_validation != "Ignore":
                self._warnings.extend(f'unknown field "{u}"' for u in unknown)
        if s.kind in ("ConfigMap", "Secret") and _data_bytes(pruned) > MAX_DATA_BYTES:
            where = "data" if s.kind == "Secret" else "[]"
            raise _invalid(s.kind, s.group, r_name(pruned), [(where, f"Too long: may not be more than {MAX_DATA_BYTES} "
                                                                     "bytes")])
        return pruned

    def _check_pods(self, kind: str, obj: dict, wanted: int) -> None:
        """The sandbox holds as many pods as one simulation (``karpy simulate``'s limit): a write of a workload
        that would ask for more, counted over every workload and bare pod, is a 422 naming the field."""
        from ..simulator.inputs import MAX_PODS

        m = _meta(obj)
        me = (kind, m.get("namespace") or "", m.get("name"))
        total = wanted
        for k in _POD_FIELDS:
            for o in self.api.all(k):
                om = _meta(o)
                if (k, om.get("namespace") or "", om.get("name")) == me:
                    continue
                if k == "ReplicaSet" and any(ref.get("kind") == "Deployment" for ref in om.get("ownerReferences") or ()):
                    continue  # counted with its Deployment
                total += _pods_of(o)
        if total <= MAX_PODS:
            return
        total += sum(1 for p in self.api.all("Pod") if not _meta(p).get("ownerReferences"))
        raise _invalid(kind, _group_of(kind), str(m.get("name") or ""), [(
            _POD_FIELDS[kind], f"Invalid value: {wanted}: the sandbox would hold {total} pods; it holds at most "
                               f"{MAX_PODS}, as one karpy simulation does")])

    # --- update and patch ---------------------------------------------------------------------------
    def _update(self, r: Route, query: dict, headers: Any, body: bytes) -> Response:
        s = r.served
        obj = self._in(s, _parse_body(body, headers, expect=_expect(s)))
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != r.name:
            raise E.BadRequest(f"the name of the object ({meta['name']}) does not match the name on the URL ({r.name})")
        meta["name"] = r.name
        if s.namespaced:
            if meta.get("namespace") and meta["namespace"] != self._ns(r):
                raise E.BadRequest("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = self._ns(r)
        dry = _dry_run(query, "UpdateOptions")
        with self.lock:
            cur = self.api.get(s.kind, r.name, self._ns(r))
            rv = meta.get("resourceVersion")
            if rv and rv != _meta(cur).get("resourceVersion"):
                raise _conflict(s, r.name)
            manager = _manager(query, headers)
            if r.sub == "status":
                obj = self._track(s, cur, self._status_write(s, cur, obj, query), manager, "status",
                                  sent=meta.get("managedFields", MISSING_FIELD))
                if dry:
                    return Response(200, self._out(s, _storable(obj)))
                new = self.api.update(_storable(obj), subresource="status")
            else:
                for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
                    if k in _meta(cur):
                        meta[k] = _meta(cur)[k]
                    else:
                        meta.pop(k, None)
                meta.setdefault("resourceVersion", _meta(cur).get("resourceVersion"))
                validated = self._validate(s, obj, cur, query.get("fieldValidation", ""))
                validated = self._strategy_on_update(s, self._defaults(s, validated, cur), cur)
                validated = self._track(s, cur, self._as_stored(s, cur, validated, None), manager,
                                        sent=meta.get("managedFields", MISSING_FIELD))
                if dry:
                    return Response(200, self._out(s, _storable(validated)))
                new = self.api.update(_storable(validated))
        return self._render_one(s, new, headers)

    def _patch(self, r: Route, query: dict, headers: Any, body: bytes) -> Response:
        s = r.served
        ctype = _content_type(headers)
        if ctype not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH) or \
                (ctype == STRATEGIC_MERGE_PATCH and _expect(s) is None):  # custom resources take no strategic merge
            raise _patch_type_unsupported(s)
        patch = _parse_patch(body, headers, ctype)
        dry = _dry_run(query, "PatchOptions")
        if ctype == APPLY_PATCH:
            return self._apply(r, query, headers, patch)
        with self.lock:
            cur = self.api.get(s.kind, r.name, self._ns(r))
            wire = self._out(s, cur)
            if ctype == JSON_PATCH:
                new = _apply_json_patch(wire, patch)
            elif ctype == MERGE_PATCH:
                new = merge_patch(wire, patch)
            else:
                if not isinstance(patch, dict):
                    raise E.BadRequest("the patch is not a JSON object")
                from ..kube.strategic import strategic_merge_patch

                new = strategic_merge_patch(wire, patch, s.kind)
            if not isinstance(new, dict):
                raise E.BadRequest("the patch does not produce an object")
            new = self._in(s, new)
            nm = new["metadata"]
            rv = nm.get("resourceVersion")
            if rv and rv != _meta(cur).get("resourceVersion"):
                raise _conflict(s, r.name)
            if nm.get("name") != r.name:
                raise _invalid(s.kind, s.group, r.name, [("metadata.name", f'Invalid value: "{nm.get("name")}": field is immutable')])
            nm["resourceVersion"] = _meta(cur).get("resourceVersion")
            sent = nm.get("managedFields", MISSING_FIELD)
            if sent == _meta(cur).get("managedFields", MISSING_FIELD):
                sent = MISSING_FIELD  # the patch left them as they were
            manager = _manager(query, headers)
            if r.sub == "status":
                new = self._track(s, cur, self._status_write(s, cur, new, query), manager, "status", sent=sent)
                if dry:
                    return Response(200, self._out(s, _storable(new)))
                out = self.api.update(_storable(new), subresource="status")
            else:
                validated = self._validate(s, new, cur, query.get("fieldValidation", ""))
                validated = self._strategy_on_update(s, self._defaults(s, validated, cur), cur)
                validated = self._track(s, cur, self._as_stored(s, cur, validated, None), manager, sent=sent)
                if dry:
                    return Response(200, self._out(s, _storable(validated)))
                out = self.api.update(_storable(validated))
        return self._render_one(s, out, headers)

    # --- server-side apply ------------------------------------------------------------------------------
    def _apply(self, r: Route, query: dict, headers: Any, config: Any) -> Response:
        """A server-side apply (see :mod:`.fields`): the configuration merged into the object (or creating it),
        what the manager applied before and no longer applies removed, conflicts with other managers a 409."""
        s = r.served
        manager = query.get("fieldManager") or ""
        if not manager:
            raise _invalid("PatchOptions", "meta.k8s.io", "", [("fieldManager", "Required value: is required for "
                                                                               "apply patch")])
        force = _truthy(query.get("force"))
        if not isinstance(config, dict):
            raise E.BadRequest("the apply patch is not an object")
        av, kind = config.get("apiVersion") or "", config.get("kind") or ""
        group, _, version = av.rpartition("/")
        if (group, version, kind) != (s.group, s.version, s.kind):
            raise E.BadRequest(f"invalid object type: {group}/{version}, Kind={kind}")
        cm = _meta(config)
        if "managedFields" in cm:
            raise E.BadRequest("metadata.managedFields must be nil")
        if cm.get("name") not in (None, r.name):
            raise E.BadRequest(f"the name of the object ({cm.get('name')}) does not match the name on the URL "
                               f"({r.name})")
        if s.namespaced and cm.get("namespace") not in (None, "", self._ns(r)):
            raise E.BadRequest("the namespace of the provided object does not match the namespace sent on the request")
        config = _apply_body(config, r)
        sub = r.sub
        dry = _dry_run(query, "PatchOptions")
        with self.lock:
            cur = self.api.try_get(s.kind, r.name, self._ns(r))
            if cur is None and sub is not None:
                self.api.get(s.kind, r.name, self._ns(r))  # raises the NotFound
            shape = self._shape(s)
            live = self._out(s, cur) if cur is not None else None
            entries = list(_meta(cur).get("managedFields") or ()) if cur is not None else []
            mine = (manager, "Apply", None, sub or "")
            applied = self._tracked(s, F.field_set(config, shape), sub)
            last = next((F.from_fields_v1(e.get("fieldsV1")) for e in entries if F.entry_key(e) == mine), set())
            others: set = set()
            for e in entries:
                if F.entry_key(e) != mine:
                    others |= F.from_fields_v1(e.get("fieldsV1"))
            merged = F.apply_merge(live if live is not None else {}, config, shape)
            gone = {p for p in last - applied if p not in others}
            if gone:
                merged = F.remove_paths(merged, gone, shape)
            before = live if live is not None else F.empty_object(s.kind, _expect(s) is None)
            added, modified, removed = F.compare(before, merged, shape)
            changed = self._tracked(s, added | modified, sub)
            removed = self._tracked(s, removed, sub)
            conflicts: dict[tuple, set] = {}
            for e in entries:
                if F.entry_key(e) == mine:
                    continue
                clash = F.from_fields_v1(e.get("fieldsV1")) & changed
                if clash:
                    conflicts[F.entry_key(e)] = clash
            if conflicts and not force:
                raise _apply_conflict(conflicts)
            now = fmt_time(self.clock.now())
            out = []
            for e in entries:
                key = F.entry_key(e)
                if key == mine:
                    continue
                ps = F.from_fields_v1(e.get("fieldsV1"))
                left = ps - conflicts.get(key, set()) - removed
                if left:
                    out.append(e if left == ps else dict(e, fieldsV1=F.to_fields_v1(left)))
            old_mine = next((e for e in entries if F.entry_key(e) == mine), None)
            if applied:
                t = now if (changed or removed) else (old_mine or {}).get("time")
                out.append(F.entry(manager, "Apply", s.api_version, t, applied, sub))
            obj = self._in(s, merged)
            obj["metadata"]["managedFields"] = F.sort_entries(out)
            if not obj["metadata"]["managedFields"]:
                del obj["metadata"]["managedFields"]
            if cur is None:
                return self._create_applied(s, r, query, headers, obj, dry)
            nm = obj["metadata"]
            nm["resourceVersion"] = _meta(cur).get("resourceVersion")
            if sub == "status":
                new = self._status_write(s, cur, obj, query)
                if dry:
                    return Response(200, self._out(s, _storable(new)))
                res = self.api.update(_storable(new), subresource="status")
            else:
                validated = self._validate(s, obj, cur, query.get("fieldValidation", ""))
                validated = self._as_stored(s, cur, self._strategy_on_update(s, self._defaults(s, validated, cur),
                                                                             cur), None)
                if dry:
                    return Response(200, self._out(s, _storable(validated)))
                res = self.api.update(_storable(validated))
        return self._render_one(s, res, headers)

    def _create_applied(self, s: D.Served, r: Route, query: dict, headers: Any, obj: dict, dry: bool) -> Response:
        meta = obj["metadata"]
        if s.namespaced:
            meta["namespace"] = self._ns(r)
            self._require_namespace(meta["namespace"])
        for k in SERVER_SET_META:
            if k != "managedFields":
                meta.pop(k, None)
        if "status" in s.type.subresources and s.kind not in KEEP_STATUS_ON_CREATE:
            obj.pop("status", None)
        obj = self._validate(s, obj, None, query.get("fieldValidation", ""))
        _check_name_segment(obj)
        obj = self._strategy_on_create(s, self._defaults(s, obj, None))
        if dry:
            return Response(201, self._out(s, self._dry_created(_storable(obj))))
        return self._render_one(s, self._store_new(s, obj), headers, 201)

    # --- field managers ---------------------------------------------------------------------------------
    def _shape(self, s: D.Served) -> F.Shape:
        if _expect(s) is None:  # a custom resource: its CRD's schema of the version
            crd = self.api.try_get("CustomResourceDefinition", f"{s.plural}.{s.group}")
            for v in ((crd or {}).get("spec") or {}).get("versions") or ():
                if isinstance(v, dict) and v.get("name") == s.version:
                    return F.Shape(s.kind, ((v.get("schema") or {}).get("openAPIV3Schema")) or {})
            return F.Shape(s.kind, {})
        return F.Shape(s.kind)

    def _tracked(self, s: D.Served, paths: set, sub: str | None) -> set:
        """The paths a write of the main resource or a subresource may own: a status write owns status, a write
        of the main resource everything but status (for kinds whose status is a subresource)."""
        if sub == "status":
            return {p for p in paths if p[:1] == ("f:status",)}
        if "status" in s.type.subresources:
            return {p for p in paths if p[:1] != ("f:status",)}
        return paths

    def _strategy_on_update(self, s: D.Served, obj: dict, cur: dict) -> dict:
        if s.kind == "Service":
            return A.allocate_service(obj, self.service_ips, cur)
        return obj

    def _status_write(self, s: D.Served, cur: dict, new: dict, query: dict) -> dict:
        """A write of the status subresource as the store will keep it; a custom resource's status is validated
        and defaulted by its CRD's schema, as kube-apiserver does."""
        out = self._as_stored(s, cur, new, "status")
        if _expect(s) is None and isinstance(out.get("status"), dict):
            from ..api.crds import KINDS
            from ..api.schema import Ctx, walk

            k = next((k for k in KINDS if k.kind == s.kind), None)
            if k is not None and k.status is not None:
                status = copy.deepcopy(out["status"])
                ctx = Ctx(crd=True)
                walk(status, k.status, "status", ctx)
                errors = ctx.cel_outcome(k.status)
                if errors:
                    raise _invalid(s.kind, s.group, r_name(out), errors)
                out = dict(out)
                out["status"] = status
        return out

    def _as_stored(self, s: D.Served, cur: dict, new: dict, sub: str | None) -> dict:
        """``new`` as the store will keep it: a status write changes only status (and the managed fields), a
        write of the main resource keeps the status it had."""
        if sub == "status":
            out = dict(cur)
            if "status" in new:
                out["status"] = new["status"]
            else:
                out.pop("status", None)
            meta = dict(_meta(cur))
            if "managedFields" in _meta(new):
                meta["managedFields"] = _meta(new)["managedFields"]
            out["metadata"] = meta
            return out
        if "status" in s.type.subresources and s.kind not in KEEP_STATUS_ON_CREATE:
            out = dict(new)
            if "status" in cur:
                out["status"] = cur["status"]
            else:
                out.pop("status", None)
            return out
        return new

    def _track(self, s: D.Served, old: dict | None, new: dict, manager: str, sub: str | None = None,
               sent: Any = None, seen: dict | None = None) -> dict:
        """``new`` with the managed fields an update by ``manager`` leaves (see :mod:`.fields`). ``sent``: the
        managedFields the client sent (an empty list resets them: nothing is tracked then); ``seen``: the object
        as kube-apiserver's field manager sees it, when its strategy adds to it afterwards."""
        if sent is None:
            sent = MISSING_FIELD
        if isinstance(sent, list) and not sent:
            out = dict(new)
            out["metadata"] = {k: v for k, v in _meta(new).items() if k != "managedFields"}
            return out
        base = sent if isinstance(sent, list) else (list(_meta(old).get("managedFields") or ()) if old else [])
        shape = self._shape(s)
        before = old if old is not None else F.empty_object(s.kind, _expect(s) is None)
        added, modified, removed = F.compare(self._out(s, before) if old is not None else before,
                                             self._out(s, seen if seen is not None else new), shape)
        changed = self._tracked(s, added | modified, sub)
        removed = self._tracked(s, removed, sub)
        entries = base
        if changed or removed:
            mine = (manager, "Update", s.api_version, sub or "")
            now = fmt_time(self.clock.now())
            entries, found = [], False
            for e in base:
                ps = F.from_fields_v1(e.get("fieldsV1"))
                if F.entry_key(e) == mine:
                    found = True
                    left = (ps - removed) | changed
                    if left:
                        entries.append(F.entry(manager, "Update", s.api_version, now, left, sub))
                    continue
                left = ps - changed - removed
                if left:
                    entries.append(e if left == ps else dict(e, fieldsV1=F.to_fields_v1(left)))
            if not found and changed:
                entries.append(F.entry(manager, "Update", s.api_version, now, changed, sub))
            entries = F.sort_entries(entries)
        out = dict(new)
        meta = {k: v for k, v in _meta(new).items() if k != "managedFields"}
        if entries:
            meta["managedFields"] = entries
        out["metadata"] = meta
        return out

    # --- scale --------------------------------------------------------------------------------------
    def _scale_obj(self, obj: dict) -> dict:
        m = _meta(obj)
        spec, st = obj.get("spec") or {}, obj.get("status") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in m},
                "spec": {"replicas": int(spec.get("replicas", 1) or 0)},
                "status": {"replicas": int(st.get("replicas") or 0),
                           "selector": selector_to_string(spec.get("selector"))}}

    def _scale(self, method: str, r: Route, query: dict, headers: Any, body: bytes) -> Response:
        s = r.served
        if method not in ("GET", "PUT", "PATCH"):
            raise _method_not_allowed()
        ctype = _content_type(headers)
        if method == "PATCH" and ctype not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH):
            raise _patch_type_unsupported(s)
        payload = (_parse_body(body, headers, yaml_ok=ctype == APPLY_PATCH, expect=("autoscaling/v1", "Scale"))
                   if method != "GET" else None)
        with self.lock:
            cur = self.api.get(s.kind, r.name, self._ns(r))
            scale = self._scale_obj(cur)
            if method == "GET":
                return Response(200, scale)
            if method == "PUT":
                new = payload
            elif ctype == JSON_PATCH:
                new = _apply_json_patch(scale, payload)
            elif ctype in (MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH):
                new = merge_patch(scale, payload)
            else:
                raise E.UnsupportedMediaType(f"the body of the request was in an unknown format: {ctype}")
            return self._set_scale(s, r, cur, new, query, headers,
                                   _dry_run(query, "UpdateOptions" if method == "PUT" else "PatchOptions"))

    def _set_scale(self, s: D.Served, r: Route, cur: dict, new: Any, query: dict, headers: Any,
                   dry: bool) -> Response:
        if not isinstance(new, dict):
            raise E.BadRequest("the body of the request is not a Scale")
        rv = _meta(new).get("resourceVersion")
        if rv and rv != _meta(cur).get("resourceVersion"):
            raise _conflict(s, r.name)
        replicas = (new.get("spec") or {}).get("replicas", 0)  # ScaleSpec.replicas is no pointer: absent is 0
        if isinstance(replicas, int) and not isinstance(replicas, bool) and not INT32_MIN <= replicas <= INT32_MAX:
            raise E.BadRequest(f'Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal number '
                               f"{replicas} into Go struct field ScaleSpec.spec.replicas of type int32")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise _invalid("Scale", "autoscaling", r.name, [("spec.replicas", f"Invalid value: {json.dumps(replicas)}: "
                                                                               "must be greater than or equal to 0")])
        self._check_pods(s.kind, cur, replicas)
        out = dict(cur)
        out["spec"] = {**(cur.get("spec") or {}), "replicas": replicas}
        out = self._track(s, cur, out, _manager(query, headers), "scale")
        # kube-apiserver keeps a scale write's entry without a time
        out["metadata"]["managedFields"] = F.sort_entries([{k: v for k, v in e.items() if k != "time"} if
                                                           e.get("subresource") == "scale" else e
                                                           for e in out["metadata"].get("managedFields") or ()])
        if not out["metadata"]["managedFields"]:
            del out["metadata"]["managedFields"]
        if dry:
            return Response(200, self._scale_obj(out))
        updated = self.api.update(out)
        return Response(200, self._scale_obj(updated))

    # --- eviction and binding -----------------------------------------------------------------------
    def _evict(self, r: Route, ev: Any) -> Response:
        if not isinstance(ev, dict):
            raise E.BadRequest("the body of the request is not an Eviction")
        if _meta(ev).get("name") and _meta(ev)["name"] != r.name:
            raise E.BadRequest(f"name in URL does not match name in Eviction object")
        opts = ev.get("deleteOptions") or {}
        if not isinstance(opts, dict):
            raise E.BadRequest("the deleteOptions of the Eviction are not an object")
        uid = (opts.get("preconditions") or {}).get("uid")
        if _dry_run({"dryRun": opts["dryRun"]} if "dryRun" in opts else {}, "DeleteOptions"):
            with self.lock:
                self.api.get("Pod", r.name, self._ns(r))
            return Response(201, _status_ok(201))
        with self.lock:
            self.api.evict(r.name, self._ns(r), uid)
        return Response(201, _status_ok(201))

    def _bind(self, r: Route, b: Any) -> Response:
        target = (b or {}).get("target") or {}
        if not target.get("name"):
            raise _invalid("Binding", "", r.name, [("target.name", "Required value")])
        with self.lock:
            self.api.bind(r.name, self._ns(r), target["name"])
        return Response(201, _status_ok(201))

    # --- delete -------------------------------------------------------------------------------------
    def _delete_options(self, query: dict, body: bytes, headers: Any) -> dict:
        opts = _parse_body(body, headers, expect=("v1", "DeleteOptions")) if body and body.strip() else {}
        if not isinstance(opts, dict):
            opts = {}
        grace = opts.get("gracePeriodSeconds")
        if grace is None and query.get("gracePeriodSeconds"):
            grace = _go_int(query["gracePeriodSeconds"])
        out = {"propagation": opts.get("propagationPolicy") or query.get("propagationPolicy"),
               "preconditions": opts.get("preconditions"), "grace": grace if isinstance(grace, int) else None,
               "dry": _dry_run({"dryRun": opts["dryRun"]} if opts.get("dryRun") is not None else query,
                               "DeleteOptions")}
        orphan = opts.get("orphanDependents")
        if orphan is None and "orphanDependents" in query:
            orphan = _truthy(query["orphanDependents"])
        if orphan is True and not out["propagation"]:
            out["propagation"] = "Orphan"
        if out["propagation"] not in (None, "Orphan", "Background", "Foreground"):
            raise E.BadRequest(f"propagationPolicy: Unsupported value: {out['propagation']!r}")
        return out

    def _delete(self, r: Route, query: dict, headers: Any, body: bytes) -> Response:
        """A DELETE as kube-apiserver answers it: the object when the kind returns it (Pods, Services, ...) or it
        is still there (finalizers, an orphan or foreground deletion), else a Status naming what went."""
        s = r.served
        o = self._delete_options(query, body, headers)
        propagation = o["propagation"]
        if propagation is None and s.kind == "Job":
            propagation = "Orphan"  # batch/v1 Jobs orphan their pods unless told otherwise
        ns = self._ns(r)
        with self.lock:
            cur = self.api.get(s.kind, r.name, ns)
            if s.kind == "Namespace" and r.name in SYSTEM_NAMESPACES:
                raise E.Forbidden(f'namespaces "{r.name}" is forbidden: this namespace may not be deleted',
                                  kind="namespaces", name=r.name)
            marker = {"Orphan": "orphan", "Foreground": "foregroundDeletion"}.get(propagation or "")
            if o["dry"]:
                if s.kind in RETURNS_DELETED or marker or _meta(cur).get("finalizers"):
                    return self._render_one(s, cur, headers)
                return Response(200, _deleted_status(s, cur))
            if s.kind == "Pod":
                return self._render_one(s, self.api.delete_gracefully(r.name, ns, o["grace"], o["preconditions"]),
                                        headers)
            if s.kind == "Namespace":
                if _meta(cur).get("deletionTimestamp"):
                    return self._render_one(s, cur, headers)
                marked = self.api.mark_terminating("Namespace", r.name, status={**(cur.get("status") or {}),
                                                                                "phase": "Terminating"})
                self._delete_namespace_contents(r.name)
                self.api.remove("Namespace", r.name)
                return self._render_one(s, marked, headers)
            if s.kind == "Service":
                self.service_ips.forget(cur)
            out = self.api.delete(s.kind, r.name, ns, propagation=propagation, preconditions=o["preconditions"])
            still = self.api.try_get(s.kind, r.name, ns)
            if still is not None and s.kind in ("PersistentVolumeClaim", "PersistentVolume"):
                self._release_volume(s.kind, still)
        if still is not None:
            return self._render_one(s, still, headers)
        if marker:
            # kube-apiserver keeps the object until the garbage collector has orphaned (or deleted) its dependents,
            # which here happened already: the answer is the object as it was marked
            m = dict(_meta(cur))
            m["deletionTimestamp"] = fmt_time(self.clock.now())
            m["deletionGracePeriodSeconds"] = 0
            m["finalizers"] = list(m.get("finalizers") or ()) + [marker]
            if "generation" in m:
                m["generation"] = int(m["generation"]) + 1
            return self._render_one(s, {**cur, "metadata": m}, headers)
        if s.kind in RETURNS_DELETED:
            return self._render_one(s, out or cur, headers)
        return Response(200, _deleted_status(s, cur))

    def _release_volume(self, kind: str, obj: dict) -> None:
        """The protection controller: a claim (volume) being deleted loses its finalizer once no pod (claim)
        uses it."""
        m = _meta(obj)
        fin = A.PVC_PROTECTION if kind == "PersistentVolumeClaim" else A.PV_PROTECTION
        if fin not in (m.get("finalizers") or ()):
            return
        if kind == "PersistentVolumeClaim":
            used = any(((v.get("persistentVolumeClaim") or {}).get("claimName") == m.get("name"))
                       for p in self.api.list("Pod", m.get("namespace"))[0]
                       for v in (p.get("spec") or {}).get("volumes") or () if isinstance(v, dict))
        else:
            used = any((c.get("spec") or {}).get("volumeName") == m.get("name")
                       for c in self.api.all("PersistentVolumeClaim"))
        if not used:
            left = [f for f in m.get("finalizers") or () if f != fin]
            self.api.patch(kind, m["name"], {"metadata": {"finalizers": left or None}}, m.get("namespace", ""))

    def _delete_namespace_contents(self, ns: str) -> None:
        if ns in SYSTEM_NAMESPACES:
            raise E.Forbidden(f'namespaces "{ns}" is forbidden: this namespace may not be deleted', kind="namespaces",
                              name=ns)
        for t in BY_KIND.values():
            if not t.namespaced:
                continue
            items, _ = self.api.list(t.kind, ns)
            for o in items:
                if t.kind == "Service":
                    self.service_ips.forget(o)
                try:
                    self.api.delete(t.kind, _meta(o)["name"], ns)
                except E.NotFound:
                    pass
        # what finalizers still hold goes with its namespace (kube-apiserver would wait for their controllers)
        for t in BY_KIND.values():
            if t.namespaced:
                for o in self.api.list(t.kind, ns)[0]:
                    try:
                        self.api.remove(t.kind, _meta(o)["name"], ns)
                    except E.NotFound:
                        pass

    def _delete_collection(self, r: Route, query: dict, headers: Any, body: bytes) -> Response:
        s = r.served
        o = self._delete_options(query, body, headers)
        ns = r.namespace if s.namespaced else None
        out = []
        fs = self._field_selector(s, query.get("fieldSelector"))
        with self.lock:
            items, rv = self.api.list(s.kind, ns or None, query.get("labelSelector") or None, fs)
            for it in items:
                m = _meta(it)
                if o["dry"]:
                    out.append(it)
                    continue
                try:
                    if s.kind == "Namespace":
                        self._delete_namespace_contents(m["name"])
                    res = self.api.delete(s.kind, m["name"], m.get("namespace", ""), propagation=o["propagation"])
                    out.append(res or it)
                except E.NotFound:
                    pass
            rv = self.api.resource_version
        return Response(200, {"kind": f"{s.kind}List", "apiVersion": s.api_version, "metadata": {"resourceVersion": rv},
                              "items": [self._out(s, x) for x in out]})

    # --- OpenAPI ------------------------------------------------------------------------------------
    def _openapi(self, path: str, headers: Any = None) -> Response:
        if path == "/openapi/v2":
            # An OpenAPI v2 document without definitions: kubectl (which asks for it as protobuf, where the
            # empty message is zero bytes) then validates nothing client-side and builds patches from its
            # compiled-in types, as the module docstring of .discovery says.
            accept = (headers.get("Accept") or "") if headers is not None else ""
            if "protobuf" in accept:
                return Response(200, b"", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
            return Response(200, {"swagger": "2.0", "info": {"title": "Kubernetes", "version": D.VERSION_INFO["gitVersion"]},
                                  "paths": {}, "definitions": {}})
        if path == "/openapi/v3":
            doc = self._openapi_cache.get("")
            if doc is None:
                doc = self._openapi_cache[""] = D.openapi_index()
            return Response(200, doc)
        if path.startswith("/openapi/v3/"):
            gv = path[len("/openapi/v3/"):].split("/")
            if len(gv) == 2 and gv[0] == "api":
                doc = D.openapi_gv("", gv[1])
            elif len(gv) == 3 and gv[0] == "apis":
                doc = D.openapi_gv(gv[1], gv[2])
            else:
                doc = None
            if doc is not None:
                return Response(200, doc, headers={"Cache-Control": "public, immutable"})
        raise _NotFoundPath()


class _NotFoundPath(Exception):
    """A path under a served group-version that names nothing: kube-apiserver's 404 Status."""


class _PageNotFound(Exception):
    """A path no API group serves (an unknown group, a custom resource's unserved version, anything outside
    /api and /apis): the plain-text 404 of kube-apiserver's HTTP router."""


def _method_not_allowed() -> E.MethodNotAllowed:
    return E.MethodNotAllowed("the server does not allow this method on the requested resource", empty_details=True)


# maps of resource name -> Quantity in the built-in types (requests, limits, capacity, ...)
_QUANTITY_MAPS = frozenset({"requests", "limits", "capacity", "allocatable", "podFixed", "overhead", "hard", "used",
                            "allocatedResources", "min", "max", "default", "defaultRequest", "maxLimitRequestRatio"})


def _quantity_text(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    if isinstance(v, int):
        return str(v)
    from fractions import Fraction

    q = Fraction(v).limit_denominator(10**9)
    if q.denominator == 1:
        return str(q.numerator)
    milli = q * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{math.ceil(q * 10**9)}n"


def canonical_quantities(obj: Any, in_map: bool = False) -> Any:
    """Quantities as the API server writes them: strings (``cpu: 1`` is sent as ``"1"``, ``0.5`` as ``"500m"``).

    Manifests may give numbers; typed clients (the Python client's models) accept only strings. Returns
    ``obj`` itself when nothing changes (stored objects are shared and never mutated)."""
    if isinstance(obj, dict):
        out = None
        for k, v in obj.items():
            if in_map:
                nv = _quantity_text(v)
            elif isinstance(v, (dict, list)):
                nv = canonical_quantities(v, k in _QUANTITY_MAPS and isinstance(v, dict))
            elif k == "sizeLimit":
                nv = _quantity_text(v)
            else:
                continue
            if nv is not v:
                if out is None:
                    out = dict(obj)
                out[k] = nv
        return obj if out is None else out
    if isinstance(obj, list):
        outl = None
        for i, v in enumerate(obj):
            if isinstance(v, (dict, list)):
                nv = canonical_quantities(v)
                if nv is not v:
                    if outl is None:
                        outl = list(obj)
                    outl[i] = nv
        return obj if outl is None else outl
    return obj


def _is_unknown_field(message: str) -> bool:
    return message.startswith("unknown field") or message == "field not declared in schema"


_PATH_TOKEN = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[([^\]]*)\]")


def _drop_path(obj: Any, path: str) -> None:
    """Remove the field at a validation error's path (``spec.containers[0].bogus``, ``metadata.labels[a/b]``)."""
    toks = [m.group(1) if m.group(1) is not None else m.group(2) for m in _PATH_TOKEN.finditer(path)]
    cur = obj
    for i, t in enumerate(toks):
        last = i == len(toks) - 1
        if isinstance(cur, list):
            try:
                j = int(t)
            except ValueError:
                return
            if not 0 <= j < len(cur):
                return
            if last:
                del cur[j]
                return
            cur = cur[j]
        elif isinstance(cur, dict):
            if t not in cur:
                return
            if last:
                del cur[t]
                return
            cur = cur[t]
        else:
            return


_CRD_KINDS_CACHE: list[frozenset] = []


def _crd_kinds() -> frozenset:
    if not _CRD_KINDS_CACHE:
        from ..kube.registry import CRD_KINDS

        _CRD_KINDS_CACHE.append(CRD_KINDS)
    return _CRD_KINDS_CACHE[0]


def _resource(s: D.Served) -> str:
    return f"{s.plural}.{s.group}" if s.group else s.plural


def _conflict(s: D.Served, name: str) -> E.Conflict:
    return E.Conflict(f'Operation cannot be fulfilled on {_resource(s)} "{name}": the object has been modified; please '
                      "apply your changes to the latest version and try again", kind=s.plural, name=name, group=s.group)


_REASONS = (("Required value", "FieldValueRequired"), ("Unsupported value", "FieldValueNotSupported"),
            ("Duplicate value", "FieldValueDuplicate"), ("Forbidden", "FieldValueForbidden"),
            ("Too long", "FieldValueTooLong"), ("Too many", "FieldValueTooMany"), ("Not found", "FieldValueNotFound"),
            ('unknown field', "FieldValueInvalid"), ("Invalid value", "FieldValueInvalid"))


def _invalid(kind: str, group: str, name: str, errors: list[tuple[str, str]]) -> E.Invalid:
    qualified = f"{kind}.{group}" if group else kind
    parts = [f"{f}: {m}" if f else m for f, m in errors]
    body = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    causes = []
    for f, m in errors:
        reason = next((r for prefix, r in _REASONS if m.startswith(prefix) or prefix in m[:40]), "FieldValueInvalid")
        causes.append({"reason": reason, "message": m, "field": f})
    return E.Invalid(f'{qualified} "{name}" is invalid: {body}', kind=kind, name=name, group=group, causes=causes)


def _check_name_segment(obj: dict) -> None:
    """A name that cannot be a path segment could never be addressed again: kube-apiserver's storage refuses it."""
    name = str(_meta(obj).get("name") or "")
    bad = _path_segment_errors(name)
    if bad:
        raise E.BadRequest(f"Name parameter invalid: {json.dumps(name)}: {';'.join(bad)}")


def _path_segment_errors(name: str) -> list[str]:
    """Why a name cannot be a path segment (kube-apiserver's IsValidPathSegmentName)."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def _dns1035_label_errors(name: str) -> list[str]:
    from ..api.names import is_dns1035_label

    return is_dns1035_label(name)


def _dns1123_subdomain_errors(name: str) -> list[str]:
    from ..api.names import is_dns1123_subdomain

    return is_dns1123_subdomain(name)


# the name rules of the kinds karpy's API validation does not cover (kube-apiserver's ValidateObjectMeta callers);
# Events take any name
_NAME_CHECKS: dict[str, Callable[[str], list[str]]] = {
    "ConfigMap": _dns1123_subdomain_errors, "Secret": _dns1123_subdomain_errors,
    "ServiceAccount": _dns1123_subdomain_errors, "Lease": _dns1123_subdomain_errors,
    "Service": _dns1035_label_errors,
    "Role": _path_segment_errors, "RoleBinding": _path_segment_errors, "ClusterRole": _path_segment_errors,
    "ClusterRoleBinding": _path_segment_errors,
}


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# the workloads whose pods the sandbox counts, and the field that says how many
_POD_FIELDS = {"Deployment": "spec.replicas", "ReplicaSet": "spec.replicas", "StatefulSet": "spec.replicas",
               "Job": "spec.parallelism"}


def _pods_of(obj: dict) -> int:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    n = spec.get("parallelism" if obj.get("kind") == "Job" else "replicas", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else (0 if n is not None else 1)


def _group_of(kind: str) -> str:
    t = BY_KIND.get(kind)
    return t.group if t is not None else ""


MAX_DATA_BYTES = 1024 * 1024  # a ConfigMap's or a Secret's data in all (kube-apiserver's MaxSecretSize)


def _data_bytes(obj: dict) -> int:
    """The bytes a ConfigMap's or a Secret's data holds (a Secret's data and binaryData are base64)."""
    import base64
    import binascii

    total = 0
    for k in ("data", "binaryData", "stringData"):
        m = obj.get(k)
        if not isinstance(m, dict):
            continue
        for v in m.values():
            if not isinstance(v, str):
                continue
            if k == "binaryData" or (k == "data" and obj.get("kind") == "Secret"):
                try:
                    total += len(base64.b64decode(v, validate=False))
                    continue
                except (binascii.Error, ValueError):
                    pass
            total += len(v.encode())
    return total


def _list_key(o: dict) -> str:
    """Where an object sorts in a list: by namespace, then name, byte by byte (as etcd's keys sort)."""
    m = _meta(o)
    ns = m.get("namespace")
    return f"{ns}/{m.get('name') or ''}" if ns else str(m.get("name") or "")


def _continue_token(rv: int, last: str) -> str:
    """An opaque continue token: the list's resourceVersion and the key to start after."""
    import base64

    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": last + "\x00"})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _parse_continue(token: str) -> tuple[int, str]:
    import base64

    try:
        doc = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, orjson.JSONDecodeError) as e:
        raise E.BadRequest(f"invalid continue token: continue key is not valid: {e}") from None
    if not isinstance(doc, dict) or doc.get("v") != "meta.k8s.io/v1":
        raise E.BadRequest("invalid continue token: continue key is not valid: server does not recognize this "
                           "encoded version")
    rv, start = doc.get("rv"), doc.get("start")
    if not isinstance(rv, int) or rv <= 0 or not isinstance(start, str) or not start.endswith("\x00"):
        raise E.BadRequest("invalid continue token: continue key is not valid: incorrect encoded start "
                           "resourceVersion (version meta.k8s.io/v1)")
    return rv, start[:-1]


def _bad_rv_message(rv: str) -> str:
    return f'resourceVersion: Invalid value: "{rv}": strconv.ParseUint: parsing "{rv}": invalid syntax'


def _too_large(rv: int, current: str) -> E.ApiError:
    e = E.ApiError(f"Timeout: Too large resource version: {rv}, current: {current}",
                   causes=[{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                   retry_after=1)
    e.code, e.reason = 504, "Timeout"
    return e


def _next_bookmark(now: float, deadline: float) -> float | None:
    """When a watch that allows bookmarks gets its next one: every minute, and 2 seconds before it ends."""
    at = min(now + BOOKMARK_EVERY, deadline - 2.0)
    return at if at >= now else None


def _go_int(v: str) -> int:
    """An integer query parameter, refused as Go's strconv refuses it."""
    try:
        return int(v, 10)
    except ValueError:
        raise E.BadRequest(f'strconv.ParseInt: parsing "{v}": invalid syntax') from None


def _list_options(query: dict, watch: bool) -> dict:
    """The ListOptions of a list or watch, checked as kube-apiserver checks them (v1.33, WatchList off): a 400
    for what does not parse, a 422 for what does not go together."""
    rv = query.get("resourceVersion") or ""
    match = query.get("resourceVersionMatch") or ""
    initial = query.get("sendInitialEvents")
    limit = _go_int(query["limit"]) if query.get("limit") else 0
    timeout = _go_int(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
    cont = query.get("continue") or ""
    errs: list[tuple[str, str]] = []
    if watch:
        if initial is not None:
            if match != "NotOlderThan":
                errs.append(("resourceVersionMatch", "Forbidden: sendInitialEvents requires setting "
                                                     "resourceVersionMatch to NotOlderThan"))
            errs.append(("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for watch unless the "
                                              "WatchList feature gate is enabled"))
        if match:
            if initial is None:
                errs.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden for watch unless "
                                                     "sendInitialEvents is provided"))
            if match != "NotOlderThan":
                errs.append(("resourceVersionMatch", f'Unsupported value: "{match}": supported values: "NotOlderThan"'))
            if cont:
                errs.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden when continue is "
                                                     "provided"))
    else:
        if match:
            if not rv:
                errs.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden unless "
                                                     "resourceVersion is provided"))
            if cont:
                errs.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden when continue is "
                                                     "provided"))
            if match not in ("Exact", "NotOlderThan"):
                errs.append(("resourceVersionMatch", f'Unsupported value: "{match}": supported values: "Exact", '
                                                     '"NotOlderThan", ""'))
            if match == "Exact" and rv == "0":
                errs.append(("resourceVersionMatch", 'Forbidden: resourceVersionMatch "exact" is forbidden for '
                                                     'resourceVersion "0"'))
        if initial is not None:
            errs.append(("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for list"))
    if errs:
        raise _invalid("ListOptions", "meta.k8s.io", "", errs)
    if not watch and rv:
        try:
            if int(rv) < 0:
                raise ValueError(rv)
        except ValueError:
            raise E.BadRequest(f"invalid resource version: {_bad_rv_message(rv)}") from None
    parsed_cont = None
    if cont and not watch:
        parsed_cont = _parse_continue(cont)
    return {"rv": rv, "match": match, "limit": limit, "timeout": timeout, "continue": parsed_cont}


# what a cluster admin may do, as a SelfSubjectRulesReview lists it
ADMIN_RULES = {
    "resourceRules": [
        {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
         "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
        {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
        {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    ],
    "nonResourceRules": [
        {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                                               "/openapi/*", "/readyz", "/version", "/version/"]},
        {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]},
        {"verbs": ["*"], "nonResourceURLs": ["*"]},
    ],
    "incomplete": False,
}

# the kinds whose DELETE answers with the object rather than a Status (kube-apiserver's ReturnDeletedObject)
RETURNS_DELETED = frozenset({"Pod", "Service", "ServiceAccount", "Namespace", "PersistentVolumeClaim",
                             "PersistentVolume", "StorageClass"})


def _deleted_status(s: D.Served, obj: dict) -> dict:
    details: dict[str, Any] = {"name": _meta(obj).get("name")}
    if s.group:
        details["group"] = s.group
    details["kind"] = s.plural
    details["uid"] = _meta(obj).get("uid")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def _as_field_manager_sees(s: D.Served, obj: dict) -> dict | None:
    """A created Job before kube-apiserver's strategy generates its selector and the pod template's labels
    (karpy's validation generates them earlier): what its field manager tracks."""
    spec = obj.get("spec") if s.kind == "Job" else None
    if not isinstance(spec, dict) or spec.get("manualSelector") is True:
        return None
    tmpl = spec.get("template") or {}
    tmeta = dict(tmpl.get("metadata") or {})
    labels = {k: v for k, v in (tmeta.get("labels") or {}).items()
              if k not in ("batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name", "controller-uid",
                           "job-name")}
    if labels:
        tmeta["labels"] = labels
    else:
        tmeta.pop("labels", None)
    return {**obj, "spec": {**{k: v for k, v in spec.items() if k != "selector"},
                            "template": {**tmpl, "metadata": tmeta}}}


_NO_CONTAINERS = ("exec", "attach", "portforward", "proxy")  # a pod's streams, which need a running container


def _without_kept_job_selector(job: dict, old: dict) -> dict:
    """An update of a Job repeats the selector generated at its creation: kube-apiserver keeps it (it is
    immutable) instead of refusing it as not auto-generated. Validation generates the same one again from the
    Job's uid, so the repeated one is left out."""
    spec = job.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector") is True or spec.get("selector") is None:
        return job
    if spec.get("selector") != (old.get("spec") or {}).get("selector"):
        return job
    return {**job, "spec": {k: v for k, v in spec.items() if k != "selector"}}


def _job_labels(job: dict) -> dict:
    """A Job without labels takes its pod template's (the job-name and controller-uid ones among them); its
    selector is generated unless manualSelector says otherwise."""
    meta = _meta(job)
    spec = job.get("spec") or {}
    tlabels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
    out = dict(job)
    if not meta.get("labels") and tlabels:
        out["metadata"] = {**meta, "labels": dict(tlabels)}
    return out


def r_name(obj: dict) -> str:
    return str(_meta(obj).get("name") or "")


def _kind_mismatch(s: D.Served, obj: dict) -> str:
    """kube-apiserver's words for a body of another kind: its decoder cannot convert one kind into the other."""
    kind, av = obj.get("kind"), str(obj.get("apiVersion") or s.api_version)
    version = av.rsplit("/", 1)[-1]
    if _expect(s) is None:
        return f'{kind} in version "{version}" cannot be handled as a {s.kind}: the object kind "{kind}" does not ' \
               f'match the resource kind "{s.kind}"'
    internal = s.group.split(".")[0] if s.group else "core"
    return f'{kind} in version "{version}" cannot be handled as a {s.kind}: converting ({version}.{kind}) to ' \
           f'({internal}.{s.kind}): unknown conversion'


MISSING_FIELD = object()  # a field the client's object does not have (not the same as null)


def _manager(query: dict, headers: Any) -> str:
    """The field manager of a write: ``fieldManager``, else the client's User-Agent up to its first "/"."""
    m = query.get("fieldManager")
    if m:
        return m
    ua = (headers.get("User-Agent") or "") if headers is not None else ""
    return ua.split("/", 1)[0][:128] or "unknown"


def _apply_conflict(conflicts: dict[tuple, set]) -> E.Conflict:
    """kube-apiserver's 409 for an apply that would change fields other managers own."""
    def who(key: tuple) -> str:
        manager, op, av, sub = key
        out = json.dumps(manager)
        if sub:
            out += f" with subresource {json.dumps(sub)}"
        return f"{out} using {av}" if op == "Update" else out

    items = sorted((who(k), F.path_text(p)) for k, ps in conflicts.items() for p in ps)
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {m}", "field": f} for m, f in items]
    if len(items) == 1:
        message = f"Apply failed with 1 conflict: conflict with {items[0][0]}: {items[0][1]}"
    else:
        lines = []
        for m in sorted({m for m, _ in items}):
            lines.append(f"conflicts with {m}:")
            lines.extend(f"- {f}" for mm, f in items if mm == m)
        message = f"Apply failed with {len(items)} conflicts: " + "\n".join(lines)
    return E.Conflict(message, causes=causes)


def _truthy(v: Any) -> bool:
    return str(v).lower() in ("1", "true", "yes")


def _dry_run(query: dict, options: str) -> bool:
    """Whether a write is a dry run: ``dryRun=All``; any other value is kube-apiserver's 422 (the write is not
    performed)."""
    values = query.get("dryRun")
    if values is None:
        return False
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise E.BadRequest(f"json: cannot unmarshal {type(values).__name__} into Go struct field {options}.dryRun of "
                           "type []string")
    bad = [v for v in values if v != "All"]
    if bad:
        shown = "[]string{" + ", ".join(json.dumps(v) for v in values) + "}"
        raise _invalid(options, "meta.k8s.io", "", [("dryRun", f'Unsupported value: {shown}: supported values: "All"')])
    return bool(values)


def _storable(obj: dict) -> dict:
    """``obj`` if the store can keep it and give it back: no deeper than karpy can write, no larger than etcd
    holds (kube-apiserver passes etcd's refusal on as a 500; the sandbox says 413, the client's request being
    at fault)."""
    if L.deeper_than(obj):
        raise E.BadRequest(f"the object nests deeper than {L.MAX_DEPTH} levels of objects and arrays")
    try:
        size = len(orjson.dumps(obj))
    except (TypeError, orjson.JSONEncodeError) as e:
        raise E.BadRequest(f"the object cannot be stored: {e}") from None
    if size > L.MAX_OBJECT_BYTES:
        raise L.RequestEntityTooLarge("etcdserver: request is too large")
    return obj


def _and_selector(a: str | None, b: str) -> str:
    return f"{a},{b}" if a else b


def _labels(*names: str, **renamed: str) -> dict[str, str]:
    out = {n: n for n in names}
    out.update({k.replace("__", "."): v for k, v in renamed.items()})
    return out


# kube-apiserver's field label conversions: what each built-in kind can be selected on (and a few old names);
# a kind not listed takes metadata.name and metadata.namespace
_FIELD_LABELS: dict[str, dict[str, str]] = {
    "Pod": _labels("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                   "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
                   "status.nominatedNodeName", spec__host="spec.nodeName"),
    "Node": _labels("metadata.name", "spec.unschedulable"),
    "Namespace": _labels("metadata.name", "status.phase"),
    "Event": _labels("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                     "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
                     "reason", "reportingComponent", "source", "type", "metadata.namespace", "metadata.name"),
    "Secret": _labels("type", "metadata.namespace", "metadata.name"),
    "Service": _labels("metadata.namespace", "metadata.name", "spec.clusterIP", "spec.type"),
    "Job": _labels("metadata.name", "metadata.namespace", "status.successful"),
}
# events.k8s.io/v1 field labels -> the core Event fields the store keeps
_EVENTS_V1_FIELDS = {"reason": "reason", "reportingController": "reportingComponent", "type": "type",
                     "metadata.namespace": "metadata.namespace", "metadata.name": "metadata.name",
                     **{f"regarding.{f}": f"involvedObject.{f}" for f in ("kind", "namespace", "name", "uid",
                                                                            "apiVersion", "resourceVersion",
                                                                            "fieldPath")}}


def _content_type(headers: Any) -> str:
    ct = (headers.get("Content-Type") or "application/json") if headers is not None else "application/json"
    return ct.split(";", 1)[0].strip().lower()


_UNKNOWN_FORMAT = "the body of the request was in an unknown format - accepted media types include: "


def _patch_type_unsupported(s: D.Served) -> E.UnsupportedMediaType:
    """kube-apiserver's 415 for a PATCH of another content type (a protobuf body among them): its HTTP router
    answers for the built-in kinds, the custom resource handler names the patch types it takes."""
    if _expect(s) is not None:
        return E.UnsupportedMediaType("415: Unsupported Media Type", empty_details=True)
    return E.UnsupportedMediaType(_UNKNOWN_FORMAT + f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}")


def _expect(s: D.Served) -> tuple[str, str] | None:
    """(apiVersion, kind) a protobuf body for the resource holds; None for custom resources, which have none."""
    if s.group and s.kind in _crd_kinds():
        return None
    return s.api_version, s.kind


def _parse_body(body: bytes, headers: Any, yaml_ok: bool = False, expect: tuple[str, str] | None = None) -> Any:
    """The request's object: JSON (or YAML), or Kubernetes' protobuf for a built-in kind (``expect``: the
    apiVersion and kind the endpoint takes; kubectl's generators send ``create namespace|deployment|...``,
    ``run``, ``expose`` and the evictions of ``drain`` so)."""
    ct = _content_type(headers) if headers else "application/json"
    if ct == P.MEDIA_TYPE:
        if expect is None:
            raise E.UnsupportedMediaType(_UNKNOWN_FORMAT + "application/json, application/yaml")
        try:
            return P.decode(body, *expect)
        except P.DecodeError as e:
            raise E.BadRequest(str(e)) from None
    if not body:
        raise E.BadRequest("the request has no body")
    if "protobuf" in ct or "cbor" in ct:
        accepted = "application/json, application/yaml" + (f", {P.MEDIA_TYPE}" if expect else "")
        raise E.UnsupportedMediaType(_UNKNOWN_FORMAT + accepted)
    try:
        if yaml_ok or "yaml" in ct:
            out = yamlsafe.load(body)
        else:
            out = orjson.loads(body)
    except yamlsafe.YAMLLimitError as e:
        raise E.BadRequest(f"error decoding YAML: error converting YAML to JSON: {e}") from None
    except Exception as e:  # noqa: BLE001 - any malformed body is the client's error
        raise E.BadRequest(f"the body of the request could not be decoded: {e}") from None
    _check_depth(out)
    return out


def _check_depth(obj: Any) -> None:
    if L.deeper_than(obj):
        raise E.BadRequest(f"the body of the request could not be decoded: it nests deeper than {L.MAX_DEPTH} "
                           "levels of objects and arrays")


def _parse_patch(body: bytes, headers: Any, ctype: str) -> Any:
    """A patch body; what does not decode is kube-apiserver's 400 ``error decoding patch: ...``."""
    if ctype == APPLY_PATCH:
        return _parse_body(body, headers, yaml_ok=True)
    try:
        out = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise E.BadRequest(f"error decoding patch: {e}") from None
    _check_depth(out)
    return out


def _apply_json_patch(doc: Any, patch: Any) -> Any:
    """A JSON patch applied; one that cannot apply (a failed ``test``, a missing path, an unknown operation) is
    kube-apiserver's 422 without details."""
    try:
        return json_patch(doc, patch, MAX_OPERATIONS, MAX_COPY_BYTES)
    except (E.BadRequest, E.Invalid):
        raise E.Invalid("the server rejected our request due to an error in our request", empty_details=True) from None


def _apply_body(patch: Any, r: Route) -> dict:
    if not isinstance(patch, dict):
        raise E.BadRequest("the apply patch is not an object")
    obj = dict(patch)
    meta = dict(_meta(obj))
    meta["name"] = r.name
    if r.namespace:
        meta["namespace"] = r.namespace
    obj["metadata"] = meta
    return obj


def _accept(headers: Any) -> str:
    """"Table", "PartialObjectMetadata" or "" (plain JSON), from the first media type in Accept that we serve."""
    accept = (headers.get("Accept") or "") if headers is not None else ""
    for part in accept.split(","):
        params = {}
        bits = [b.strip() for b in part.split(";")]
        media = bits[0].lower()
        for b in bits[1:]:
            if "=" in b:
                k, v = b.split("=", 1)
                params[k.strip()] = v.strip()
        if media not in ("application/json", "*/*", "application/*", ""):
            continue
        as_ = params.get("as")
        if as_ is None:
            return ""
        if as_ == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return "Table"
        if as_ in ("PartialObjectMetadata", "PartialObjectMetadataList") and params.get("g") == "meta.k8s.io":
            return "PartialObjectMetadata"
    return ""
