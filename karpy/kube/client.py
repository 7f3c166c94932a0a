"""The Kubernetes API port (:class:`karpy.kube.port.KubeAPI`) over a real API server.

Why lightkube (pinned in pyproject.toml): it is small, maintained, async-native
on httpx, and its configuration layer does everything a controller needs to
reach a cluster -- the in-cluster service account (with token rotation), a
kubeconfig from ``--kubeconfig``/``$KUBECONFIG``/``~/.kube/config``, contexts,
client certificates, CA bundles and exec credential plugins. karpy uses that
layer and the authenticated ``httpx`` client it builds, and speaks the REST
API itself with JSON dicts: the controllers handle objects as dicts already
(kubernetes_asyncio would deserialize into typed models and back), and the
informers need exact control of ``resourceVersion``, bookmarks and 410 Gone
that lightkube's typed ``watch()`` hides (it restarts a 410'd watch from "now",
which would silently lose deletions).

The client runs an asyncio loop on a background thread; the port methods are
synchronous (the controllers are) and submit coroutines to it. Watches stream
on that loop into thread-safe queues.

Retries (deterministic exponential backoff, no jitter: ``base * 2**n`` capped):

* connection errors, 5xx and 429 are retried; a 429 from the Eviction API is
  not -- that is the PodDisruptionBudget's answer and goes back to the caller
  as :class:`~karpy.kube.errors.TooManyRequests`;
* a 409 Conflict is retried only for a patch without a ``resourceVersion``
  precondition (re-sending it cannot overwrite someone else's change); an
  update's or a precondition's Conflict goes back to the caller (the manager
  requeues the reconcile), and a create's AlreadyExists is returned as is;
* a create with ``generateName`` is given its name on the client, so that a
  create retried after a lost answer cannot make a second object: if the retry
  meets AlreadyExists and the stored object is the one sent (same spec), it is
  returned as the create's result.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import httpx2 as httpx
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError as LightkubeConfigError

from . import errors as E
from .port import APPLY_PATCH, BOOKMARK, ERROR, JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, WatchEvent
from .registry import BY_KIND, ResourceType, is_namespaced

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
WATCH_TIMEOUT_SECONDS = 300  # server-side end of one watch request; the informer resumes from its resourceVersion


class ConfigError(Exception):
    """No usable cluster configuration (exit status 2 for ``karpy controller``)."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8  # tries in all
    base: float = 0.05  # seconds before the first retry; doubled every retry
    cap: float = 5.0  # longest wait between tries

    def delay(self, n: int, retry_after: float | None = None) -> float:
        d = min(self.cap, self.base * (2 ** n))
        if retry_after is not None:
            d = min(self.cap, max(d, retry_after))
        return d


def load_config(kubeconfig: str | None = None, context: str | None = None,
                service_account: str = SERVICE_ACCOUNT) -> tuple[SingleConfig, bool]:
    """The cluster to talk to and whether it is the in-cluster service account.

    ``--kubeconfig`` wins; without it, the service account when running in a pod, else
    ``$KUBECONFIG``, else ``~/.kube/config``."""
    try:
        if kubeconfig:
            return KubeConfig.from_file(kubeconfig).get(context), False
        if os.environ.get("KUBERNETES_SERVICE_HOST") and Path(service_account, "token").exists():
            return KubeConfig.from_service_account(service_account).get(context), True
        path = os.environ.get("KUBECONFIG") or "~/.kube/config"
        path = path.split(os.pathsep)[0]
        return KubeConfig.from_file(path).get(context), False
    except LightkubeConfigError as e:
        raise ConfigError(str(e)) from None
    except (KeyError, TypeError, ValueError, OSError) as e:
        raise ConfigError(f"invalid kubeconfig: {e}") from None
    except Exception as e:  # yaml errors, msgspec validation errors
        raise ConfigError(f"invalid kubeconfig: {e}") from None


def resource_path(kind: str, namespace: str | None = None, name: str | None = None,
                  subresource: str | None = None) -> str:
    t = BY_KIND.get(kind)
    if t is None:
        raise E.BadRequest(f"unknown kind {kind!r}")
    return _path(t, namespace, name, subresource)


def _path(t: ResourceType, namespace: str | None, name: str | None, subresource: str | None) -> str:
    base = f"/apis/{t.group}/{t.version}" if t.group else f"/api/{t.version}"
    if t.namespaced and namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{t.plural}"
    if name:
        base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
    return base


def _status_body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return {"message": resp.text[:500] or f"HTTP {resp.status_code}"}


def _retry_after(resp: httpx.Response | None, err: E.ApiError | None) -> float | None:
    if err is not None and err.retry_after is not None:
        try:
            return float(err.retry_after)
        except (TypeError, ValueError):
            pass
    if resp is not None:
        h = resp.headers.get("Retry-After")
        if h:
            try:
                return float(h)
            except ValueError:
                return None
    return None


def _has_precondition(patch: Any, patch_type: str) -> bool:
    """Does re-sending this patch risk overwriting a concurrent change (it carries a precondition)?"""
    if patch_type in (JSON_PATCH, "json"):
        return any(isinstance(op, dict) and op.get("op") == "test" for op in patch or ())
    if isinstance(patch, dict):
        return bool((patch.get("metadata") or {}).get("resourceVersion"))
    return True


class HTTPWatch:
    """One watch request's events; ``done`` once the server ended the stream or the connection dropped."""

    def __init__(self, client: "KubeClient", kind: str):
        self._client = client
        self.kind = kind
        self._q: queue.Queue[WatchEvent | None] = queue.Queue()
        self.done = False
        self.error: BaseException | None = None
        self._task: asyncio.Task | None = None
        self._resp: httpx.Response | None = None

    # called on the loop
    async def _pump(self) -> None:
        resp = self._resp
        assert resp is not None
        try:
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                obj = ev.get("object") or {}
                etype = ev.get("type") or ""
                if etype not in (ERROR, BOOKMARK) and obj.get("kind") is None:
                    obj = dict(obj, kind=self.kind)
                elif etype not in (ERROR, BOOKMARK) and obj.get("kind") != self.kind:
                    obj = dict(obj, kind=self.kind)
                self._q.put(WatchEvent(etype, obj))
        except asyncio.CancelledError:
            pass
        except Exception as e:  # connection dropped, read timeout
            self.error = e
        finally:
            self.done = True
            self._q.put(None)
            try:
                await resp.aclose()
            except Exception:
                pass

    def poll(self) -> list[WatchEvent]:
        out = []
        while True:
            try:
                ev = self._q.get_nowait()
            except queue.Empty:
                return out
            if ev is None:
                self._q.put(None)
                return out
            out.append(ev)

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        try:
            ev = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if ev is None:
            self._q.put(None)  # stays ended for later calls
        return ev

    def stop(self) -> None:
        if self._task is not None and not self._task.done():
            loop = self._client._loop
            if loop.is_running():
                loop.call_soon_threadsafe(self._task.cancel)
        self.done = True
        self._q.put(None)


class KubeClient:
    """A :class:`~karpy.kube.port.KubeAPI` over an API server reached with a lightkube configuration."""

    concurrent = True  # its methods may be called from several threads at once (one asyncio loop serves them)

    def __init__(self, config: SingleConfig, retry: RetryPolicy | None = None, timeout: float = 30.0,
                 user_agent: str = "karpy-controller", field_manager: str = "karpenter"):
        self.config = config
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.field_manager = field_manager
        self.namespace = config.namespace
        self.on_retry: Callable[[str, str, BaseException, float], None] | None = None  # (method, path, error, delay)
        self.retries = 0
        self._seq = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="kube-client", daemon=True)
        self._thread.start()
        params = client_adapter.ConnectionParams(timeout=httpx.Timeout(timeout), trust_env=False)
        try:
            self._http: httpx.AsyncClient = self._call(self._make_http(config, params))
        except LightkubeConfigError as e:
            self.close()
            raise ConfigError(str(e)) from None
        self._http.headers["User-Agent"] = user_agent
        self._closed = False

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, context: str | None = None, **kw: Any) -> "KubeClient":
        config, _ = load_config(kubeconfig, context)
        return cls(config, **kw)

    @staticmethod
    async def _make_http(config: SingleConfig, params: client_adapter.ConnectionParams) -> httpx.AsyncClient:
        return client_adapter.AsyncClient(config, params)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call(self, coro: Any) -> Any:
        if threading.current_thread() is self._thread:
            raise RuntimeError("KubeClient's synchronous methods cannot run on its own loop")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        if getattr(self, "_closed", True) and not self._loop.is_running():
            return
        self._closed = True
        http = getattr(self, "_http", None)
        if http is not None:
            try:
                asyncio.run_coroutine_threadsafe(http.aclose(), self._loop).result(timeout=5)
            except Exception:
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    # --- the request core ----------------------------------------------------------------------
    async def _send(self, method: str, path: str, params: dict | None, body: Any, content_type: str | None) -> Any:
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        resp = await self._http.request(method, path, params=params, content=content, headers=headers)
        if resp.status_code >= 400:
            err = E.from_status(resp.status_code, _status_body(resp))
            err.http_retry_after = _retry_after(resp, err)  # type: ignore[attr-defined]
            raise err
        if not resp.content:
            return None
        return resp.json()

    async def _request(self, method: str, path: str, *, params: dict | None = None, body: Any = None,
                       content_type: str | None = None, retry_conflict: bool = False,
                       retry_429: bool = True, create: bool = False) -> Any:
        n = 0
        while True:
            try:
                return await self._send(method, path, params, body, content_type)
            except E.AlreadyExists as e:
                if create and n > 0:
                    raise _RetriedAlreadyExists(e) from None  # the first try may have landed
                raise
            except E.ApiError as e:
                retryable = (e.code >= 500 or (e.code == 429 and retry_429)
                             or (retry_conflict and isinstance(e, E.Conflict)))
                if not retryable or n + 1 >= self.retry.attempts:
                    raise
                delay = self.retry.delay(n, getattr(e, "http_retry_after", None) if e.code == 429 else None)
                err: BaseException = e
            except httpx.TransportError as e:
                if n + 1 >= self.retry.attempts:
                    raise E.ServiceUnavailable(f"{method} {path}: {type(e).__name__}: {e}") from None
                delay = self.retry.delay(n)
                err = e
            self.retries += 1
            if self.on_retry is not None:
                try:
                    self.on_retry(method, path, err, delay)
                except Exception:
                    pass
            n += 1
            await asyncio.sleep(delay)

    # --- reading -------------------------------------------------------------------------------
    def get(self, kind: str, name: str, namespace: str = "") -> dict:
        ns = self._ns(kind, namespace)
        obj = self._call(self._request("GET", resource_path(kind, ns, name)))
        return _with_kind(obj, kind)

    def list(self, kind: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict], str]:
        return self._call(self._list(kind, namespace, label_selector, field_selector))

    async def _list(self, kind: str, namespace: str | None, label_selector: str | None,
                    field_selector: str | None) -> tuple[list[dict], str]:
        path = resource_path(kind, namespace or None)
        items: list[dict] = []
        cont = None
        rv = ""
        while True:
            params: dict[str, Any] = {"limit": 500}
            if label_selector:
                params["labelSelector"] = label_selector
            if field_selector:
                params["fieldSelector"] = field_selector
            if cont:
                params["continue"] = cont
            body = await self._request("GET", path, params=params)
            meta = body.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or rv)
            items.extend(_with_kind(o, kind) for o in body.get("items") or ())
            cont = meta.get("continue")
            if not cont:
                return items, rv

    def watch(self, kind: str, resource_version: str | None = None, namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None) -> HTTPWatch:
        w = HTTPWatch(self, kind)
        params: dict[str, Any] = {"watch": "true", "allowWatchBookmarks": "true",
                                  "timeoutSeconds": WATCH_TIMEOUT_SECONDS}
        if resource_version:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        self._call(self._open_watch(w, resource_path(kind, namespace or None), params))
        return w

    async def _open_watch(self, w: HTTPWatch, path: str, params: dict) -> None:
        timeout = httpx.Timeout(self.timeout, read=WATCH_TIMEOUT_SECONDS + 30.0)
        n = 0
        while True:
            req = self._http.build_request("GET", path, params=params, timeout=timeout,
                                           headers={"Accept": "application/json"})
            try:
                resp = await self._http.send(req, stream=True)
            except httpx.TransportError as e:
                if n + 1 >= self.retry.attempts:
                    raise E.ServiceUnavailable(f"watch {path}: {type(e).__name__}: {e}") from None
                await asyncio.sleep(self.retry.delay(n))
                n += 1
                continue
            if resp.status_code >= 400:
                await resp.aread()
                await resp.aclose()
                err = E.from_status(resp.status_code, _status_body(resp))
                if (err.code >= 500 or err.code == 429) and n + 1 < self.retry.attempts:
                    await asyncio.sleep(self.retry.delay(n, _retry_after(resp, err)))
                    n += 1
                    continue
                raise err
            w._resp = resp
            w._task = asyncio.get_running_loop().create_task(w._pump())
            return

    # --- writing -------------------------------------------------------------------------------
    def create(self, obj: dict, namespace: str | None = None) -> dict:
        kind = obj.get("kind") or ""
        if kind not in BY_KIND:
            raise E.BadRequest(f"unknown kind {kind!r}")
        meta = dict(obj.get("metadata") or {})
        ns = self._ns(kind, namespace or meta.get("namespace")) if is_namespaced(kind) else ""
        body = dict(obj)
        body.setdefault("apiVersion", BY_KIND[kind].api_version)
        generated = False
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = _generate(str(meta["generateName"]))
            generated = True
        body["metadata"] = meta
        return self._call(self._create(kind, ns, body, generated))

    async def _create(self, kind: str, ns: str, body: dict, generated: bool) -> dict:
        path = resource_path(kind, ns or None)
        meta = body["metadata"]
        for attempt in range(4):
            try:
                return _with_kind(await self._request("POST", path, body=body, create=True), kind)
            except _RetriedAlreadyExists as e:
                try:
                    cur = await self._request("GET", resource_path(kind, ns or None, meta["name"]))
                except E.NotFound:
                    raise e.err from None
                if _same_content(cur, body):
                    return _with_kind(cur, kind)
                raise e.err from None
            except E.AlreadyExists:
                if generated and attempt < 3:  # our generated name collided: draw another, as the API server would
                    meta["name"] = _generate(str(meta["generateName"]))
                    continue
                raise
        raise E.AlreadyExists(f'"{meta.get("name")}" already exists')

    def update(self, obj: dict, subresource: str | None = None) -> dict:
        kind = obj.get("kind") or ""
        meta = obj.get("metadata") or {}
        ns = self._ns(kind, meta.get("namespace"))
        path = resource_path(kind, ns or None, meta.get("name"), subresource)
        body = dict(obj)
        body.setdefault("apiVersion", BY_KIND[kind].api_version if kind in BY_KIND else "v1")
        return _with_kind(self._call(self._request("PUT", path, body=body)), kind)

    def patch(self, kind: str, name: str, patch: Any, namespace: str = "", patch_type: str = MERGE_PATCH,
              subresource: str | None = None) -> dict:
        ct = {"merge": MERGE_PATCH, "json": JSON_PATCH, "strategic": STRATEGIC_MERGE_PATCH,
              "apply": APPLY_PATCH}.get(patch_type, patch_type)
        ns = self._ns(kind, namespace)
        path = resource_path(kind, ns or None, name, subresource)
        params = {"fieldManager": self.field_manager, "force": "true"} if ct == APPLY_PATCH else None
        safe = not _has_precondition(patch, ct)
        return _with_kind(self._call(self._request("PATCH", path, params=params, body=patch, content_type=ct,
                                                   retry_conflict=safe)), kind)

    def delete(self, kind: str, name: str, namespace: str = "", propagation: str | None = None,
               preconditions: dict | None = None, grace_period_seconds: int | None = None) -> dict | None:
        ns = self._ns(kind, namespace)
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        if preconditions:
            body["preconditions"] = preconditions
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        out = self._call(self._request("DELETE", resource_path(kind, ns or None, name), body=body))
        if isinstance(out, dict) and out.get("kind") == "Status":
            return None
        return _with_kind(out, kind) if isinstance(out, dict) else None

    def evict(self, name: str, namespace: str, uid: str | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        self._call(self._request("POST", resource_path("Pod", namespace, name, "eviction"), body=body,
                                 retry_429=False))

    def bind(self, name: str, namespace: str, node: str) -> None:
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self._call(self._request("POST", resource_path("Pod", namespace, name, "binding"), body=body))

    # --- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _ns(kind: str, namespace: str | None) -> str:
        return (namespace or "default") if is_namespaced(kind) else ""


class _RetriedAlreadyExists(Exception):
    def __init__(self, err: E.AlreadyExists):
        super().__init__(str(err))
        self.err = err


def _generate(prefix: str) -> str:
    return prefix + "".join(_ALPHABET[b % len(_ALPHABET)] for b in secrets.token_bytes(5))


def _same_content(stored: dict, sent: dict) -> bool:
    """Is the stored object the one a create sent (its first try landed though the answer was lost)?"""
    for k, v in sent.items():
        if k in ("metadata", "status", "apiVersion", "kind"):
            continue
        if stored.get(k) != v:
            return False
    sm, om = stored.get("metadata") or {}, sent.get("metadata") or {}
    return (sm.get("labels") or {}) == (om.get("labels") or {})


def _with_kind(obj: Any, kind: str) -> Any:
    """List items come without ``kind``; the controllers key everything on it."""
    if isinstance(obj, dict) and obj.get("kind") != kind and obj.get("kind") != "Status":
        obj = dict(obj)
        obj["kind"] = kind
    return obj
