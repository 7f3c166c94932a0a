"""`karpy simulate` input robustness: every input runs (exit 0) or is refused (exit 2) with a
message naming the file, the document (index and Kind/name) and the field -- never a traceback.

The first part has one example-based test (or a few) per problem a hostile-user run found:
negative NodePool limits, quantities outside int64, RFC 3339 times, non-UTF-8 standard input,
duplicate objects, an empty region. The second part fuzzes the loader and the CLI with
hypothesis (derandomized, so CI sees the same examples every run).
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import karpy.api.schema as schema
from karpy.api import ACCEPTED_KINDS, load_documents, load_text, validate_object
from karpy.cli import main
from karpy.errors import FieldError
from karpy.resources import DurationRangeError, parse_duration, parse_quantity, to_units
from karpy.timeutil import MAX_TIME, MIN_TIME, format_rfc3339, is_rfc3339, normalize_rfc3339, parse_rfc3339

# --- helpers ------------------------------------------------------------------------

KWOK_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
NODECLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}}


def nodepool(name="default", limits=None, **spec) -> dict:
    np = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "disruption": {"consolidateAfter": "Never"},
            "template": {
                "spec": {
                    "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}],
                    "nodeClassRef": dict(KWOK_REF),
                }
            },
            **spec,
        },
    }
    if limits is not None:
        np["spec"]["limits"] = limits
    return np


def container(cpu="100m", memory="64Mi", **res) -> dict:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "image": "i", "resources": {"requests": requests, **res}}


def pod(name="p", namespace=None, **c) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container(**c)]}}


def deployment(name="web", replicas=1, namespace=None, **c) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container(**c)]}},
        },
    }


def scenario(name="s", **spec) -> dict:
    return {"apiVersion": "karpy.dev/v1alpha1", "kind": "Scenario", "metadata": {"name": name}, "spec": spec}


def dump(docs) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def load(docs, file="in.yaml"):
    return load_text(dump(docs), file=file)


def only_error(result) -> FieldError:
    assert len(result.errors) == 1, [str(e) for e in result.errors]
    return result.errors[0]


def invoke(args, input=None):
    return CliRunner().invoke(main, ["simulate", *args], input=input)


def assert_exit_2(r, *fragments):
    assert r.exit_code == 2, f"exit {r.exit_code}\nstderr: {r.stderr}\nexception: {r.exception!r}"
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in r.stderr, f"{f!r} not in {r.stderr!r}"


def simulate_ok(tmp_path, docs, *args) -> dict:
    path = tmp_path / "in.yaml"
    path.write_text(dump(docs))
    r = invoke([str(path), "-o", "json", *args])
    assert r.exit_code == 0, f"exit {r.exit_code}\nstderr: {r.stderr}\nexception: {r.exception!r}"
    return json.loads(r.stdout)


# =====================================================================================
# 1. negative NodePool limits
# =====================================================================================


@pytest.mark.parametrize("value", ["-1", -1, "-100m", "-0.5", "-1e3"])
def test_negative_nodepool_limit_is_refused_at_load(value):
    e = only_error(load([NODECLASS, nodepool(limits={"cpu": "10", "memory": value})]))
    assert (e.file, e.index, e.kind, e.name, e.field) == ("in.yaml", 1, "NodePool", "default", "spec.limits.memory")
    assert e.message == f"Invalid value: {json.dumps(value)}: must be greater than or equal to 0"
    assert str(e).startswith("in.yaml: document 1 (NodePool/default): spec.limits.memory: Invalid value: ")


def test_zero_and_positive_limits_and_extended_resource_limits_still_load():
    r = load([NODECLASS, nodepool(limits={"cpu": "0", "memory": "-0", "nvidia.com/gpu": 2, "nodes": "+3"})])
    assert r.errors == []


def test_negative_limit_through_the_cli(tmp_path):
    path = tmp_path / "np.yaml"
    path.write_text(dump([NODECLASS, nodepool(limits={"cpu": "-1"})]))
    assert_exit_2(invoke([str(path)]), "np.yaml: document 1 (NodePool/default): spec.limits.cpu: Invalid value: \"-1\"")


def test_validate_object_refuses_a_patch_to_a_negative_limit():
    doc = only_document(load([NODECLASS, nodepool(limits={"cpu": "10"})]), "NodePool")
    patched = copy.deepcopy(doc.obj)
    patched["spec"]["limits"] = {"cpu": "-1"}
    got, errors = validate_object(patched, file="Scenario patch", old=doc.obj)
    assert got is None
    assert [(e.field, e.message) for e in errors] == [
        ("spec.limits.cpu", 'Invalid value: "-1": must be greater than or equal to 0')
    ]


def only_document(result, kind):
    assert result.errors == [], [str(e) for e in result.errors]
    docs = result.of_kind(kind)
    assert len(docs) == 1
    return docs[0]


def test_scenario_patch_to_a_negative_limit_is_rejected_not_a_crash(tmp_path):
    docs = [
        NODECLASS,
        nodepool(limits={"cpu": "10"}),
        pod(cpu="1"),
        scenario(steps=[{"patch": {"kind": "NodePool", "name": "default", "merge": {"spec": {"limits": {"cpu": "-1"}}}}},
                        {"advance": "1m"}]),
    ]
    out = simulate_ok(tmp_path, docs)
    rejected = [i for i in out["items"] if i["kind"] == "Event" and i.get("reason") == "PatchRejected"]
    assert rejected and "spec.limits.cpu" in rejected[0]["message"]


@pytest.mark.parametrize(
    "obj, fragment",
    [
        (None, "must be a map"),
        ("text", "must be a map"),
        ([1, 2], "must be a map"),
        ({"kind": "NodePool"}, "apiVersion"),
        ({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": float("nan")}, "NaN"),
        ({"apiVersion": "v1", "kind": "PodList", "items": [pod()]}, "unknown kind"),
        ({1: object()}, ""),
    ],
)
def test_validate_object_never_raises(obj, fragment):
    got, errors = validate_object(obj, file="Scenario patch", old={"kind": "NodePool", "metadata": {"name": "x"}})
    assert got is None and errors
    assert all(isinstance(e, FieldError) for e in errors)
    assert any(fragment in str(e) for e in errors), [str(e) for e in errors]


def test_validate_object_refuses_changing_kind_name_or_namespace():
    doc = only_document(load([deployment(namespace="ns")]), "Deployment")
    for path, value, field in (
        (("metadata", "name"), "other", "metadata.name"),
        (("metadata", "namespace"), "elsewhere", "metadata.namespace"),
        (("kind",), "ReplicaSet", "kind"),
    ):
        patched = copy.deepcopy(doc.obj)
        patched.pop("status", None)
        if value == "ReplicaSet":
            for f in ("strategy", "revisionHistoryLimit", "progressDeadlineSeconds"):
                del patched["spec"][f]
        cur = patched
        for k in path[:-1]:
            cur = cur[k]
        cur[path[-1]] = value
        got, errors = validate_object(patched, old=doc.obj)
        assert got is None
        assert [(e.field, e.message) for e in errors] == [(field, f'Invalid value: "{value}": field is immutable')]
    got, errors = validate_object(copy.deepcopy(doc.obj), old=doc.obj)
    assert errors == [] and got is not None


# =====================================================================================
# 2. quantities must fit in an int64 of karpy's unit
# =====================================================================================

TOO_BIG = "9223372036854775808"  # 2^63
BIGGEST = "9223372036854775807"  # 2^63 - 1


@pytest.mark.parametrize(
    "resource, value, ok",
    [
        ("memory", BIGGEST, True),
        ("memory", TOO_BIG, False),
        ("memory", "8Ei", False),
        ("memory", "7Ei", True),
        ("memory", "9.3e18", False),
        ("memory", "1e999999999", False),
        ("memory", "99999999999999999999999999999999999999999999999999", False),
        ("memory", 2**63, False),
        ("memory", 2**63 - 1, True),
        ("cpu", "9223372036854775807m", True),
        ("cpu", "9223372036854775808m", False),
        ("cpu", "9223372036854775.807", True),
        ("cpu", "9223372036854776", False),
        ("cpu", BIGGEST, False),  # in millicores, 1000 times too many
        ("nvidia.com/gpu", BIGGEST, True),
        ("nvidia.com/gpu", TOO_BIG, False),
        ("ephemeral-storage", "8Ei", False),
        ("hugepages-2Mi", "8Ei", False),
    ],
)
def test_container_quantities_are_bounded_by_int64(resource, value, ok):
    c = container(cpu=None, memory=None)
    c["resources"] = {"requests": {resource: value}, "limits": {resource: value}}
    d = deployment()
    d["spec"]["template"]["spec"]["containers"] = [c]
    r = load([d])
    if ok:
        assert r.errors == [], [str(e) for e in r.errors]
        return
    fields = sorted(e.field for e in r.errors)
    base = "spec.template.spec.containers[0].resources"
    assert fields == [schema.child(f"{base}.limits", resource), schema.child(f"{base}.requests", resource)], [
        str(e) for e in r.errors
    ]
    for e in r.errors:
        assert e.message.startswith(f"Invalid value: {json.dumps(value)}: must be less than 2^63 ")
        assert (e.file, e.index, e.kind, e.name) == ("in.yaml", 0, "Deployment", "web")


def test_int64_message_names_the_unit():
    e = only_error(load([pod(memory=TOO_BIG)]))
    assert e.field == "spec.containers[0].resources.requests.memory"
    assert e.message == (
        f'Invalid value: "{TOO_BIG}": must be less than 2^63 bytes (8Ei): Kubernetes quantities are 64-bit integers'
    )
    e = only_error(load([pod(cpu="9223372036854776")]))
    assert e.message.endswith("must be less than 2^63 millicores (9223372036854775808m): Kubernetes quantities are 64-bit integers")


@pytest.mark.parametrize(
    "docs, field",
    [
        ([NODECLASS, nodepool(limits={"cpu": BIGGEST})], "spec.limits.cpu"),
        ([NODECLASS, nodepool(limits={"memory": "8Ei"})], "spec.limits.memory"),
        (
            [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
              "status": {"capacity": {"memory": "8Ei"}, "allocatable": {"memory": "1Gi"}}}],
            "status.capacity.memory",
        ),
        (
            [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
              "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": BIGGEST}}}],
            "status.allocatable.cpu",
        ),
        (
            [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "rc"}, "handler": "h",
              "overhead": {"podFixed": {"memory": TOO_BIG}}}],
            "overhead.podFixed.memory",
        ),
        (
            [{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"},
              "spec": {"selector": {"matchLabels": {"a": "b"}},
                       "template": {"metadata": {"labels": {"a": "b"}},
                                    "spec": {"containers": [container(memory=TOO_BIG)]}}}}],
            "spec.template.spec.containers[0].resources.requests.memory",
        ),
        (
            [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
              "spec": {"containers": [container()], "overhead": {"cpu": BIGGEST}}}],
            "spec.overhead.cpu",
        ),
        (
            [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
              "spec": {"containers": [container()], "resources": {"requests": {"memory": "1Gi"},
                                                                  "limits": {"memory": TOO_BIG}}}}],
            "spec.resources.limits.memory",
        ),
        (
            [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
              "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "8Ei"}}}}],
            "spec.resources.requests.storage",
        ),
        (
            [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
              "spec": {"nodeClassRef": KWOK_REF, "requirements": [], "resources": {"requests": {"pods": TOO_BIG}}}}],
            "spec.resources.requests.pods",
        ),
    ],
)
def test_every_quantity_the_loader_reads_is_bounded(docs, field):
    r = load(docs)
    assert [e.field for e in r.errors] == [field], [str(e) for e in r.errors]
    assert "must be less than 2^63" in r.errors[0].message


def test_ec2_kubelet_quantities_are_bounded():
    nc = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            "kubelet": {"kubeReserved": {"memory": "8Ei", "cpu": "1"}, "evictionHard": {"memory.available": TOO_BIG}},
        },
    }
    r = load([nc])
    assert sorted(e.field for e in r.errors) == [
        "spec.kubelet.evictionHard[memory.available]",
        "spec.kubelet.kubeReserved[memory]",
    ], [str(e) for e in r.errors]


def test_quantities_the_crd_pattern_allows_but_no_parser_does_are_refused():
    # "1e1.5" matches the CRD's pattern, but resource.ParseQuantity (and karpy) cannot read it
    e = only_error(load([NODECLASS, nodepool(limits={"cpu": "1e1.5"})]))
    assert e.field == "spec.limits.cpu" and "quantities must match the regular expression" in e.message


def test_huge_exponents_are_fast_and_exactness_is_kept_where_it_matters():
    import time

    t = time.perf_counter()
    for v in ("1e999999999", "1e-999999999", "1e" + "9" * 5000, "0." + "0" * 3000 + "1e3001", "9" * 6000):
        try:
            to_units("memory", v)
        except ValueError:
            pass
    assert time.perf_counter() - t < 1
    assert parse_quantity("0." + "0" * 3000 + "1e3001") == 1
    assert to_units("memory", "1e-999999999") == 1  # rounded up, as the API server rounds
    assert to_units("cpu", "1.5") == 1500 and to_units("memory", "1.5Gi") == 3 * 2**29


def test_enormous_values_through_the_cli(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(dump([NODECLASS, nodepool(limits={"cpu": BIGGEST}), pod(memory="100Ei")]))
    assert_exit_2(invoke([str(path)]), "big.yaml: document 1 (NodePool/default): spec.limits.cpu",
                  "big.yaml: document 2 (Pod/p): spec.containers[0].resources.requests.memory")


def test_the_largest_quantities_still_run(tmp_path):
    docs = [NODECLASS, nodepool(limits={"cpu": "9223372036854775807m", "memory": BIGGEST}), pod(cpu="1")]
    out = simulate_ok(tmp_path, docs)
    assert out["items"][-1]["status"]["pods"]["bound"] == 1
    docs = [NODECLASS, nodepool(), pod(memory=BIGGEST)]
    out = simulate_ok(tmp_path, docs)
    assert out["items"][-1]["status"]["pods"]["pending"] == 1


# --- durations: Go's time.Duration range -------------------------------------------------


@pytest.mark.parametrize(
    "text, ok",
    [
        ("2562047h47m16.854775807s", True),
        ("2562047h47m16.854775808s", False),
        ("-2562047h47m16.854775808s", True),
        ("-2562047h47m16.854775809s", False),
        ("9" * 400 + "h", False),
        ("0.000000001ns", True),
    ],
)
def test_durations_are_bounded_as_go_bounds_them(text, ok):
    if ok:
        parse_duration(text)
    else:
        with pytest.raises(DurationRangeError):
            parse_duration(text)


@pytest.mark.parametrize(
    "docs, field",
    [
        ([NODECLASS, nodepool(disruption={"consolidateAfter": "9" * 400 + "h"})], "spec.disruption.consolidateAfter"),
        ([NODECLASS, nodepool(disruption={"budgets": [{"nodes": "1", "schedule": "@daily", "duration": "9999999999h"}]})],
         "spec.disruption.budgets[0].duration"),
        ([{**NODECLASS, "spec": {"nodeRegistrationDelay": "99999999999s"}}], "spec.nodeRegistrationDelay"),
        ([scenario(steps=[{"advance": "9999999999h"}])], "spec.steps[0].advance"),
        ([scenario(settings={"batchIdleDuration": "9999999999h"})], "spec.settings.batchIdleDuration"),
    ],
)
def test_durations_out_of_go_range_are_refused_at_the_field(docs, field):
    r = load(docs)
    assert [e.field for e in r.errors] == [field], [str(e) for e in r.errors]
    assert "Go durations go from" in r.errors[0].message


def test_expire_after_out_of_range(tmp_path):
    np = nodepool()
    np["spec"]["template"]["spec"]["expireAfter"] = "3000000h"
    e = only_error(load([NODECLASS, np]))
    assert e.field == "spec.template.spec.expireAfter"
    np["spec"]["template"]["spec"]["expireAfter"] = "2562047h"
    assert load([NODECLASS, np]).errors == []


def test_until_out_of_range():
    assert_exit_2(invoke(["-", "--until", "9" * 50 + "h"], input=dump([pod()])), "--until", "out of range")


# =====================================================================================
# 3. Scenario times: every RFC 3339 date-time
# =====================================================================================

START = 1767225600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("2026-01-01T00:00:00Z", START),
        ("2026-01-01T00:00:00.5Z", START + 0.5),
        ("2026-01-01t00:00:00z", START),
        ("2026-01-01T02:00:00+02:00", START),
        ("2025-12-31T19:30:00-04:30", START),
        ("2026-01-01T00:00:00.123456789012Z", START + 0.123456789012),
        ("2026-01-01 00:00:00Z", START),
        ("1970-01-01T00:00:00Z", 0.0),
        ("1969-12-31T23:59:59.5Z", -0.5),
        ("2024-02-29T12:00:00Z", 1709208000.0),
        ("0001-01-01T00:00:00Z", MIN_TIME),
        ("9999-12-31T23:59:59Z", MAX_TIME),
        ("9999-12-31T23:59:59.999Z", MAX_TIME + 0.999),
    ],
)
def test_parse_rfc3339(text, seconds):
    assert parse_rfc3339(text) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-01",
        "2026-01-01T00:00:00",  # no offset
        "2026-01-01T00:00Z",
        "2026-1-01T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T00:60:00Z",
        "2026-01-01T23:59:60Z",  # a leap second: karpy's clock, like Go's, has none
        "2026-01-01T00:00:00+24:00",
        "2026-01-01T00:00:00+0200",
        "2026-01-01T00:00:00.Z",
        "２０２６-01-01T00:00:00Z",
        " 2026-01-01T00:00:00Z",
    ],
)
def test_not_rfc3339(text):
    assert not is_rfc3339(text)
    with pytest.raises(ValueError):
        parse_rfc3339(text)


def test_unrepresentable_instants():
    for text in ("0000-12-31T23:59:59Z", "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01"):
        assert is_rfc3339(text)  # the syntax is fine...
        with pytest.raises(ValueError, match="between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z"):
            parse_rfc3339(text)  # ...but karpy cannot name the instant


def test_format_and_normalize():
    assert format_rfc3339(START + 0.9) == "2026-01-01T00:00:00Z"
    assert format_rfc3339(MIN_TIME) == "0001-01-01T00:00:00Z"
    assert format_rfc3339(-0.5) == "1969-12-31T23:59:59Z"
    assert normalize_rfc3339("2026-01-01t02:00:00.75+02:00") == "2026-01-01T00:00:00Z"


@given(st.integers(int(MIN_TIME), int(MAX_TIME)))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_format_parse_round_trip(t):
    assert parse_rfc3339(format_rfc3339(t)) == t


@pytest.mark.parametrize(
    "start",
    ["2026-01-01T00:00:00.5Z", "2026-01-01t00:00:00z", "2026-01-01T02:00:00+02:00", "2026-01-01T00:00:00.999999999Z"],
)
def test_scenario_start_accepts_rfc3339_and_is_stored_in_utc(start, tmp_path):
    doc = only_document(load([scenario(start=start)]), "Scenario")
    assert doc.obj["spec"]["start"] == "2026-01-01T00:00:00Z"
    out = simulate_ok(tmp_path, [NODECLASS, nodepool(), pod(cpu="1"), scenario(start=start)])
    assert out["items"][-1]["status"]["start"] == "2026-01-01T00:00:00Z"


def test_scenario_start_near_the_end_of_time(tmp_path):
    doc = only_document(load([scenario(start="9999-12-31T23:00:00Z")]), "Scenario")
    assert doc.obj["spec"]["start"] == "9999-12-31T23:00:00Z"
    assert only_document(load([scenario(start="9999-12-31T23:59:59.9Z")]), "Scenario")
    out = simulate_ok(tmp_path, [NODECLASS, nodepool(), pod(cpu="1"), scenario(start="9999-12-31T23:00:00Z")])
    assert out["items"][-1]["status"]["start"] == "9999-12-31T23:00:00Z"


@pytest.mark.parametrize(
    "start, fragment",
    [
        ("9999-12-31T23:59:59-01:00", "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z in UTC"),
        ("0000-01-01T00:00:00Z", "must be between"),
        ("2026-01-01T23:59:60Z", "must be of type date-time"),
        ("yesterday", "must be of type date-time"),
    ],
)
def test_bad_scenario_start_is_a_field_error(start, fragment):
    e = only_error(load([scenario(start=start)]))
    assert (e.index, e.kind, e.name, e.field) == (0, "Scenario", "s", "spec.start")
    assert fragment in e.message


@pytest.mark.parametrize("field", ["creationTimestamp", "deletionTimestamp"])
def test_object_timestamps_must_be_rfc3339(field):
    p = pod()
    p["metadata"][field] = "last tuesday"
    e = only_error(load([p]))
    assert (e.field, e.message) == (
        f"metadata.{field}", 'Invalid value: "last tuesday": must be an RFC 3339 date-time such as "2026-01-01T00:00:00Z"'
    )
    p["metadata"][field] = "0000-06-01T00:00:00Z"
    assert "must be between 0001-01-01T00:00:00Z" in only_error(load([p])).message
    p["metadata"][field] = "2025-12-31t23:00:00.5-01:00"
    assert load([p]).errors == []
    d = deployment()
    d["spec"]["template"]["metadata"][field] = None  # as `kubectl create --dry-run -o yaml` writes it
    assert load([d]).errors == []


def test_taint_time_added_accepts_any_rfc3339():
    np = nodepool()
    np["spec"]["template"]["spec"]["taints"] = [
        {"key": "a", "effect": "NoSchedule", "timeAdded": "2026-01-01t00:00:00.5+01:00"}
    ]
    assert load([NODECLASS, np]).errors == []


# =====================================================================================
# 4. standard input is read as bytes
# =====================================================================================


def test_non_utf8_stdin_is_reported_as_for_a_file(tmp_path):
    data = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: caf\xe9}\n"
    r = CliRunner().invoke(main, ["simulate", "-"], input=data)
    assert_exit_2(r, "error: <stdin>: not a UTF-8 text file")
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    r = invoke([str(path)])
    assert_exit_2(r, f"error: {path}: not a UTF-8 text file")


def test_stdin_bytes_with_a_bom_and_utf8_text(tmp_path):
    data = "\ufeff" + dump([NODECLASS, nodepool(), pod(cpu="1")]).replace("name: p\n", "name: p\n  annotations: {note: café}\n")
    r = CliRunner().invoke(main, ["simulate", "-", "-o", "json"], input=data.encode("utf-8"))
    assert r.exit_code == 0, r.stderr


def test_load_documents_takes_stdin_as_bytes_or_text():
    text = dump([pod()])
    assert load_documents(["-"], stdin_text=text.encode()).errors == []
    assert load_documents(["-"], stdin_text=text).errors == []
    r = load_documents(["-"], stdin_text=b"\xff\xfe")
    assert [str(e) for e in r.errors] == ["<stdin>: not a UTF-8 text file"]
    r = load_documents(["-"], stdin_text="kind: \udce9")  # text read with surrogateescape
    assert [str(e) for e in r.errors] == ["<stdin>: not a UTF-8 text file"]


# =====================================================================================
# 5. duplicate objects
# =====================================================================================


def test_duplicate_in_one_file():
    r = load([deployment(), deployment(replicas=3)])
    e = only_error(r)
    assert str(e) == (
        'in.yaml: document 1 (Deployment/web): metadata.name: Duplicate value: "web": a Deployment of that name '
        'in namespace "default" was already given in in.yaml document 0'
    )
    assert [d.index for d in r.documents] == [0]  # the first one stays


def test_default_namespace_is_the_namespace_default():
    e = only_error(load([pod(), pod(namespace="default")]))
    assert e.index == 1 and e.field == "metadata.name"


def test_same_name_in_other_namespaces_or_kinds_is_fine():
    r = load([pod(), pod(namespace="other"), deployment(name="p"), {"apiVersion": "v1", "kind": "Namespace",
                                                                    "metadata": {"name": "p"}}])
    assert r.errors == []


def test_cluster_scoped_kinds_ignore_the_namespace():
    a = nodepool()
    b = nodepool()
    b["metadata"]["namespace"] = "elsewhere"
    e = only_error(load([NODECLASS, a, b]))
    assert e.message == 'Duplicate value: "default": a NodePool of that name was already given in in.yaml document 1'
    for kind_doc in (
        NODECLASS,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "x"}, "value": 1},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "x"}, "handler": "h"},
    ):
        r = load([kind_doc, kind_doc])
        assert [e.field for e in r.errors] == ["metadata.name"], [str(e) for e in r.errors]


def test_duplicates_across_files_and_directories(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.yaml").write_text(dump([deployment()]))
    (d / "b.yaml").write_text(dump([pod(), deployment()]))
    other = tmp_path / "other.yaml"
    other.write_text(dump([pod()]))
    r = load_documents([str(d), str(other)])
    assert sorted(str(e) for e in r.errors) == [
        f'{d / "b.yaml"}: document 1 (Deployment/web): metadata.name: Duplicate value: "web": a Deployment of that '
        f'name in namespace "default" was already given in {d / "a.yaml"} document 0',
        f'{other}: document 0 (Pod/p): metadata.name: Duplicate value: "p": a Pod of that name in namespace '
        f'"default" was already given in {d / "b.yaml"} document 0',
    ]
    assert_exit_2(invoke([str(d), str(other)]), "Duplicate value")


def test_a_file_named_twice_is_read_once(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.yaml").write_text(dump([deployment()]))
    r = load_documents([str(d), str(d / "a.yaml"), str(tmp_path / "dir" / ".." / "dir" / "a.yaml")])
    assert r.errors == [] and [x.name for x in r.documents] == ["web"]
    r = load_documents(["-", "-"], stdin_text=dump([pod()]))
    assert r.errors == [] and len(r.documents) == 1


def test_duplicates_inside_a_list():
    lst = {"apiVersion": "v1", "kind": "List", "items": [pod(), pod()]}
    e = only_error(load([lst]))
    assert e.field == "items[1].metadata.name"
    assert e.message.endswith("already given in in.yaml document 0 items[0]")


def test_scenario_apply_may_repeat_objects_but_not_within_one_step(tmp_path):
    ok = [NODECLASS, nodepool(), deployment(cpu="1"),
          scenario(steps=[{"apply": [deployment(replicas=2, cpu="1")]}, {"advance": "1m"},
                          {"apply": [deployment(replicas=3, cpu="1"), pod(cpu="1")]}])]
    assert load(ok).errors == []
    out = simulate_ok(tmp_path, ok)
    assert out["items"][-1]["status"]["pods"]["total"] == 4
    bad = [scenario(steps=[{"apply": [deployment(), pod(), deployment(namespace="default", replicas=2)]}])]
    e = only_error(load(bad))
    assert (e.kind, e.field) == ("Scenario", "spec.steps[0].apply[2].metadata.name")
    assert e.message == (
        'Duplicate value: "web": a Deployment of that name in namespace "default" was already given in '
        "spec.steps[0].apply[0] of the same step"
    )


def test_generate_name_objects_are_not_duplicates():
    a = pod()
    del a["metadata"]["name"]
    a["metadata"]["generateName"] = "p-"
    assert load([a, copy.deepcopy(a)]).errors == []


# =====================================================================================
# 6. empty region
# =====================================================================================


@pytest.mark.parametrize("region", ["", " "])
def test_empty_region_flag(region):
    r = invoke(["-", "--region", region], input=dump([NODECLASS, nodepool(), pod()]))
    assert_exit_2(r, f'--region: Invalid value: "{region}": must not be empty')


def test_empty_scenario_region():
    e = only_error(load([scenario(region="")]))
    assert (e.field, e.message) == ("spec.region", "Required value")


# =====================================================================================
# what the fuzzers found
# =====================================================================================


def _ec2(kubelet) -> dict:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
            "kubelet": kubelet,
        },
    }


@pytest.mark.parametrize("where", ["required", "preferred", "pv"])
def test_gt_lt_node_selector_values_must_be_integers(where):
    expr = {"key": "karpenter.kwok.sh/instance-cpu", "operator": "Gt", "values": ["abc"]}
    if where == "pv":
        doc = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv"},
               "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                        "csi": {"driver": "d", "volumeHandle": "h"},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}
        field = "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]"
    else:
        doc = pod()
        if where == "required":
            doc["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}
            field = ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                     ".matchExpressions[0].values[0]")
        else:
            doc["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [expr]}}]}}
            field = ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference"
                     ".matchExpressions[0].values[0]")
    e = only_error(load([doc]))
    assert (e.field, e.message) == (field, 'Invalid value: "abc": must be an integer for operator Gt')
    expr["values"] = ["-12"]
    assert load([doc]).errors == []
    expr["values"] = ["99999999999999999999999"]  # an integer, if not one a node label will ever reach
    assert load([doc]).errors == []


def test_ec2_kubelet_counts_are_int32():
    e = only_error(load([_ec2({"maxPods": 2**31})]))
    assert (e.field, e.message) == ("spec.kubelet.maxPods", "Invalid value: 2147483648: must be less than or equal to 2147483647")
    assert load([_ec2({"maxPods": 2**31 - 1, "podsPerCore": 2**31 - 1})]).errors == []


def test_ec2_node_overhead_must_fit_in_int64():
    e = only_error(load([_ec2({"kubeReserved": {"memory": BIGGEST}, "systemReserved": {"memory": "1"}})]))
    assert e.field == "spec.kubelet.systemReserved[memory]"
    assert "kubeReserved, systemReserved and evictionHard add up to 2^63 or more for memory" in e.message
    e = only_error(load([_ec2({"kubeReserved": {"memory": "4Ei"}, "evictionHard": {"memory.available": "4Ei"}})]))
    assert e.field == "spec.kubelet.evictionHard[memory.available]"
    assert load([_ec2({"kubeReserved": {"memory": "4Ei"}, "systemReserved": {"memory": "3Ei"},
                       "evictionHard": {"memory.available": "10%"}})]).errors == []


def test_a_pods_total_requests_must_fit_in_int64():
    half = str(2**62)
    p = pod(memory=half)
    p["spec"]["containers"].append({**container(memory=half), "name": "d"})
    e = only_error(load([p]))
    assert (e.field, e.kind) == ("spec", "Pod")
    assert e.message.startswith("Invalid value: 9223372036854775808: the pod's requests of memory")
    assert "must be less than 2^63 bytes (8Ei)" in e.message
    # an init container runs before the others: only the larger of the two counts
    p = pod(memory=BIGGEST)
    p["spec"]["initContainers"] = [{**container(memory=BIGGEST), "name": "init"}]
    assert load([p]).errors == []
    # a sidecar (restartPolicy Always) runs beside them: both count
    p["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    assert [e.field for e in load([p]).errors] == ["spec"]
    d = deployment(memory="1Gi")
    d["spec"]["template"]["spec"]["overhead"] = {"memory": BIGGEST}
    assert [e.field for e in load([d]).errors] == ["spec.template.spec"]


def test_second_scenario_error_names_a_field():
    r = load([scenario("one"), scenario("two")])
    e = only_error(r)
    assert (e.index, e.field) == (1, "kind") and "at most one Scenario" in e.message


# =====================================================================================
# 7. fuzzing
# =====================================================================================

# Errors that concern a whole document rather than a field of it (the loader's own).
_DOCUMENT_LEVEL = ("too large", "nested too deeply")

_KINDS = [(av, k) for av, k in ACCEPTED_KINDS]


def _huge_int():
    return st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30, -1, 0])


def _quantities():
    numbers = st.one_of(
        st.integers(-(2**70), 2**70),
        st.sampled_from(["0", "1", "-1", "9223372036854775807", "9223372036854775808", "1e18", "1e19"]),
    )
    suffixes = st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ei", "E", "n", "u", "e3", "e-3", "e999999",
                                "e-999999", "i", "mm", "e1.5", " "])
    return st.one_of(
        st.builds(lambda n, s: f"{n}{s}", numbers, suffixes),
        st.builds(lambda a, b, s: f"{a}.{b}{s}", st.integers(0, 10**20), st.integers(0, 10**6), suffixes),
        st.sampled_from(["", ".", "-", "+", "1.2.3", "0x10", "١", "1 Gi", "NaN", "Infinity", "1e", "e3"]),
        _huge_int(),
        st.floats(allow_nan=False, allow_infinity=False),
    )


def _durations():
    units = st.sampled_from(["ns", "us", "µs", "ms", "s", "m", "h", "d", "", "hh"])
    return st.one_of(
        st.builds(lambda n, u: f"{n}{u}", st.integers(-(10**25), 10**25), units),
        st.builds(lambda a, b, u1, u2: f"{a}{u1}{b}{u2}", st.integers(0, 10**6), st.integers(0, 10**6), units, units),
        st.sampled_from(["Never", "", "0", "-0", "1.5h", ".5s", "5.s", "1h-1m", "2562047h47m16.854775808s", "9" * 40 + "h"]),
    )


def _times():
    return st.one_of(
        st.builds(
            lambda y, mo, d, h, mi, s, frac, sep, tz: f"{y:04d}-{mo:02d}-{d:02d}{sep}{h:02d}:{mi:02d}:{s:02d}{frac}{tz}",
            st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 24), st.integers(0, 60),
            st.integers(0, 61), st.sampled_from(["", ".5", ".000000001", ".", ".123456789123"]),
            st.sampled_from(["T", "t", " ", "_"]),
            st.sampled_from(["Z", "z", "+02:00", "-12:30", "+24:00", "", "+0200", "-00:01"]),
        ),
        st.sampled_from(["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "yesterday", ""]),
    )


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**65), 2**65), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), _huge_int(),
)
_values = st.recursive(
    st.one_of(_scalars, _quantities(), _durations(), _times()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12,
)

# fields where a random value is most likely to reach something interesting, per kind
_FIELDS = {
    "NodePool": [("spec", "limits", "cpu"), ("spec", "limits", "memory"), ("spec", "limits"), ("spec", "weight"),
                 ("spec", "disruption", "consolidateAfter"), ("spec", "disruption", "budgets"),
                 ("spec", "template", "spec", "expireAfter"), ("spec", "template", "spec", "requirements"),
                 ("spec", "template", "spec", "taints"), ("spec", "replicas")],
    "Pod": [("spec", "containers", 0, "resources", "requests", "cpu"),
            ("spec", "containers", 0, "resources", "limits", "memory"), ("spec", "overhead"),
            ("metadata", "annotations", "karpy.dev/run-for"), ("spec", "priority"), ("spec", "nodeSelector")],
    "Deployment": [("spec", "replicas"), ("spec", "template", "spec", "containers", 0, "resources", "requests"),
                   ("spec", "template", "spec", "containers", 0, "resources", "requests", "memory")],
    "Node": [("status", "capacity", "cpu"), ("status", "allocatable", "memory"), ("status", "capacity")],
    "RuntimeClass": [("overhead", "podFixed", "cpu"), ("overhead", "podFixed")],
    "Scenario": [("spec", "start"), ("spec", "region"), ("spec", "steps"), ("spec", "steps", 0, "advance"),
                 ("spec", "settings", "batchIdleDuration"), ("spec", "settings")],
    "KWOKNodeClass": [("spec", "nodeRegistrationDelay")],
    "EC2NodeClass": [("spec", "kubelet", "maxPods"), ("spec", "kubelet", "kubeReserved"),
                     ("spec", "kubelet", "evictionHard"), ("spec", "kubelet", "kubeReserved", "memory"),
                     ("spec", "blockDeviceMappings")],
    "AKSNodeClass": [("spec", "osDiskSizeGB"), ("spec", "kubelet")],
    "NodeClaim": [("spec", "resources", "requests"), ("spec", "expireAfter")],
    "PersistentVolumeClaim": [("spec", "resources", "requests", "storage")],
    "PersistentVolume": [("spec", "capacity", "storage"), ("spec", "capacity")],
    "Job": [("spec", "parallelism"), ("spec", "completions"), ("metadata", "annotations", "karpy.dev/run-for")],
    "PodDisruptionBudget": [("spec", "minAvailable"), ("spec", "maxUnavailable")],
    "PriorityClass": [("value",), ("globalDefault",)],
    "DaemonSet": [("spec", "template", "spec", "containers", 0, "resources", "requests", "cpu")],
    "StatefulSet": [("spec", "replicas")],
}


def _template(name: str) -> dict:
    return {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container()]}}


def _base(kind: str, api_version: str, name: str) -> dict:
    """A valid manifest of ``kind`` (the fuzzers mutate it)."""
    sel = {"matchLabels": {"app": name}}
    bases = {
        "NodePool": lambda: nodepool(name),
        "NodeClaim": lambda: {"metadata": {"name": name},
                              "spec": {"nodeClassRef": dict(KWOK_REF), "requirements": [],
                                       "resources": {"requests": {"cpu": "1"}}}},
        "AKSNodeClass": lambda: {"metadata": {"name": name}, "spec": {"imageFamily": "Ubuntu2204"}},
        "EC2NodeClass": lambda: {"metadata": {"name": name},
                                 "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                                          "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                                          "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
                                          "kubelet": {"maxPods": 110, "kubeReserved": {"cpu": "100m"},
                                                      "evictionHard": {"memory.available": "5%"}}}},
        "KWOKNodeClass": lambda: {"metadata": {"name": name}, "spec": {"nodeRegistrationDelay": "10s"}},
        "Pod": lambda: pod(name),
        "Node": lambda: {"metadata": {"name": name},
                         "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}}},
        "Namespace": lambda: {"metadata": {"name": name}},
        "PersistentVolumeClaim": lambda: {"metadata": {"name": name},
                                          "spec": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Gi"}}}},
        "PersistentVolume": lambda: {"metadata": {"name": name},
                                     "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                                              "csi": {"driver": "d", "volumeHandle": "h"}}},
        "Deployment": lambda: deployment(name),
        "ReplicaSet": lambda: {"metadata": {"name": name}, "spec": {"replicas": 1, "selector": sel,
                                                                     "template": _template(name)}},
        "StatefulSet": lambda: {"metadata": {"name": name}, "spec": {"replicas": 1, "selector": sel,
                                                                      "template": _template(name)}},
        "DaemonSet": lambda: {"metadata": {"name": name}, "spec": {"selector": sel, "template": _template(name)}},
        "Job": lambda: {"metadata": {"name": name, "annotations": {"karpy.dev/run-for": "5m"}},
                        "spec": {"parallelism": 1, "template": {
                            "spec": {"restartPolicy": "Never", "containers": [container()]}}}},
        "PodDisruptionBudget": lambda: {"metadata": {"name": name}, "spec": {"minAvailable": 1, "selector": sel}},
        "RuntimeClass": lambda: {"metadata": {"name": name}, "handler": "h",
                                 "overhead": {"podFixed": {"cpu": "100m"}}},
        "PriorityClass": lambda: {"metadata": {"name": name}, "value": 1000},
        "StorageClass": lambda: {"metadata": {"name": name}, "provisioner": "ebs.csi.aws.com"},
        "Service": lambda: {"metadata": {"name": name}, "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}},
        "Scenario": lambda: scenario(name, steps=[{"advance": "1m"}]),
        "NodeOverlay": lambda: {"metadata": {"name": name},
                                "spec": {"requirements": [{"key": "karpenter.kwok.sh/instance-family",
                                                           "operator": "In", "values": ["c"]}],
                                         "priceAdjustment": "+10%"}},
        "CapacityBuffer": lambda: {"metadata": {"name": name},
                                   "spec": {"replicas": 1, "podTemplateRef": {"name": name}}},
        "PodTemplate": lambda: {"metadata": {"name": name}, "template": _template(name)},
    }
    d = bases[kind]()
    d["apiVersion"] = api_version
    d["kind"] = kind
    return d


def _set(obj, path, value) -> None:
    cur = obj
    for k in path[:-1]:
        nxt = cur[k] if isinstance(cur, list) and isinstance(k, int) and k < len(cur) else None
        if isinstance(cur, dict):
            nxt = cur.get(k)
            if not isinstance(nxt, (dict, list)):
                nxt = cur[k] = [] if isinstance(k, int) else {}
        if nxt is None:
            return
        cur = nxt
    if isinstance(cur, dict):
        cur[path[-1]] = value
    elif isinstance(cur, list) and isinstance(path[-1], int) and path[-1] < len(cur):
        cur[path[-1]] = value


@st.composite
def _document(draw, names=st.sampled_from(["a", "b", "default", "web"])):
    api_version, kind = draw(st.sampled_from(_KINDS))
    doc = _base(kind, api_version, draw(names))
    paths = _FIELDS.get(kind, []) + [("spec",), ("metadata",), ("metadata", "name"), ("metadata", "namespace")]
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(paths))
        leaf = path[-1]
        if leaf in ("cpu", "memory", "storage", "maxPods"):
            value = draw(st.one_of(_quantities(), _values))
        elif isinstance(leaf, str) and ("After" in leaf or "Duration" in leaf or leaf in ("advance", "karpy.dev/run-for",
                                                                                          "nodeRegistrationDelay")):
            value = draw(st.one_of(_durations(), _values))
        elif leaf == "start":
            value = draw(st.one_of(_times(), _values))
        elif leaf in ("limits", "overhead", "requests", "capacity", "podFixed"):
            value = draw(st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu", "bad key"]),
                                         _quantities(), max_size=3))
        else:
            value = draw(_values)
        _set(doc, path, value)
    return doc


def _assert_located(e: FieldError) -> None:
    text = str(e)
    assert e.file and text.startswith(e.file), text
    if any(m in e.message for m in _DOCUMENT_LEVEL):
        assert e.index is not None, text
        return
    assert e.index is not None and f"document {e.index}" in text, text
    assert e.field, text
    assert "internal error" not in e.message, text


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(_document(), min_size=1, max_size=4))
def test_fuzz_loader_never_raises_and_locates_every_error(docs):
    debug, schema.DEBUG = schema.DEBUG, True  # a check that raises is a bug, not a skipped check
    try:
        data = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True).encode("utf-8")
        result = load_documents(["-"], stdin_text=data)
    finally:
        schema.DEBUG = debug
    for e in result.errors:
        assert e.file == "<stdin>"
        _assert_located(e)
    for d in result.documents:
        assert json.loads(json.dumps(d.obj)) == d.obj


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(doc=_document())
def test_fuzz_validate_object_as_a_patch_never_raises(doc):
    old = _base(doc["kind"], doc["apiVersion"], "a")
    got, errors = validate_object(doc, file="Scenario patch", old=old)
    assert (got is None) == bool(errors)
    for e in errors:
        assert isinstance(e, FieldError) and str(e).startswith("Scenario patch")


# --- the CLI on a mix of valid and invalid documents ----------------------------------------
#
# Most documents here are valid but extreme (the largest quantities, the longest durations, odd
# but legal requirement values), so that the simulator itself meets them; a few are the random
# mutants above, which the loader must refuse cleanly.

_CPU = st.sampled_from(["0", "1", "100m", "9223372036854775807m", "9223372036854775", "1n", "1e-9", "+1", "1E1", "64"])
_BYTES = st.sampled_from(["0", "1", "1Gi", "9223372036854775807", "7Ei", "4611686018427387904", "1n", "1e-9", "1e18"])
_COUNT = st.sampled_from(["0", "1", "110", "9223372036854775807"])
_DURATION = st.sampled_from(["0s", "1s", "1m", "1h", "720h", "2562047h", "2562047h47m16s", "1h1m1s"])
_POSITIVE_DURATION = st.sampled_from(["1s", "1m", "1h", "2562047h", "2562047h47m16s"])
_INT = st.sampled_from(["0", "1", "4", "-5", "9223372036854775807", "99999999999999999999999"])


@st.composite
def _requirement(draw, pod_side: bool):
    key = draw(st.sampled_from(["kubernetes.io/arch", "karpenter.kwok.sh/instance-cpu", "topology.kubernetes.io/zone",
                                "karpenter.sh/capacity-type", "node.kubernetes.io/instance-type", "example.com/team"]))
    ops = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] + ([] if pod_side else ["Gte", "Lte"])
    op = draw(st.sampled_from(ops))
    r = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        r["values"] = draw(st.lists(st.sampled_from(["amd64", "arm64", "4", "test-zone-a", "spot", "on-demand", "x"]),
                                    min_size=1, max_size=2, unique=True))
    elif op in ("Gt", "Lt", "Gte", "Lte"):
        r["values"] = [draw(_INT.filter(lambda v: pod_side or not v.startswith("-")))]
    return r


@st.composite
def _extreme_nodepool(draw, name):
    np = nodepool(name)
    spec = np["spec"]
    if draw(st.booleans()):
        spec["limits"] = draw(st.fixed_dictionaries({}, optional={"cpu": _CPU, "memory": _BYTES, "pods": _COUNT,
                                                                  "nodes": _COUNT}))
    spec["disruption"] = {"consolidateAfter": draw(st.one_of(st.just("Never"), _DURATION)),
                          "consolidationPolicy": draw(st.sampled_from(["WhenEmpty", "WhenEmptyOrUnderutilized"]))}
    if draw(st.booleans()):
        budget = {"nodes": draw(st.sampled_from(["0", "0%", "100%", "1", "9999999999999999999999"]))}
        if draw(st.booleans()):
            budget["schedule"] = draw(st.sampled_from(["@daily", "* * * * *", "0 0 29 2 *", "59 23 31 12 6"]))
            budget["duration"] = draw(st.sampled_from(["1h", "2562047h", "1m", "0h0m"]))
        spec["disruption"]["budgets"] = [budget]
    template = spec["template"]["spec"]
    template["requirements"] = draw(st.lists(_requirement(False), max_size=3))
    if draw(st.booleans()):
        template["expireAfter"] = draw(st.one_of(st.just("Never"), _POSITIVE_DURATION))
    if draw(st.booleans()):
        template["terminationGracePeriod"] = draw(_DURATION)
    if draw(st.booleans()):
        template["taints"] = [{"key": "k", "value": "v", "effect": draw(st.sampled_from(["NoSchedule", "NoExecute"]))}]
    if draw(st.booleans()):
        spec["weight"] = draw(st.integers(1, 100))
    return np


@st.composite
def _extreme_pod_spec(draw):
    c = {"name": "c", "image": "i", "resources": {"requests": {"cpu": draw(_CPU), "memory": draw(_BYTES)}}}
    spec = {"containers": [c]}
    if draw(st.booleans()):
        spec["initContainers"] = [dict(copy.deepcopy(c), name="i", **({"restartPolicy": "Always"} if draw(st.booleans()) else {}))]
    if draw(st.booleans()):
        spec["tolerations"] = [{"operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": draw(st.sampled_from([0, 2**63 - 1, -(2**63)]))}]
    if draw(st.booleans()):
        spec["topologySpreadConstraints"] = [{
            "maxSkew": draw(st.sampled_from([1, 2**31 - 1])),
            "topologyKey": draw(st.sampled_from(["topology.kubernetes.io/zone", "kubernetes.io/hostname", "example.com/x"])),
            "whenUnsatisfiable": draw(st.sampled_from(["DoNotSchedule", "ScheduleAnyway"])),
            "labelSelector": {"matchLabels": {"app": "x"}},
        }]
    if draw(st.booleans()):
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [draw(_requirement(True))]}]}}}
    if draw(st.booleans()):
        spec["priority"] = draw(st.sampled_from([-(2**31), 2**31 - 1, 0]))
    if draw(st.booleans()):
        spec["terminationGracePeriodSeconds"] = draw(st.sampled_from([0, 2**63 - 1]))
    return spec


@st.composite
def _extreme_docs(draw):
    docs = [{**NODECLASS, "spec": {"nodeRegistrationDelay": draw(st.sampled_from(["1s", "30s", "2562047h"]))}}]
    for i in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["NodePool", "Pod", "Deployment", "DaemonSet", "Job", "Node", "PodDisruptionBudget"]))
        name = f"x{i}"
        if kind == "NodePool":
            docs.append(draw(_extreme_nodepool(name)))
            continue
        if kind == "Node":
            docs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                         "status": {"capacity": {"cpu": draw(_CPU), "memory": draw(_BYTES), "pods": draw(_COUNT)}}})
            continue
        if kind == "PodDisruptionBudget":
            field = draw(st.sampled_from(["minAvailable", "maxUnavailable"]))
            docs.append({"apiVersion": "policy/v1", "kind": kind, "metadata": {"name": name},
                         "spec": {field: draw(st.sampled_from([0, 1, "0%", "100%", 2**31 - 1])),
                                  "selector": {"matchLabels": {"app": "x"}}}})
            continue
        spec = draw(_extreme_pod_spec())
        run_for = {"karpy.dev/run-for": draw(_POSITIVE_DURATION)} if draw(st.booleans()) else {}
        if kind == "Pod":
            docs.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "labels": {"app": "x"}, "annotations": run_for}, "spec": spec})
            continue
        template = {"metadata": {"labels": {"app": "x"}, "annotations": run_for}, "spec": spec}
        body = {"selector": {"matchLabels": {"app": "x"}}, "template": template}
        if kind == "Deployment":
            body["replicas"] = draw(st.integers(0, 4))
        if kind == "DaemonSet":
            body["selector"] = {"matchLabels": {"app": name}}
            template["metadata"]["labels"] = {"app": name}
        if kind == "Job":
            spec["restartPolicy"] = "Never"
            body = {"parallelism": draw(st.integers(0, 3)), "completions": draw(st.integers(1, 6)), "template": template}
        api = {"Deployment": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1"}[kind]
        docs.append({"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": body})
    return docs


def _cli_scenario():
    # start times the current simulator can run from for --until 20m; near year 9999 it is the
    # simulator's job to clamp its clock (see the report on this branch), so they are not drawn here
    starts = st.one_of(
        st.sampled_from(["2026-01-01T00:00:00.5Z", "2026-01-01t00:00:00z", "2026-06-01T02:00:00+02:00",
                         "1970-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "9999-12-31T23:00:00Z", "2026-01-01"]),
        st.builds(lambda y, frac, tz: f"{y:04d}-03-04T05:06:07{frac}{tz}", st.integers(1, 9000),
                  st.sampled_from(["", ".25", ".999999999"]), st.sampled_from(["Z", "+05:30", "-11:00"])),
    )
    steps = st.lists(
        st.one_of(
            st.builds(lambda d: {"advance": d}, st.one_of(st.sampled_from(["1m", "30s", "2562047h"]), _durations())),
            st.builds(lambda q: {"patch": {"kind": "NodePool", "name": "x0", "merge": {"spec": {"limits": {"cpu": q}}}}},
                      _quantities()),
            st.builds(lambda m: {"patch": {"kind": "Deployment", "name": "x1", "merge": m}},
                      st.sampled_from([{"spec": {"replicas": 3}}, {"metadata": {"name": "y"}}, {"kind": "Pod"},
                                       {"spec": None}, {"spec": {"template": {"spec": {"containers": []}}}}])),
            st.builds(lambda q: {"apply": [pod("late", cpu=q)]}, _quantities()),
            st.builds(lambda n: {"scale": {"kind": "Deployment", "name": "x1", "replicas": n}}, st.integers(-1, 3)),
            st.builds(lambda c: {"interrupt": {"selector": {"matchLabels": {}}, "count": c}}, st.sampled_from([1, 2**31 - 1])),
            st.builds(lambda k: {k: {"capacityType": "spot"}}, st.sampled_from(["unavailable", "available"])),
            st.builds(lambda k: {"delete": {"kind": k, "name": "x0"}},
                      st.sampled_from(["NodePool", "Pod", "Node", "KWOKNodeClass", "Deployment"])),
        ),
        max_size=4,
    )
    settings_ = st.fixed_dictionaries({}, optional={
        "featureGates": st.fixed_dictionaries({}, optional={g: st.booleans() for g in (
            "SpotToSpotConsolidation", "NodeRepair", "StaticCapacity", "ReservedCapacity", "NodeOverlay")}),
        "minValuesPolicy": st.sampled_from(["Strict", "BestEffort"]),
        "batchIdleDuration": st.sampled_from(["1s", "1ns", "2562047h"]),
        "batchMaxDuration": st.sampled_from(["10s", "1ns", "2562047h"]),
    })
    return st.builds(
        lambda s, st_, r, se: scenario(start=s, steps=st_, settings=se, **({"region": r} if r is not None else {})),
        starts, steps, st.sampled_from([None, None, "", "westeurope"]), settings_,
    )


@st.composite
def _cli_inputs(draw):
    docs = draw(_extreme_docs())
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        docs.append(draw(_document(names=st.sampled_from(["x1", "x2", "y"]))))
    if draw(st.booleans()):
        docs.append(draw(_cli_scenario()))
    return draw(st.permutations(docs))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(docs=_cli_inputs(), via_stdin=st.booleans())
def test_fuzz_cli_exits_0_or_2_never_1(docs, via_stdin, tmp_path_factory):
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if via_stdin:
        r = CliRunner().invoke(main, ["simulate", "-", "-o", "json", "--until", "20m"], input=text.encode())
        name = "<stdin>"
    else:
        path = tmp_path_factory.mktemp("fuzz") / "in.yaml"
        path.write_text(text)
        r = CliRunner().invoke(main, ["simulate", str(path), "-o", "json", "--until", "20m"])
        name = str(path)
    assert r.exit_code in (0, 2), f"exit {r.exit_code}\n{r.stderr[-2000:]}\n{r.exception!r}\ninput:\n{text}"
    assert "Traceback" not in r.stderr
    if r.exit_code == 0:
        json.loads(r.stdout)
        return
    lines = [ln for ln in r.stderr.splitlines() if ln]
    assert lines and r.stdout == ""
    for ln in lines:
        assert ln.startswith("error: "), ln
        if ln.startswith("error: --region: "):
            continue
        # FILE: document N (Kind/name): FIELD: MESSAGE
        assert re.match(rf"error: {re.escape(name)}: document \d+( \([^)]*\))?: \S.*?: \S", ln), ln


# --- inputs beyond one simulation: refused at once, or stopped with a reason --------------------------

def test_a_deployment_larger_than_a_simulation_holds_is_refused_naming_the_field(tmp_path):
    from karpy.simulator.inputs import MAX_PODS

    path = tmp_path / "in.yaml"
    path.write_text(dump([NODECLASS, nodepool(), deployment("web", 2_147_483_647)]))
    r = invoke([str(path)])
    assert r.exit_code == 2, r.output
    assert "document 2 (Deployment/web): spec.replicas: Invalid value: 2147483647" in r.output
    assert f"at most {MAX_PODS}" in r.output and "Traceback" not in r.output


def test_the_pod_limit_counts_every_workload_and_scenario_scale(tmp_path):
    from karpy.simulator.inputs import MAX_PODS

    half = MAX_PODS // 2
    path = tmp_path / "in.yaml"
    docs = [NODECLASS, nodepool(), deployment("a", half), deployment("b", half),
            scenario(steps=[{"advance": "1m"}, {"scale": {"kind": "Deployment", "name": "b", "replicas": half + 1}}])]
    path.write_text(dump(docs))
    r = invoke([str(path)])
    assert r.exit_code == 2, r.output
    assert "document 4 (Scenario/s): spec.steps[1].scale.replicas: Invalid value:" in r.output
    # the same Deployments, without the extra replica, are within the limit (not run here: checked only)
    from karpy.simulator.inputs import check_size as _check_size

    assert _check_size(load(docs[:4]).documents) == []


def test_a_run_that_never_settles_stops_after_the_most_disruptions_and_says_why(monkeypatch):
    """expireAfter of a minute over a long --until: the guard ends it, in the output and on stderr."""
    import karpy.simulator.sim as sim_mod
    from karpy.simulator.output import summary

    monkeypatch.setattr(sim_mod, "MAX_DISRUPTIONS", 4)
    np_ = nodepool()
    np_["spec"]["template"]["spec"]["expireAfter"] = "1m"
    docs = load([NODECLASS, np_, deployment("web", 2)]).documents
    s = sim_mod.Simulation(docs, until=1000 * 3600.0)
    s.run()
    assert s.stopped and "4 disruption commands" in s.stopped
    out = summary(s)["status"]
    assert len(out["disruptions"]) == 4 and all(d["reason"] == "Expired" for d in out["disruptions"])
    assert out["stoppedEarly"] == s.stopped
    assert s.now < s.until


def test_the_guard_is_reported_by_the_cli(monkeypatch, tmp_path):
    import karpy.simulator.sim as sim_mod

    monkeypatch.setattr(sim_mod, "MAX_DISRUPTIONS", 2)
    np_ = nodepool()
    np_["spec"]["template"]["spec"]["expireAfter"] = "1m"
    path = tmp_path / "in.yaml"
    path.write_text(dump([NODECLASS, np_, deployment("web", 1)]))
    r = CliRunner().invoke(main, ["simulate", str(path), "--until", "1000h", "-o", "json"])
    assert r.exit_code == 0
    assert "warning: stopped at" in r.stderr and "2 disruption commands" in r.stderr
    status = json.loads(r.stdout)["items"][-1]["status"]
    assert status["stoppedEarly"].startswith("stopped at")


@pytest.mark.parametrize("key", ["\x85", "a\nb", "\u2028", "x]y"])
def test_an_error_about_an_odd_key_stays_on_one_line(key, tmp_path):
    """A key holding a line break (NEL, LF, LINE SEPARATOR) or a bracket is quoted in the field path, and no
    error message spans two lines."""
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "x1"}, "spec": {key: False}}
    path = tmp_path / "in.yaml"
    path.write_text(dump([NODECLASS, nodepool(), claim]))
    r = invoke([str(path)])
    assert r.exit_code == 2
    lines = r.stderr.splitlines()
    assert lines and all(ln.startswith(f"error: {path}: document 2 (NodeClaim/x1): spec") for ln in lines), lines


# --- hostile input sizes and shapes: exit 2 with the limit that was hit, never a crash (issue 24 item 11) -------

def run_cli(args, stdin=None, timeout=120):
    """``karpy simulate`` as a process of its own: a crash (a signal) shows as a negative return code."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "from karpy.cli import main; main()", "simulate", *args],
                          stdin=stdin if stdin is not None else subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("text", ["[" * 30_000 + "]" * 30_000 + "\n", "- " * 30_000 + "x\n",
                                  "a:\n" + "".join(" " * i + "- \n" for i in range(1, 600)) + "  x\n"],
                         ids=["flow", "compact-block", "indented-block"])
def test_yaml_nested_30000_levels_is_refused_not_a_crash(text, tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    r = run_cli([str(path)])
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert f"error: {path}: document 0: invalid YAML at line " in r.stderr
    assert "more than 200 levels" in r.stderr and "Traceback" not in r.stderr


def test_the_depth_limit_is_exact_and_earlier_documents_still_load():
    from karpy.api.loader import MAX_DEPTH

    ok = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"
    at_limit = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    r = load_text(ok + "---\n" + at_limit)
    assert "nested" not in " ".join(e.message for e in r.errors)  # a map of MAX_DEPTH - 1 lists: read
    over = "x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n"
    r = load_text(ok + "---\n" + ok.replace("name: a", "name: b") + "---\n" + over, "f.yaml")
    assert [d.name for d in r.documents] == ["a", "b"]
    assert [str(e) for e in r.errors] == [
        f"f.yaml: document 2: invalid YAML at line 9: the document is nested too deeply: more than {MAX_DEPTH} "
        f"levels of maps and lists (karpy reads at most {MAX_DEPTH})"]


def test_a_device_is_not_read(tmp_path):
    r = run_cli(["/dev/zero"], timeout=60)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr == ("error: /dev/zero: not a regular file: karpy simulate reads files, directories, pipes and "
                        "standard input (-)\n")


def test_endless_standard_input_stops_at_the_size_limit():
    with open("/dev/zero", "rb") as zero:
        r = run_cli(["-"], stdin=zero, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.startswith("error: <stdin>: the input is larger than 64 MiB; karpy simulate reads at most 64 MiB")


def test_the_size_limit_is_over_every_input_together(tmp_path, monkeypatch):
    import karpy.api.loader as loader

    monkeypatch.setattr(loader, "MAX_INPUT_BYTES", 1000)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("# " + "a" * 600 + "\n")
    b.write_text("# " + "b" * 600 + "\n")
    assert load_documents([str(a)]).errors == []
    r = load_documents([str(a), str(b)])
    assert [(e.file, "larger than" in e.message) for e in r.errors] == [(str(b), True)]


def test_a_pipe_is_read_like_standard_input(tmp_path):
    """``karpy simulate <(helm template ...)`` hands karpy a pipe: it is read (within the size limit)."""
    import os
    import threading

    fifo = tmp_path / "manifests"
    os.mkfifo(fifo)
    text = dump([NODECLASS, nodepool(), deployment("web", 2)])

    def write():
        with open(fifo, "w") as f:
            f.write(text)

    t = threading.Thread(target=write)
    t.start()
    r = load_documents([str(fifo)])
    t.join()
    assert r.errors == [] and [d.kind for d in r.documents] == ["KWOKNodeClass", "NodePool", "Deployment"]


def test_a_large_document_without_aliases_names_the_value_limit(monkeypatch):
    import karpy.api.loader as loader

    monkeypatch.setattr(loader, "MAX_VALUES_PER_DOCUMENT", 1000)
    big = dump([scenario(steps=[{"advance": "1s"}] * 600)])
    (err,) = load_text(big).errors
    assert "more than 2,000,000 values" in err.message and "aliases expand too much" not in err.message
    assert err.message.startswith("the document is too large")


def test_alternating_scale_steps_count_every_pod_they_create(tmp_path):
    """2,000 steps scaling 400,000 replicas up and down again: each scale-up creates the pods anew, so the
    input creates far more than a simulation holds; refused at once (this used to run for minutes at 3.7 GB)."""
    import time

    steps = [{"scale": {"kind": "Deployment", "name": "web", "replicas": 0 if i % 2 else 400_000}}
             for i in range(2000)]
    path = tmp_path / "in.yaml"
    path.write_text(dump([NODECLASS, nodepool(), deployment("web", 1), scenario(steps=steps)]))
    t = time.monotonic()
    r = run_cli([str(path)])
    assert r.returncode == 2, r.stderr[-2000:]
    assert time.monotonic() - t < 60
    assert r.stderr == (f"error: {path}: document 3 (Scenario/s): spec.steps[2].scale.replicas: Invalid value: 400000: "
                        "the input creates 800000 pods in all (every workload's replicas and every pod the Scenario's "
                        "steps add); one simulation holds at most 500000 (about 25 KiB of memory each)\n")


def test_pods_created_over_steps_scale_ups_new_templates_and_deletes():
    from karpy.simulator.inputs import check_size

    def created(steps, replicas=100_000):
        return check_size(load([NODECLASS, nodepool(), deployment("web", replicas), scenario(steps=steps)]).documents)

    up = {"scale": {"kind": "Deployment", "name": "web", "replicas": 200_000}}
    down = {"scale": {"kind": "Deployment", "name": "web", "replicas": 0}}
    assert created([up, down, up]) == []  # 200,000 + 200,000 = 400,000 created
    assert created([up, down, up, down, up])  # 600,000
    assert created([{"scale": {"kind": "Deployment", "name": "other", "replicas": 499_999}}] * 3) == []  # not there
    # a new pod template replaces every pod of a Deployment; applying the same one again creates none
    changed = deployment("web", 200_000, cpu="200m")
    assert created([{"apply": [changed]}, {"apply": [copy.deepcopy(changed)]}], 200_000) == []  # 400,000
    assert created([{"apply": [changed]}, {"apply": [deployment("web", 200_000)]}], 200_000)  # 600,000
    # deleted and applied again: all its pods anew
    gone = {"delete": {"kind": "Deployment", "name": "web"}}
    assert created([gone, {"apply": [deployment("web", 200_000)]}, gone, {"apply": [deployment("web", 200_000)]}],
                   200_000)
