"""The kubelet bootstrap token's expiry, reported before new nodes stop joining.

Self-hosted users give karpy a TLS bootstrap token (``KUBELET_BOOTSTRAP_TOKEN``, ``<id>.<secret>``) that every
new node's kubelet joins the cluster with. Bootstrap tokens are Secrets ``bootstrap-token-<id>`` in
``kube-system``, and one with an ``expiration`` stops working then: nodes karpy launches afterwards never join.
Upstream leaves the rotation to its users; karpy reads the token's Secret every 15 minutes and reports, as a
Warning Event on every AKSNodeClass and a log line:

- ``BootstrapTokenExpiring``: the token expires within 24 hours;
- ``BootstrapTokenExpired``: it has expired;
- ``BootstrapTokenNotFound``: there is no such Secret (deleted, or expired and removed by the token cleaner);
- ``BootstrapTokenInvalid``: the Secret's ``token-secret`` is not the one karpy was given.

Reading the Secret needs ``get`` on that one Secret (deploy/rbac.yaml's Role ``karpenter-bootstrap-token``,
which the chart renders from ``KUBELET_BOOTSTRAP_TOKEN``); without it karpy logs once that it cannot check the
token and carries on.
"""

from __future__ import annotations

import base64
import time
from typing import Any

from ...kube import errors as E
from ...kube.times import parse_time
from ...runtime.events import ref

PERIOD = 900.0
WARN_BEFORE = 24 * 3600.0
NAMESPACE = "kube-system"


def _decode(data: dict, key: str) -> str:
    v = data.get(key)
    if not v:
        return ""
    try:
        return base64.b64decode(v).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


class BootstrapTokenCheck:
    name = "bootstrap.token"
    periodic = True

    def __init__(self, mgr: Any, api: Any, token: str, recorder: Any, log: Any, now: Any = time.time):
        self.mgr, self.api, self.recorder, self.log, self.now = mgr, api, recorder, log, now
        self.token_id, _, self.token_secret = token.partition(".")
        self.secret_name = f"bootstrap-token-{self.token_id}"
        self.started = False
        self.forbidden_logged = False

    def setup(self, mgr: Any) -> None:
        def kick(etype: str, obj: dict, old: dict | None) -> None:
            if not self.started:
                self.started = True
                mgr.enqueue(self, "")
        mgr.watch("AKSNodeClass", kick)

    def reconcile(self, key: Any) -> float | None:
        self.check()
        return PERIOD

    def check(self) -> tuple[str, str] | None:
        """One check: (reason, message) of what was reported, or None."""
        try:
            secret = self.api.get("Secret", self.secret_name, NAMESPACE)
        except E.NotFound:
            return self._report("BootstrapTokenNotFound", f"the kubelet bootstrap token {self.token_id} (Secret "
                                f"{NAMESPACE}/{self.secret_name}) does not exist: new nodes cannot join the cluster; "
                                "create a bootstrap token and set KUBELET_BOOTSTRAP_TOKEN", error=True)
        except (E.Forbidden, E.Unauthorized) as e:
            if not self.forbidden_logged:
                self.forbidden_logged = True
                self.log.info("cannot read the kubelet bootstrap token's Secret, its expiry is not checked",
                              controller=self.name, secret=f"{NAMESPACE}/{self.secret_name}", error=str(e))
            return None
        except Exception as e:  # noqa: BLE001 - the API server is unreachable: the next check
            self.log.error("failed reading the kubelet bootstrap token's Secret", controller=self.name,
                           secret=f"{NAMESPACE}/{self.secret_name}", error=str(e))
            return None
        data = secret.get("data") or {}
        if self.token_secret and _decode(data, "token-secret") not in ("", self.token_secret):
            return self._report("BootstrapTokenInvalid", f"the kubelet bootstrap token {self.token_id} does not "
                                f"match Secret {NAMESPACE}/{self.secret_name}: new nodes cannot join the cluster; "
                                "set KUBELET_BOOTSTRAP_TOKEN to the token's <id>.<secret>", error=True)
        raw = _decode(data, "expiration")
        expires = parse_time(raw) if raw else None
        if expires is None:
            return None
        left = expires - self.now()
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
        if left <= 0:
            return self._report("BootstrapTokenExpired", f"the kubelet bootstrap token {self.token_id} expired at "
                                f"{when}: new nodes cannot join the cluster; create a new bootstrap token and set "
                                "KUBELET_BOOTSTRAP_TOKEN", error=True, expiration=when)
        if left <= WARN_BEFORE:
            return self._report("BootstrapTokenExpiring", f"the kubelet bootstrap token {self.token_id} expires at "
                                f"{when}: nodes launched after it cannot join the cluster; create a new bootstrap "
                                "token and set KUBELET_BOOTSTRAP_TOKEN", error=False, expiration=when)
        return None

    def _report(self, reason: str, message: str, error: bool, **kv: Any) -> tuple[str, str]:
        (self.log.error if error else self.log.warn)(message, controller=self.name, reason=reason,
                                                     **{"token-id": self.token_id}, **kv)
        for nc in self.mgr.list("AKSNodeClass"):
            self.recorder.publish(ref(nc, "AKSNodeClass"), reason, message, "Warning", dedupe=3600.0)
        return reason, message
