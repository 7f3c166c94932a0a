"""A small Kubernetes REST front over :class:`~karpy.kube.memory.MemoryAPI`, for the client's tests.

Enough of the API for :class:`karpy.kube.client.KubeClient` (get, list, watch with resourceVersion,
create, update, patch, delete, eviction, binding, Status bodies), plus test hooks: ``fail_next``
injects error answers or dropped connections, ``cut_watches`` ends every open watch stream,
``expire`` makes resuming a watch answer 410 Gone.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlparse

from karpy.kube import errors as E
from karpy.kube.memory import MemoryAPI
from karpy.kube.registry import BY_GROUP_PLURAL


class Fault:
    def __init__(self, match: Callable[[str, str], bool], status: int | None, body: dict | None = None,
                 times: int = 1, after: bool = False):
        self.match = match
        self.status = status  # None: drop the connection without an answer
        self.body = body
        self.times = times
        self.after = after  # apply the request first, then fail the answer (a lost response)


class FakeAPIServer:
    def __init__(self, api: MemoryAPI | None = None):
        self.api = api or MemoryAPI(history=True)
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._watch_gen = 0
        self._stopping = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                outer._handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                outer._handle(self, "POST")

            def do_PUT(self) -> None:  # noqa: N802
                outer._handle(self, "PUT")

            def do_PATCH(self) -> None:  # noqa: N802
                outer._handle(self, "PATCH")

            def do_DELETE(self) -> None:  # noqa: N802
                outer._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- test hooks ------------------------------------------------------------------------------
    def fail_next(self, method: str, path_part: str, status: int | None, body: dict | None = None, times: int = 1,
                  after: bool = False) -> None:
        with self._lock:
            self.faults.append(Fault(lambda m, p: m == method and path_part in p, status, body, times, after))

    def cut_watches(self) -> None:
        with self._lock:
            self._watch_gen += 1

    def expire(self, kind: str) -> None:
        """Watches resuming from any resourceVersion seen so far answer 410 Gone."""
        with self.api._lock:
            self.api._history_floor[kind] = self.api._rv + 1

    def expire_and_cut(self, kind: str) -> None:
        """:meth:`expire` and :meth:`cut_watches` at one instant: no open stream delivers a change made after the
        history floor, so every watcher resumes from before it and is answered 410 Gone."""
        with self.api._lock, self._lock:
            self.api._history_floor[kind] = self.api._rv + 1
            self._watch_gen += 1

    def kubeconfig(self, path: str) -> str:
        import yaml

        with open(path, "w") as f:
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "test",
                            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
                            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
                            "users": [{"name": "test", "user": {"token": "t"}}]}, f)
        return path

    def start(self) -> "FakeAPIServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self.cut_watches()
        self.server.shutdown()
        self.server.server_close()

    # --- serving ---------------------------------------------------------------------------------
    def _fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.times > 0 and f.match(method, path):
                    f.times -= 1
                    return f
        return None

    def _send(self, h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        u = urlparse(h.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        self.requests.append((method, u.path))
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n) if n else b""
        body = json.loads(raw) if raw else None
        fault = self._fault(method, u.path)
        if fault is not None and not fault.after:
            if fault.status is None:
                h.close_connection = True
                h.connection.close()
                return
            self._send(h, fault.status, fault.body or {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                       "code": fault.status, "message": "injected"})
            return
        try:
            parts = [unquote(p) for p in u.path.strip("/").split("/")]
            if parts[0] == "api":
                group, version, rest = "", parts[1], parts[2:]
            else:
                group, version, rest = parts[1], parts[2], parts[3:]
            ns = ""
            if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
                ns, rest = rest[1], rest[2:]
            t = BY_GROUP_PLURAL.get((group, rest[0]))
            if t is None:
                raise E.NotFound(f"the server could not find the requested resource ({u.path})")
            name = rest[1] if len(rest) > 1 else None
            sub = rest[2] if len(rest) > 2 else None
            if method == "GET" and name is None and q.get("watch") in ("true", "1"):
                self._watch(h, t.kind, ns or None, q)
                return
            out = self._do(method, t.kind, ns, name, sub, q, body, h)
        except E.ApiError as e:
            if fault is not None and fault.after:
                h.connection.close()
                return
            self._send(h, e.code, e.status())
            return
        if fault is not None and fault.after:
            if fault.status is None:
                h.close_connection = True
                h.connection.close()
                return
            self._send(h, fault.status, {"kind": "Status", "code": fault.status, "message": "injected after"})
            return
        self._send(h, 201 if method == "POST" else 200, out)

    def _do(self, method: str, kind: str, ns: str, name: str | None, sub: str | None, q: dict, body: Any,
            h: BaseHTTPRequestHandler) -> Any:
        api = self.api
        if method == "GET" and name is None:
            items, rv = api.list(kind, ns or None, q.get("labelSelector"), q.get("fieldSelector"))
            return {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": rv},
                    "items": [{k: v for k, v in o.items() if k != "kind"} for o in items]}
        if method == "GET":
            return api.get(kind, name, ns)
        if method == "POST" and sub == "eviction":
            uid = ((body or {}).get("deleteOptions") or {}).get("preconditions", {}).get("uid")
            api.evict(name, ns, uid)
            return {"kind": "Status", "status": "Success", "code": 201}
        if method == "POST" and sub == "binding":
            api.bind(name, ns, body["target"]["name"])
            return {"kind": "Status", "status": "Success", "code": 201}
        if method == "POST":
            return api.create(body, ns or None)
        if method == "PUT":
            obj = dict(body)
            obj["kind"] = kind
            return api.update(obj, sub)
        if method == "PATCH":
            return api.patch(kind, name, body, ns, h.headers.get("Content-Type") or "application/merge-patch+json", sub)
        if method == "DELETE":
            opts = body or {}
            out = api.delete(kind, name, ns, opts.get("propagationPolicy"), opts.get("preconditions"),
                             opts.get("gracePeriodSeconds"))
            return out if out is not None else {"kind": "Status", "status": "Success"}
        raise E.MethodNotAllowed(method)

    def _watch(self, h: BaseHTTPRequestHandler, kind: str, ns: str | None, q: dict) -> None:
        try:
            w = self.api.watch(kind, q.get("resourceVersion"), ns, q.get("labelSelector"), q.get("fieldSelector"))
        except E.ApiError as e:
            self._send(h, e.code, e.status())
            return
        gen = self._watch_gen
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        try:
            while not self._stopping and gen == self._watch_gen:
                ev = w.next(timeout=0.1)
                if ev is None or gen != self._watch_gen:  # an event taken after the cut is not sent
                    continue
                h.wfile.write(json.dumps({"type": ev.type, "object": ev.object}).encode() + b"\n")
                h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            w.stop()
            h.close_connection = True
