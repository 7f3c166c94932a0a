"""deploy/rbac.yaml grants exactly what karpy's controller uses: nothing missing, nothing extra, no wildcard."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from karpy.controller.leader import LEASE_NAME

from . import apicalls

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = {"kind": "ServiceAccount", "name": "karpenter", "namespace": NAMESPACE}


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


RBAC = docs("rbac.yaml")


def of_kind(kind: str) -> list[dict]:
    return [d for d in RBAC if d["kind"] == kind]


def bound_roles(binding_kind: str) -> set[tuple[str, str]]:
    """(role kind, role name) bound to karpy's service account."""
    out = set()
    for b in of_kind(binding_kind):
        if SERVICE_ACCOUNT in b["subjects"]:
            out.add((b["roleRef"]["kind"], b["roleRef"]["name"]))
    return out


def grants(role: dict) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(apiGroup, resource, verb, resourceNames) of every rule of a role."""
    out = []
    for r in role["rules"]:
        for g in r["apiGroups"]:
            for res in r["resources"]:
                for v in r["verbs"]:
                    out.append((g, res, v, tuple(r.get("resourceNames", ()))))
    return out


def granted() -> tuple[set[tuple[str, str, str]], list[tuple]]:
    """Cluster-wide grants, and the grants of the Roles in the controller's namespace."""
    cluster_roles = {("ClusterRole", d["metadata"]["name"]): d for d in of_kind("ClusterRole")}
    roles = {("Role", d["metadata"]["name"]): d for d in of_kind("Role")}
    cluster: set[tuple[str, str, str]] = set()
    for ref in bound_roles("ClusterRoleBinding"):
        for g, res, v, names in grants(cluster_roles[ref]):
            assert not names, "a ClusterRole grant limited by name"
            cluster.add((g, res, v))
    ns: list[tuple] = []
    for b in of_kind("RoleBinding"):
        if SERVICE_ACCOUNT in b["subjects"]:
            assert b["metadata"]["namespace"] == NAMESPACE
            role = roles[(b["roleRef"]["kind"], b["roleRef"]["name"])]
            assert role["metadata"]["namespace"] == NAMESPACE
            ns.extend(grants(role))
    return cluster, ns


# granted in the controller's namespace (kube-system) only: its Lease, and the Azure provider's kubelet bootstrap
# token Secret
NAMESPACED_ONLY = {("coordination.k8s.io", "leases"), ("", "secrets")}


def test_every_call_is_classified():
    _, unresolved = apicalls.permissions()
    assert unresolved == [], (
        "API calls whose kind the scan cannot tell; add them to tests/deploy/apicalls.DYNAMIC: "
        + ", ".join(c.where() + f" {c.verb}" for c in unresolved)
    )


def test_the_scan_sees_the_controllers_calls():
    """A sanity check of the scan itself: calls we know are there are found."""
    calls = apicalls.scan()
    seen = {(c.verb, c.kind, c.subresource) for c in calls}
    assert ("patch", "NodeClaim", "status") in seen
    assert ("delete", "NodeClaim", None) in seen
    assert ("evict", "Pod", None) in seen
    assert ("create", "Event", None) in seen
    assert ("get", "Lease", None) in seen
    assert not any(c.file.startswith("karpy/simulator/") for c in calls)
    assert {"Pod", "Node", "NodeClaim", "NodePool", "KWOKNodeClass", "PodDisruptionBudget"} <= apicalls.watched_kinds()


def test_no_wildcards():
    for role in of_kind("ClusterRole") + of_kind("Role"):
        for r in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in r.get(field, []), (role["metadata"]["name"], field)
                assert not any("*" in x for x in r.get(field, [])), (role["metadata"]["name"], field)


def test_nothing_missing_cluster_wide():
    need, _ = apicalls.permissions()
    cluster, _ = granted()
    missing = sorted(p for p in need if (p[0], p[1]) not in NAMESPACED_ONLY and p not in cluster)
    assert missing == [], f"karpy's controller needs these and deploy/rbac.yaml does not grant them: {missing}"


def test_nothing_extra_cluster_wide():
    need, _ = apicalls.permissions()
    cluster, _ = granted()
    extra = sorted(p for p in cluster if p not in need)
    assert extra == [], f"deploy/rbac.yaml grants what karpy's controller never uses: {extra}"


def test_leases_only_in_the_controllers_namespace_and_by_name():
    need, _ = apicalls.permissions()
    cluster, ns = granted()
    assert not any((g, res) in NAMESPACED_ONLY for g, res, _ in cluster)
    lease_verbs = {v for g, res, v in need if (g, res) == ("coordination.k8s.io", "leases")}
    assert lease_verbs == {"get", "create", "update"}
    have = {(g, res, v): names for g, res, v, names in ns}
    assert {v for g, res, v in have if (g, res) == ("coordination.k8s.io", "leases")} == lease_verbs
    for v in lease_verbs - {"create"}:  # create cannot be limited by name
        assert have[("coordination.k8s.io", "leases", v)] == (LEASE_NAME,)
    assert have[("coordination.k8s.io", "leases", "create")] == ()
    assert not any((g, res) not in NAMESPACED_ONLY for g, res, _, _ in ns), "namespaced grants beyond the Lease"


def test_secrets_only_the_bootstrap_tokens_and_only_get():
    """The Azure provider reads its kubelet bootstrap token's Secret (kube-system/bootstrap-token-<id>) to report
    its expiry: get, on that name only, never cluster-wide."""
    need, _ = apicalls.permissions()
    cluster, ns = granted()
    assert ("", "secrets", "get") in need and not any(res == "secrets" for _, res, _ in cluster)
    secrets = [(v, names) for g, res, v, names in ns if (g, res) == ("", "secrets")]
    assert secrets == [("get", ("bootstrap-token-TOKENID",))]


def test_bindings_name_existing_roles_and_the_service_account():
    names = {(d["kind"], d["metadata"]["name"]) for d in RBAC}
    for b in of_kind("ClusterRoleBinding") + of_kind("RoleBinding"):
        assert (b["roleRef"]["kind"], b["roleRef"]["name"]) in names
        assert b["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
        assert b["subjects"] == [SERVICE_ACCOUNT]
    (sa,) = docs("serviceaccount.yaml")
    assert (sa["kind"], sa["metadata"]["name"], sa["metadata"]["namespace"]) == (
        "ServiceAccount",
        SERVICE_ACCOUNT["name"],
        NAMESPACE,
    )
    (dep,) = docs("deployment.yaml")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT["name"]
    assert dep["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("kind", ["NodePool", "NodeClaim", "KWOKNodeClass", "AKSNodeClass", "EC2NodeClass"])
def test_every_crd_kind_is_readable(kind):
    """The informers list and watch every NodeClass kind whatever the provider: each needs its CRD and a grant."""
    from karpy.kube.registry import BY_KIND

    cluster, _ = granted()
    t = BY_KIND[kind]
    assert {(t.group, t.plural, v) for v in ("get", "list", "watch")} <= cluster
    assert (DEPLOY / "crds" / f"{t.group}_{t.plural}.yaml").is_file()
