"""The kubelet bootstrap token's expiry, read from its Secret in kube-system, reported as Warning Events on the
AKSNodeClasses and log lines before new nodes stop joining."""

from __future__ import annotations

import base64
import time

import pytest

from karpy.cloudprovider.arm.tokencheck import BootstrapTokenCheck
from karpy.kube import errors as E

from .conftest import TOKEN, Clock

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class Cluster:
    """The API calls the check makes (api.get of the Secret, mgr.list of the AKSNodeClasses), the Events it
    publishes and the lines it logs."""

    def __init__(self, secret: dict | None = None, fail: Exception | None = None):
        self.secret, self.fail = secret, fail
        self.reads: list[tuple[str, str, str]] = []
        self.events: list[tuple[str, str, str, str]] = []
        self.logs: list[tuple[str, str, dict]] = []

    def get(self, kind, name, namespace=""):
        self.reads.append((kind, name, namespace))
        if self.fail is not None:
            raise self.fail
        if self.secret is None or name != self.secret["metadata"]["name"] or namespace != "kube-system":
            raise E.NotFound(f'secrets "{name}" not found')
        return self.secret

    def list(self, kind):
        assert kind == "AKSNodeClass"
        return [{"kind": "AKSNodeClass", "metadata": {"name": n}} for n in ("default-demo", "gpu")]

    def publish(self, involved, reason, message, etype="Normal", **kw):
        self.events.append((involved["kind"], involved["name"], etype, reason))

    def info(self, msg, **kv):
        self.logs.append(("info", msg, kv))

    def warn(self, msg, **kv):
        self.logs.append(("warn", msg, kv))

    def error(self, msg, **kv):
        self.logs.append(("error", msg, kv))


def token_secret(expiration: float | None, secret: str = "0123456789abcdef") -> dict:
    data = {"token-id": b64("abcdef"), "token-secret": b64(secret), "usage-bootstrap-authentication": b64("true")}
    if expiration is not None:
        data["expiration"] = b64(iso(expiration))
    return {"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"}, "data": data}


def check(cluster: Cluster, now: float = T0):
    clock = Clock()
    clock.t = now
    c = BootstrapTokenCheck(cluster, cluster, TOKEN, cluster, cluster, now=clock)
    return c, c.check()


def test_reads_only_the_tokens_own_secret_and_is_quiet_while_far_from_expiry():
    cluster = Cluster(token_secret(T0 + 3 * 86400))
    _, got = check(cluster)
    assert got is None and cluster.events == [] and cluster.logs == []
    assert cluster.reads == [("Secret", "bootstrap-token-abcdef", "kube-system")]
    _, got = check(Cluster(token_secret(None)))  # a token without expiration never expires
    assert got is None


def test_expiring_within_24_hours_warns_on_every_nodeclass():
    exp = T0 + 5 * 3600
    cluster = Cluster(token_secret(exp))
    _, (reason, message) = check(cluster)
    assert reason == "BootstrapTokenExpiring"
    assert cluster.events == [("AKSNodeClass", "default-demo", "Warning", "BootstrapTokenExpiring"),
                              ("AKSNodeClass", "gpu", "Warning", "BootstrapTokenExpiring")]
    assert iso(exp) in message and "KUBELET_BOOTSTRAP_TOKEN" in message
    assert "0123456789abcdef" not in message  # the token's secret half is never shown
    assert [(lv, kv["reason"], kv["expiration"]) for lv, _, kv in cluster.logs] == \
        [("warn", "BootstrapTokenExpiring", iso(exp))]


def test_expired_is_an_error():
    cluster = Cluster(token_secret(T0 - 60))
    _, (reason, message) = check(cluster)
    assert reason == "BootstrapTokenExpired" and "expired at" in message
    assert {e[3] for e in cluster.events} == {"BootstrapTokenExpired"}
    assert [lv for lv, _, _ in cluster.logs] == ["error"]


@pytest.mark.parametrize("cluster,reason", [
    (Cluster(None), "BootstrapTokenNotFound"),
    (Cluster(token_secret(T0 + 86400 * 7, secret="ffffffffffffffff")), "BootstrapTokenInvalid"),
])
def test_a_missing_or_different_token_is_an_error(cluster, reason):
    _, (got, message) = check(cluster)
    assert got == reason and "new nodes cannot join" in message
    assert {e[3] for e in cluster.events} == {reason}
    assert "ffffffffffffffff" not in message and "0123456789abcdef" not in message


def test_without_rbac_to_read_the_secret_it_says_so_once_and_carries_on():
    cluster = Cluster(fail=E.Forbidden('secrets "bootstrap-token-abcdef" is forbidden'))
    c, got = check(cluster)
    assert got is None and c.check() is None
    assert [(lv, m) for lv, m, _ in cluster.logs] == [
        ("info", "cannot read the kubelet bootstrap token's Secret, its expiry is not checked")]
    assert cluster.events == []
    assert c.reconcile("") == 900.0  # checked again in 15 minutes
