"""karpy.api.crds: the CRDs generated from karpy's schema.

The CRDs must be structural (what the API server requires), agree with what
karpy itself accepts and refuses (checked with ``jsonschema`` on each
``openAPIV3Schema``, in strict field validation as kubectl sends it; CEL rules
are checked by message, since jsonschema cannot run CEL), and match the files
committed under ``deploy/crds/``.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest
import yaml

from karpy.api import crds as C
from karpy.api import nodeclass, nodepool
from karpy.api.kinds import validate_manifest
from karpy.api.schema import Node, cel, obj, rule_cel, string
from karpy.kube import registry

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT.parent / "shared" / "seeds"
CRD_KINDS = {k.kind for k in C.KINDS}


# --- helpers --------------------------------------------------------------------------------


def schema_of(kind: str, version: str | None = None) -> dict:
    c = C.crd(C.BY_KIND[kind])
    for v in c["spec"]["versions"]:
        if version is None or v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(version)


def strict(s: Any) -> Any:
    """An openAPIV3Schema as JSON Schema under strict field validation: an object that neither
    preserves unknown fields nor declares additionalProperties refuses undeclared ones."""
    if isinstance(s, list):
        return [strict(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: strict(v) for k, v in s.items() if k != "default"}
    if (
        s.get("type") == "object"
        and "properties" in s
        and "additionalProperties" not in s
        and not s.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def schema_errors(kind: str, manifest: dict, version: str | None = None) -> list[tuple[str, str]]:
    """(path, message) of every jsonschema error, the path written as karpy writes field paths."""
    v = jsonschema.Draft7Validator(strict(schema_of(kind, version)))
    out = []
    for e in v.iter_errors(manifest):
        path = ""
        for p in e.absolute_path:
            path = f"{path}[{p}]" if isinstance(p, int) else (f"{path}.{p}" if path else str(p))
        if e.validator == "required":
            missing = re.search(r"'([^']+)' is a required property", e.message)
            if missing:
                path = f"{path}.{missing.group(1)}" if path else missing.group(1)
        if e.validator == "additionalProperties":
            extra = re.findall(r"'([^']+)'", e.message.split("(")[-1])
            if extra:
                path = f"{path}.{extra[0]}" if path else extra[0]
        out.append((path, e.message))
    return out


def karpy_errors(manifest: dict) -> list[tuple[str, str]]:
    return validate_manifest(copy.deepcopy(manifest)).errors


def nodes(s: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    yield path, s
    for k, sub in (s.get("properties") or {}).items():
        yield from nodes(sub, f"{path}.{k}")
    if isinstance(s.get("items"), dict):
        yield from nodes(s["items"], f"{path}[]")
    if isinstance(s.get("additionalProperties"), dict):
        yield from nodes(s["additionalProperties"], f"{path}{{}}")


def at(s: dict, path: str) -> dict:
    for p, n in nodes(s):
        if p == path:
            return n
    raise KeyError(path)


def yaml_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def example_manifests() -> list[tuple[str, dict]]:
    out = []
    for f in sorted((ROOT / "examples").rglob("*.y*ml")) + sorted((ROOT / "tests" / "fixtures").rglob("*.y*ml")):
        for i, d in enumerate(yaml_docs(f.read_text())):
            if d.get("kind") in CRD_KINDS:
                out.append((f"{f.relative_to(ROOT)}#{i}", d))
    return out


_HEREDOC = re.compile(r"cat <<EOF \| kubectl apply -f -\n(.*?)\nEOF\b|\$\w+ = @\"\n(.*?)\n\"@", re.S)


def seed_manifests() -> list[tuple[str, dict]]:
    out = []
    for f in sorted(SEEDS.glob("*.txt")) if SEEDS.is_dir() else []:
        for m in _HEREDOC.finditer(f.read_text()):
            for i, d in enumerate(yaml_docs(m.group(1) or m.group(2))):
                if d.get("kind") in CRD_KINDS:
                    out.append((f"{f.name}@{m.start()}#{i}", d))
    return out


# --- generation -----------------------------------------------------------------------------


def test_seven_crds_with_upstreams_names_and_versions():
    got = {c["metadata"]["name"]: c for c in C.crds()}
    assert sorted(got) == [
        "aksnodeclasses.karpenter.azure.com",
        "capacitybuffers.autoscaling.x-k8s.io",
        "ec2nodeclasses.karpenter.k8s.aws",
        "kwoknodeclasses.karpenter.kwok.sh",
        "nodeclaims.karpenter.sh",
        "nodeoverlays.karpenter.sh",
        "nodepools.karpenter.sh",
    ]
    versions = {n: [(v["name"], v["served"], v["storage"]) for v in c["spec"]["versions"]] for n, c in got.items()}
    assert versions["aksnodeclasses.karpenter.azure.com"] == [("v1alpha2", True, False), ("v1beta1", True, True)]
    assert versions["nodepools.karpenter.sh"] == [("v1", True, True)]
    assert versions["kwoknodeclasses.karpenter.kwok.sh"] == [("v1alpha1", True, True)]
    assert versions["nodeoverlays.karpenter.sh"] == [("v1alpha1", True, True)]
    assert versions["capacitybuffers.autoscaling.x-k8s.io"] == [("v1beta1", True, True)]
    short = {n: c["spec"]["names"].get("shortNames") for n, c in got.items()}
    assert short == {
        "aksnodeclasses.karpenter.azure.com": ["aksnc", "aksncs"],
        "capacitybuffers.autoscaling.x-k8s.io": ["cb"],
        "ec2nodeclasses.karpenter.k8s.aws": ["ec2nc", "ec2ncs"],
        "kwoknodeclasses.karpenter.kwok.sh": ["kwoknc", "kwokncs"],
        "nodeclaims.karpenter.sh": None,
        "nodeoverlays.karpenter.sh": ["overlays"],
        "nodepools.karpenter.sh": None,
    }
    for n, c in got.items():  # a CapacityBuffer lives in its pods' namespace, as upstream's
        assert c["spec"]["scope"] == ("Namespaced" if n.startswith("capacitybuffers.") else "Cluster")
        # upstream's CapacityBuffer CRD is in category autoscaling, the others in karpenter
        assert ("autoscaling" if n.startswith("capacitybuffers.") else "karpenter") in c["spec"]["names"]["categories"]
        for v in c["spec"]["versions"]:
            assert v["subresources"]["status"] == {}
    np_v1 = got["nodepools.karpenter.sh"]["spec"]["versions"][0]
    assert np_v1["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}


def test_printer_columns_follow_upstream():
    def cols(kind):
        v = C.crd(C.BY_KIND[kind])["spec"]["versions"][-1]
        return [(c["name"], c.get("priority", 0)) for c in v.get("additionalPrinterColumns", [])]

    assert cols("NodeClaim") == [
        ("Type", 0), ("Capacity", 0), ("Zone", 0), ("Node", 0), ("Ready", 0), ("Age", 0),
        ("ImageID", 1), ("ID", 1), ("NodePool", 1), ("NodeClass", 1), ("Drifted", 1),
    ]
    assert cols("NodePool") == [
        ("NodeClass", 0), ("Nodes", 0), ("Ready", 0), ("Age", 0), ("Weight", 1), ("CPU", 1), ("Memory", 1),
    ]
    assert cols("EC2NodeClass") == [("Ready", 0), ("Age", 0), ("Role", 1)]
    assert cols("AKSNodeClass") == [("Ready", 0), ("Age", 0), ("ImageFamily", 1)]


def test_crds_agree_with_the_api_registry():
    for k in C.KINDS:
        t = registry.BY_KIND[k.kind]
        assert (t.group, t.plural, t.namespaced) == (k.group, k.plural, k.namespaced)
        assert set(t.served_versions()) == set(k.versions)
        assert t.version == k.storage


def test_deploy_crds_are_up_to_date():
    """deploy/crds/ holds exactly what the generator writes (run scripts/gen_crds.py after a schema change)."""
    d = ROOT / "deploy" / "crds"
    want = C.files()
    have = {p.name: p.read_text() for p in d.glob("*.yaml")}
    assert sorted(have) == sorted(want)
    for name, text in want.items():
        assert have[name] == text, f"deploy/crds/{name} is out of date: run python scripts/gen_crds.py"
        (doc,) = yaml_docs(have[name])
        assert doc == next(c for c in C.crds() if C.BY_KIND[c["spec"]["names"]["kind"]].filename == name)


def test_gen_crds_check_mode(tmp_path):
    import runpy

    mod = runpy.run_path(str(ROOT / "scripts" / "gen_crds.py"), run_name="gen_crds")
    assert mod["main"](["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(C.files())
    assert mod["main"](["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "karpenter.sh_nodepools.yaml").write_text("stale")
    (tmp_path / "extra.yaml").write_text("x: 1")
    assert mod["main"](["--check", "--out", str(tmp_path)]) == 1
    assert mod["main"](["--out", str(tmp_path)]) == 0
    assert not (tmp_path / "extra.yaml").exists()
    assert mod["main"](["--check", "--out", str(tmp_path)]) == 0


def test_rule_without_cel_is_refused():
    bare = obj({"a": string(rules=[(lambda v: v != "", "a may not be empty")])})
    with pytest.raises(C.CRDError, match=r"\.a: rule 'a may not be empty' has no CEL text"):
        C.openapi(bare)
    ok = obj({"a": string(rules=[cel(lambda v: v != "", "a may not be empty", "self != ''")])})
    assert C.openapi(ok)["properties"]["a"]["x-kubernetes-validations"] == [
        {"message": "a may not be empty", "rule": "self != ''"}
    ]


def test_every_karpy_rule_is_published_with_its_cel():
    """Each Python rule of a CRD kind appears in the CRD, at the same field, with a CEL rule."""

    def walk(n: Node, path: str, out: list) -> None:
        for r in (*n.rules, *n.item_rules):
            out.append((path, r[1], rule_cel(r)))
        for k, sub in (n.props or {}).items():
            if not (path == "" and k == "metadata"):
                walk(sub, f"{path}.{k}", out)
        if n.additional is not None:
            walk(n.additional, f"{path}{{}}", out)
        if n.item is not None:
            walk(n.item, f"{path}[]", out)

    for k in C.KINDS:
        rules: list = []
        walk(k.schema, "", rules)
        assert rules or k.kind == "KWOKNodeClass"
        s = schema_of(k.kind)
        for path, message, text in rules:
            assert text, (k.kind, path, message)
            published = at(s, path).get("x-kubernetes-validations", [])
            assert {"message": message, "rule": text} in published, (k.kind, path, message)


def test_transition_rules_are_published():
    np_spec = schema_of("NodePool")["properties"]["spec"]
    assert {
        "message": "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        "rule": "has(self.replicas) == has(oldSelf.replicas)",
    } in np_spec["x-kubernetes-validations"]
    ref = np_spec["properties"]["template"]["properties"]["spec"]["properties"]["nodeClassRef"]
    assert [v["rule"] for v in ref["x-kubernetes-validations"]] == ["self.group == oldSelf.group", "self.kind == oldSelf.kind"]
    nc_spec = schema_of("NodeClaim")["properties"]["spec"]
    assert {"message": "spec is immutable", "rule": "self == oldSelf"} in nc_spec["x-kubernetes-validations"]
    nc_ref = nc_spec["properties"]["nodeClassRef"]
    assert "x-kubernetes-validations" not in nc_ref


# --- structural -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_schema_is_structural(kind):
    """The API server's structural-schema rules, as far as a schema alone shows them."""
    c = C.crd(C.BY_KIND[kind])
    for version in c["spec"]["versions"]:
        s = version["schema"]["openAPIV3Schema"]
        assert s["type"] == "object"
        assert s["properties"]["metadata"] == {"type": "object"}
        for path, n in nodes(s):
            where = f"{kind} {version['name']} {path or '<root>'}"
            assert (
                n.get("type")
                or n.get("x-kubernetes-int-or-string")
                or n.get("x-kubernetes-preserve-unknown-fields")
            ), f"{where}: no type"
            if n.get("x-kubernetes-int-or-string"):
                assert n["anyOf"] == [{"type": "integer"}, {"type": "string"}], where
                assert "type" not in n, where
            assert not ("properties" in n and "additionalProperties" in n), where
            if n.get("type") == "array":
                assert isinstance(n.get("items"), dict), f"{where}: array without items"
            if n.get("type") != "object":
                assert "properties" not in n and "additionalProperties" not in n, where
            for forbidden in ("oneOf", "allOf", "not", "$ref", "definitions", "additionalItems", "uniqueItems"):
                assert forbidden not in n, f"{where}: {forbidden}"
            if "anyOf" in n:
                assert n.get("x-kubernetes-int-or-string"), f"{where}: anyOf only for int-or-string"
            if n.get("x-kubernetes-list-type") == "map":
                item = n["items"]
                for key in n["x-kubernetes-list-map-keys"]:
                    assert key in item.get("required", []) or "default" in item["properties"][key], where
            if n.get("x-kubernetes-list-type") == "set":
                assert n["items"].get("type") in ("string", "integer", "number", "boolean"), where
            if "default" in n:
                # a default must itself be valid, and survive pruning
                jsonschema.Draft7Validator(strict(n)).validate(n["default"])
            for v in n.get("x-kubernetes-validations", []):
                assert set(v) == {"rule", "message"} and v["rule"] and v["message"], where


def test_case_insensitive_pattern_is_marked():
    p = schema_of("AKSNodeClass")["properties"]["spec"]["properties"]["vnetSubnetID"]["pattern"]
    assert p.startswith("(?i)^")


def test_quantities_are_int_or_string_with_the_api_servers_pattern():
    limits = schema_of("NodePool")["properties"]["spec"]["properties"]["limits"]
    assert limits["type"] == "object"
    q = limits["additionalProperties"]
    assert q["x-kubernetes-int-or-string"] is True and q["pattern"].startswith("^(\\+|-)?")


# --- what the schema admits agrees with karpy -------------------------------------------------


def _ids(cases):
    return [c[0] for c in cases]


EXAMPLES = example_manifests()
SEED_CRS = seed_manifests()


def test_examples_and_seeds_have_crs():
    kinds = {d["kind"] for _, d in EXAMPLES}
    assert {"NodePool", "AKSNodeClass", "EC2NodeClass", "KWOKNodeClass"} <= kinds
    if SEEDS.is_dir():
        assert {d["kind"] for _, d in SEED_CRS} >= {"NodePool", "AKSNodeClass"}


@pytest.mark.parametrize("where,manifest", EXAMPLES + SEED_CRS, ids=_ids(EXAMPLES + SEED_CRS))
def test_valid_manifests_pass_the_crd_schema(where, manifest):
    version = manifest["apiVersion"].split("/")[1]
    assert karpy_errors(manifest) == [], where
    assert schema_errors(manifest["kind"], manifest, version) == [], where


NODEPOOL = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {
        "template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "taints": [{"key": "dedicated", "effect": "NoSchedule"}],
            },
        },
        "disruption": {"budgets": [{"nodes": "10%"}]},
        "limits": {"cpu": "100"},
    },
}
NODECLAIM = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": "default-abcde"},
    "spec": {
        "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
        "resources": {"requests": {"cpu": "1"}},
    },
}
AKS = {
    "apiVersion": "karpenter.azure.com/v1beta1",
    "kind": "AKSNodeClass",
    "metadata": {"name": "default"},
    "spec": {"imageFamily": "Ubuntu2204", "osDiskSizeGB": 100},
}
EC2 = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
    },
}
KWOK = {
    "apiVersion": "karpenter.kwok.sh/v1alpha1",
    "kind": "KWOKNodeClass",
    "metadata": {"name": "default"},
    "spec": {"nodeRegistrationDelay": "10s"},
}
BASES = {"NodePool": NODEPOOL, "NodeClaim": NODECLAIM, "AKSNodeClass": AKS, "EC2NodeClass": EC2, "KWOKNodeClass": KWOK}


def _set(d: dict, path: str, value: Any) -> dict:
    d = copy.deepcopy(d)
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    cur: Any = d
    for p in parts[:-1]:
        cur = cur[int(p[1:-1])] if p.startswith("[") else cur.setdefault(p, {})
    last = parts[-1]
    if value is _DELETE:
        del cur[last]
    elif last.startswith("["):
        cur[int(last[1:-1])] = value
    else:
        cur[last] = value
    return d


_DELETE = object()


@pytest.mark.parametrize("kind", sorted(BASES))
def test_base_manifests_are_valid(kind):
    assert karpy_errors(BASES[kind]) == []
    assert schema_errors(kind, BASES[kind]) == []


# (kind, field, bad value): karpy and the CRD schema both refuse it, at that field
SCHEMA_BAD = [
    ("NodePool", "spec.disruption.consolidationPolicy", "Sometimes"),
    ("NodePool", "spec.disruption.consolidateAfter", "1d"),
    ("NodePool", "spec.disruption.budgets[0].nodes", "110%"),
    ("NodePool", "spec.disruption.budgets[0].reasons", ["Bored"]),
    ("NodePool", "spec.weight", 0),
    ("NodePool", "spec.weight", 101),
    ("NodePool", "spec.weight", "1"),
    ("NodePool", "spec.limits.cpu", "lots"),
    ("NodePool", "spec.limits.cpu", True),
    ("NodePool", "spec.replicas", -1),
    ("NodePool", "spec.template", _DELETE),
    ("NodePool", "spec.template.spec.requirements", _DELETE),
    ("NodePool", "spec.template.spec.nodeClassRef.name", _DELETE),
    ("NodePool", "spec.template.spec.nodeClassRef.group", "a/b"),
    ("NodePool", "spec.template.spec.requirements[0].operator", "Like"),
    ("NodePool", "spec.template.spec.requirements[0].minValues", 51),
    ("NodePool", "spec.template.spec.requirements[0].key", "-bad-"),
    ("NodePool", "spec.template.spec.requirements", [{"key": "a", "operator": "Exists"}] * 101),
    ("NodePool", "spec.template.spec.taints[0].effect", "Bogus"),
    ("NodePool", "spec.template.spec.taints[0].key", ""),
    ("NodePool", "spec.template.spec.expireAfter", "30d"),
    ("NodePool", "spec.template.spec.terminationGracePeriod", "Never"),
    ("NodePool", "spec.template.metadata.labels.team", "x" * 64),
    ("NodePool", "spec.template.metadata.labels.team", "-a"),
    ("NodePool", "spec.template.spec.colour", "blue"),
    ("NodePool", "spec.unknown", 1),
    ("NodeClaim", "spec.requirements", _DELETE),
    ("NodeClaim", "spec.resources.requests.cpu", "one"),
    ("NodeClaim", "spec.expireAfter", "soon"),
    ("AKSNodeClass", "spec.imageFamily", "Windows"),
    ("AKSNodeClass", "spec.osDiskSizeGB", 10),
    ("AKSNodeClass", "spec.osDiskSizeGB", 4096),
    ("AKSNodeClass", "spec.maxPods", 5),
    ("AKSNodeClass", "spec.vnetSubnetID", "/not/a/subnet"),
    ("AKSNodeClass", "spec.kubelet.cpuManagerPolicy", "dynamic"),
    ("AKSNodeClass", "spec.linuxOSConfig.sysctls.vmSwappiness", 101),
    ("AKSNodeClass", "spec.tags", {"a": 1}),
    ("EC2NodeClass", "spec.amiSelectorTerms", _DELETE),
    ("EC2NodeClass", "spec.amiSelectorTerms", []),
    ("EC2NodeClass", "spec.amiFamily", "Ubuntu"),
    ("EC2NodeClass", "spec.metadataOptions", {"httpTokens": "maybe"}),
    ("EC2NodeClass", "spec.metadataOptions", {"httpPutResponseHopLimit": 65}),
    ("EC2NodeClass", "spec.blockDeviceMappings", [{"ebs": {"volumeSize": "100", "volumeType": "gp9"}}]),
    ("EC2NodeClass", "spec.subnetSelectorTerms[0].id", "vpc-123"),
    ("EC2NodeClass", "spec.ipPrefixCount", -1),
    ("KWOKNodeClass", "spec.nodeRegistrationDelay", "soon"),
    ("KWOKNodeClass", "spec.nodeRegistrationDelay", 10),
]


@pytest.mark.parametrize("kind,field,value", SCHEMA_BAD, ids=[f"{k}:{f}" for k, f, _ in SCHEMA_BAD])
def test_known_bad_fails_on_the_field_karpy_names(kind, field, value):
    bad = _set(BASES[kind], field, value)
    k_paths = [p for p, _ in karpy_errors(bad)]
    s_paths = [p for p, _ in schema_errors(kind, bad)]
    assert k_paths, f"karpy accepts {field}={value!r}"
    assert s_paths, f"the CRD schema accepts {field}={value!r}"

    def near(p: str) -> bool:
        # the error is at the field or under it (a list or map item)
        return p == field or p.startswith(field + ".") or p.startswith(field + "[")

    assert any(near(p) for p in k_paths), (field, k_paths)
    assert any(near(p) for p in s_paths), (field, s_paths)
    # every field the schema names, karpy names too
    assert set(s_paths) <= set(k_paths) | {field}, (s_paths, k_paths)


def test_case_insensitive_subnet_id_passes_both():
    sid = "/SUBSCRIPTIONS/0000/RESOURCEGROUPS/rg/providers/microsoft.network/virtualNetworks/v/subnets/s"
    good = _set(AKS, "spec.vnetSubnetID", sid)
    assert karpy_errors(good) == []
    assert schema_errors("AKSNodeClass", good) == []


# (kind, field, value, schema path, message): a CEL rule refuses it; karpy reports the message at
# (or under) the field, and the CRD carries a rule with that message at that schema node
CEL_BAD = [
    ("NodePool", "spec.disruption.budgets", [{"nodes": "1", "schedule": "@daily"}], ".spec.disruption.budgets",
     "'schedule' must be set with 'duration'"),
    ("NodePool", "spec.template.spec.requirements[0].values", [], ".spec.template.spec.requirements",
     "requirements with operator 'In' must have a value defined"),
    ("NodePool", "spec.template.spec.requirements[0]", {"key": "a", "operator": "Gt", "values": ["x"]},
     ".spec.template.spec.requirements",
     "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    ("NodePool", "spec.template.spec.requirements[0].minValues", 2, ".spec.template.spec.requirements",
     "requirements with 'minValues' must have at least that many values specified in the 'values' field"),
    ("NodePool", "spec.template.spec.requirements[0].key", "karpenter.sh/foo", ".spec.template.spec.requirements[].key",
     'label domain "karpenter.sh" is restricted'),
    ("NodePool", "spec.template.spec.requirements[0].key", "karpenter.sh/nodepool",
     ".spec.template.spec.requirements[].key", 'label "karpenter.sh/nodepool" is restricted'),
    ("NodePool", "spec.template.metadata.labels", {"kubernetes.io/hostname": "a"}, ".spec.template.metadata.labels",
     'label "kubernetes.io/hostname" is restricted'),
    ("NodePool", "spec.template.spec.nodeClassRef.kind", "", ".spec.template.spec.nodeClassRef.kind",
     "kind may not be empty"),
    ("NodePool", "spec.replicas", 2, ".spec", "only 'limits.nodes' is supported on static NodePools"),
    ("AKSNodeClass", "spec.kubelet", {"imageGCHighThresholdPercent": 10, "imageGCLowThresholdPercent": 20},
     ".spec.kubelet", "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"),
    ("AKSNodeClass", "spec.fipsMode", "FIPS", ".spec", "TrustedLaunch is required for FIPS support with Ubuntu2204"),
    ("AKSNodeClass", "spec.tags", {"a<b": "c"}, ".spec.tags", "tags keys must not contain '<', '>', '%', '&', or '?'"),
    ("EC2NodeClass", "spec.role", "", ".spec.role", "role cannot be empty"),
    ("EC2NodeClass", "spec.instanceProfile", "p", ".spec", "must specify exactly one of ['role', 'instanceProfile']"),
    ("EC2NodeClass", "spec.amiSelectorTerms", [{"alias": "ubuntu@latest"}], ".spec.amiSelectorTerms[].alias",
     "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', "
     "'windows2022', 'windows2025'"),
    ("EC2NodeClass", "spec.tags", {"eks:eks-cluster-name": "x"}, ".spec.tags",
     "tag contains a restricted tag matching eks:eks-cluster-name"),
    ("EC2NodeClass", "spec.subnetSelectorTerms", [{"id": "subnet-1", "tags": {"a": "b"}}], ".spec.subnetSelectorTerms",
     "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"),
]


@pytest.mark.parametrize("kind,field,value,schema_path,message", CEL_BAD, ids=[c[4][:60] for c in CEL_BAD])
def test_known_bad_cel_rule_is_published_where_karpy_reports_it(kind, field, value, schema_path, message):
    bad = _set(BASES[kind], field, value)
    errs = karpy_errors(bad)
    field_path = schema_path.lstrip(".").replace("[]", "")

    def near(p: str) -> bool:
        base = re.sub(r"\[\d+\]", "", p)
        return base == field_path or base.startswith(field_path + ".") or base.startswith(field_path + "[")

    assert any(message in m and near(p) for p, m in errs), errs
    published = at(schema_of(kind), schema_path).get("x-kubernetes-validations", [])
    assert message in [v["message"] for v in published]


# --- status ---------------------------------------------------------------------------------


def test_status_schemas_type_upstreams_fields_and_keep_the_rest():
    np_status = schema_of("NodePool")["properties"]["status"]
    assert np_status["x-kubernetes-preserve-unknown-fields"] is True
    assert np_status["properties"]["nodes"]["type"] == "integer"
    conds = np_status["properties"]["conditions"]
    assert conds["x-kubernetes-list-type"] == "map" and conds["x-kubernetes-list-map-keys"] == ["type"]
    nc_status = schema_of("NodeClaim")["properties"]["status"]
    assert set(nc_status["properties"]) >= {"nodeName", "providerID", "imageID", "capacity", "allocatable", "conditions"}
    status = {
        "nodeName": "n",
        "providerID": "kwok://n",
        "capacity": {"cpu": "4", "memory": "16Gi", "pods": 110},
        "conditions": [{"type": "Launched", "status": "True", "reason": "Launched",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "karpyExtra": {"kept": True},
    }
    assert schema_errors("NodeClaim", {**NODECLAIM, "status": status}) == []
    kwok_status = schema_of("KWOKNodeClass")["properties"]["status"]
    assert kwok_status["default"]["conditions"][0]["type"] == "Ready"


def test_status_nodes_are_the_api_modules_own():
    assert C.BY_KIND["NodePool"].status is nodepool.NODEPOOL_STATUS
    assert C.BY_KIND["KWOKNodeClass"].status is nodeclass.KWOK_NODE_CLASS_STATUS


def test_the_api_servers_kind_table_agrees_with_the_crds():
    """Discovery (karpy/kube/registry.py, served by karpy sandbox) names the CRDs as the generated CRDs do:
    plural, scope, short names, categories, served versions, subresources."""
    from karpy.api.crds import crds
    from karpy.kube.registry import BY_KIND

    for crd in crds():
        names, spec = crd["spec"]["names"], crd["spec"]
        t = BY_KIND[names["kind"]]
        assert t.group == spec["group"] and t.plural == names["plural"], names["kind"]
        assert t.namespaced == (spec["scope"] == "Namespaced"), names["kind"]
        assert tuple(names.get("shortNames") or ()) == t.short_names, names["kind"]
        assert tuple(names.get("categories") or ()) == t.categories, names["kind"]
        assert set(v["name"] for v in spec["versions"]) == set(t.served_versions()), names["kind"]
        subs = {k for v in spec["versions"] for k in (v.get("subresources") or {})}
        assert subs == set(t.subresources), names["kind"]
