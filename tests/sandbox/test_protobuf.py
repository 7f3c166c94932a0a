"""Kubernetes' protobuf request bodies: the decoder on messages built with the ``protobuf`` package from the
descriptors, and the sandbox's answers to kubectl's generators, which send them."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request

import pytest

from karpy.sandbox import protobuf as P

from .harness import kubectl_binary


def _msg(api_version: str, kind: str):
    cls = P.message_class(api_version, kind)
    assert cls is not None, (api_version, kind)
    return cls()


def _roundtrip(msg) -> dict:
    body = P.encode(msg)
    assert body.startswith(b"k8s\x00")
    return P.decode(body, "", msg.DESCRIPTOR.name)


# --- the decoder --------------------------------------------------------------------------------------------
def test_deployment_as_kubectl_create_deployment_sends_it():
    d = _msg("apps/v1", "Deployment")
    d.metadata.name = "web"
    d.metadata.labels["app"] = "web"
    d.metadata.creationTimestamp.SetInParent()  # Go's zero time: an empty message on the wire
    d.spec.replicas = 2
    d.spec.selector.matchLabels["app"] = "web"
    d.spec.template.metadata.labels["app"] = "web"
    d.spec.template.metadata.creationTimestamp.SetInParent()
    c = d.spec.template.spec.containers.add(name="nginx", image="nginx")
    c.resources.SetInParent()  # a non-pointer struct: written although empty
    c.terminationMessagePath = ""  # non-pointer strings with omitempty: written empty by Go, left out by JSON
    c.stdin = False
    d.spec.strategy.SetInParent()
    d.spec.minReadySeconds = 0  # non-pointer int with omitempty
    d.spec.paused = False
    d.status.SetInParent()
    assert _roundtrip(d) == {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]}},
                 "strategy": {}},
        "status": {},
    }


def test_pointer_fields_keep_zero_values():
    d = _msg("apps/v1", "Deployment")
    d.metadata.name = "zero"
    d.spec.replicas = 0  # *int32: zero replicas is a choice
    d.spec.revisionHistoryLimit = 0
    d.spec.template.spec.terminationGracePeriodSeconds = 0
    d.spec.template.spec.automountServiceAccountToken = False  # *bool
    out = _roundtrip(d)["spec"]
    assert out["replicas"] == 0 and out["revisionHistoryLimit"] == 0
    assert out["template"]["spec"] == {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False}
    pvc = _msg("v1", "PersistentVolumeClaim")
    pvc.metadata.name = "no-class"
    pvc.spec.storageClassName = ""  # *string: "" means no class, not the default one
    assert _roundtrip(pvc)["spec"] == {"storageClassName": ""}
    job = _msg("batch/v1", "Job")
    job.metadata.name = "j"
    job.spec.suspend = False
    assert _roundtrip(job)["spec"]["suspend"] is False


def test_scalars_without_omitempty_are_kept():
    svc = _msg("v1", "Service")
    svc.metadata.name = "s"
    port = svc.spec.ports.add(port=80, name="")
    port.targetPort.SetInParent()
    port.nodePort = 0
    out = _roundtrip(svc)["spec"]["ports"][0]
    # port has no omitempty; name and nodePort do; targetPort is a struct JSON writes (as 0: IntOrString{})
    assert out == {"port": 80, "targetPort": 0}


def test_times():
    ev = _msg("events.k8s.io/v1", "Event")
    ev.metadata.name = "e"
    ev.metadata.creationTimestamp.seconds = 1767323045  # Time: whole seconds
    ev.metadata.creationTimestamp.nanos = 999_000_000
    ev.eventTime.seconds = 1767323045  # MicroTime: six fractional digits
    ev.eventTime.nanos = 123_456_789
    ev.deprecatedFirstTimestamp.seconds = -62135596800  # Go's zero time, written out: left out as JSON writes null
    ev.deprecatedLastTimestamp.SetInParent()  # an empty message is the zero time as well
    ev.series.count = 2
    ev.series.lastObservedTime.seconds = 1767323046
    out = _roundtrip(ev)
    assert out["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05Z"
    assert out["eventTime"] == "2026-01-02T03:04:05.123456Z"
    assert out["series"] == {"count": 2, "lastObservedTime": "2026-01-02T03:04:06.000000Z"}
    assert "deprecatedFirstTimestamp" not in out and "deprecatedLastTimestamp" not in out


def test_quantities_and_int_or_string():
    pod = _msg("v1", "Pod")
    pod.metadata.name = "p"
    c = pod.spec.containers.add(name="c", image="i")
    c.resources.requests["cpu"].string = "250m"
    c.resources.requests["memory"].string = "1Gi"
    c.resources.limits["cpu"].string = ""  # a map value is kept: the zero Quantity is "0"
    c.readinessProbe.handler.httpGet.port.type = 1
    c.readinessProbe.handler.httpGet.port.strVal = "http"
    c.livenessProbe.handler.tcpSocket.port.intVal = 8080
    vol = pod.spec.volumes.add(name="cache")
    vol.volumeSource.emptyDir.sizeLimit.string = "1Gi"
    out = _roundtrip(pod)["spec"]
    assert out["containers"][0]["resources"] == {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "0"}}
    # Probe.handler, Volume.volumeSource: embedded structs JSON inlines
    assert out["containers"][0]["readinessProbe"] == {"httpGet": {"port": "http"}}
    assert out["containers"][0]["livenessProbe"] == {"tcpSocket": {"port": 8080}}
    assert out["volumes"] == [{"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}]
    pdb = _msg("policy/v1", "PodDisruptionBudget")
    pdb.metadata.name = "pdb"
    pdb.spec.maxUnavailable.type = 1
    pdb.spec.maxUnavailable.strVal = "50%"
    assert _roundtrip(pdb)["spec"] == {"maxUnavailable": "50%"}
    pdb.spec.ClearField("maxUnavailable")
    pdb.spec.minAvailable.intVal = 0  # *IntOrString: zero is kept
    assert _roundtrip(pdb)["spec"] == {"minAvailable": 0}


def test_empty_pointer_structs_are_kept():
    pod = _msg("v1", "Pod")
    pod.metadata.name = "p"
    pod.spec.volumes.add(name="scratch").volumeSource.emptyDir.SetInParent()
    ref = pod.spec.containers.add(name="c").env.add(name="S").valueFrom.secretKeyRef
    ref.localObjectReference.name = "creds"  # inlined: name sits beside key
    ref.key = "password"
    ref.optional = False
    out = _roundtrip(pod)["spec"]
    assert out["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    assert out["containers"][0]["env"] == [
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password", "optional": False}}}]


def test_bytes_are_base64_and_lists_and_maps_keep_empty_items():
    secret = _msg("v1", "Secret")
    secret.metadata.name = "s"
    secret.data["bin"] = bytes(range(256))
    secret.data["empty"] = b""
    secret.type = "Opaque"
    out = _roundtrip(secret)
    assert base64.b64decode(out["data"]["bin"]) == bytes(range(256))
    assert out["data"]["empty"] == ""
    assert out["type"] == "Opaque"
    cm = _msg("v1", "ConfigMap")
    cm.metadata.name = "cm"
    cm.metadata.annotations["note"] = ""
    cm.binaryData["blob"] = b"\x00\xff"
    cm.data["empty"] = ""
    out = _roundtrip(cm)
    assert out == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "annotations": {"note": ""}},
                   "data": {"empty": ""}, "binaryData": {"blob": "AP8="}}
    role = _msg("rbac.authorization.k8s.io/v1", "Role")
    role.metadata.name = "r"
    role.rules.add(apiGroups=[""], resources=["pods"], verbs=["get"])
    assert _roundtrip(role)["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]


def test_crd_schema_types_and_json_names():
    crd = _msg("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    crd.metadata.name = "widgets.example.com"
    crd.spec.group = "example.com"
    v = crd.spec.versions.add(name="v1", served=True, storage=True)
    schema = v.schema.openAPIV3Schema
    schema.type = "object"
    size = schema.properties["size"]
    size.type = "integer"
    size.default.raw = b"3"
    size.maximum = 10
    tags = schema.properties["tags"]
    tags.type = "array"
    tags.items.schema.type = "string"
    tags.xKubernetesListType = "set"
    labels = schema.properties["labels"]
    labels.type = "object"
    labels.additionalProperties.allows = True
    labels.additionalProperties.schema.type = "string"
    schema.properties["free"].xKubernetesPreserveUnknownFields = True
    out = _roundtrip(crd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert out == {"type": "object", "properties": {
        "size": {"type": "integer", "default": 3, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"x-kubernetes-preserve-unknown-fields": True}}}


def test_go_durations():
    assert [P.go_duration(n) for n in (0, 1, 1500, 1_500_000, 1_000_000_000, 90 * 10**9, 3600 * 10**9,
                                       3_723_500_000_000, -2 * 10**9)] == \
        ["0s", "1ns", "1.5µs", "1.5ms", "1s", "1m30s", "1h0m0s", "1h2m3.5s", "-2s"]


def test_envelope_defaults_and_errors():
    cm = _msg("v1", "ConfigMap")
    cm.metadata.name = "cm"
    raw = cm.SerializeToString()
    # an envelope naming no kind or version takes the endpoint's, as kube-apiserver's decoder does
    assert P.decode(P.envelope("", "", raw), "v1", "ConfigMap")["metadata"] == {"name": "cm"}
    cases = {
        b"": "the object provided is unrecognized (must be of type ConfigMap): empty data (<empty>)",
        b"k8s\x00": "the object provided is unrecognized (must be of type ConfigMap): empty body (6b387300)",
        b'{"kind":"ConfigMap"}': "the object provided is unrecognized (must be of type ConfigMap): provided data does "
                                 'not appear to be a protobuf message, expected prefix [107 56 115 0] ({"kind":'
                                 '"ConfigMap"})',
        P.envelope("v1", "Foo", raw): 'Foo in version "v1" cannot be handled as a ConfigMap: no kind "Foo" is '
                                      'registered for version "v1" in scheme "pkg/runtime/scheme.go:110"',
        P.envelope("v1", "Secret", raw): 'Secret in version "v1" cannot be handled as a ConfigMap: converting '
                                         '(v1.Secret) to (core.ConfigMap): unknown conversion',
    }
    for body, message in cases.items():
        with pytest.raises(P.DecodeError) as e:
            P.decode(body, "v1", "ConfigMap")
        assert str(e.value) == message
    with pytest.raises(P.DecodeError, match=r'^ConfigMap in version "v1" cannot be handled as a ConfigMap: proto'):
        P.decode(P.envelope("v1", "ConfigMap", b"\xff\xff\xff"), "v1", "ConfigMap")


def test_every_served_builtin_kind_has_a_message():
    from karpy.kube.registry import CRD_KINDS, TYPES

    for t in TYPES:
        if t.kind in CRD_KINDS:
            continue
        for v in t.served_versions():
            assert P.message_class(f"{t.group}/{v}" if t.group else v, t.kind) is not None, t.kind
    for av, kind in (("events.k8s.io/v1", "Event"), ("autoscaling/v1", "Scale"), ("policy/v1", "Eviction"),
                     ("v1", "Binding"), ("v1", "DeleteOptions"), ("apps/v1", "DeleteOptions")):
        assert P.message_class(av, kind) is not None, kind


def test_descriptors_are_package_data():
    from importlib import resources

    files = {p.name for p in (resources.files("karpy.sandbox") / "protos").iterdir()}
    assert {f"kubernetes-{P.VERSION}.binpb", f"kubernetes-{P.VERSION}.gojson.json", "README.md"} <= files
    hints = json.loads((resources.files("karpy.sandbox") / "protos" / f"kubernetes-{P.VERSION}.gojson.json")
                       .read_text())
    assert hints["version"] == P.VERSION
    # Volume inlines volumeSource (field 2); PodSpec's activeDeadlineSeconds (5) is a pointer
    assert hints["messages"]["k8s.io.api.core.v1.Volume"]["i"] == [2]
    assert 5 in hints["messages"]["k8s.io.api.core.v1.PodSpec"]["p"]


# --- the sandbox ----------------------------------------------------------------------------------------------
def _open(box, req: urllib.request.Request):
    """The request against the sandbox (through the harness's opener where it has one: it trusts the sandbox's CA)."""
    opener = getattr(box, "urlopen", None)
    return opener(req) if opener is not None else urllib.request.urlopen(req, timeout=10)


def _request(box, method: str, path: str, body: bytes, content_type: str = P.MEDIA_TYPE) -> tuple[int, dict]:
    req = urllib.request.Request(box.url + path, data=body, method=method,
                                 headers={"Content-Type": content_type, "Accept": "application/json"})
    try:
        with _open(box, req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_protobuf_bodies_over_http(bare):
    cm = _msg("v1", "ConfigMap")
    cm.metadata.name = "over-http"
    cm.binaryData["blob"] = b"\x00\x01\xfe\xff"
    code, out = _request(bare, "POST", "/api/v1/namespaces/default/configmaps", P.encode(cm))
    assert code == 201 and out["binaryData"] == {"blob": "AAH+/w=="}
    # an update (PUT) in protobuf
    cm.data["k"] = "v"
    code, out = _request(bare, "PUT", "/api/v1/namespaces/default/configmaps/over-http", P.encode(cm))
    assert code == 200 and out["data"] == {"k": "v"}
    assert bare.get_json("/api/v1/namespaces/default/configmaps/over-http")["data"] == {"k": "v"}
    # kube-apiserver's 400s for what it cannot read
    code, out = _request(bare, "POST", "/api/v1/namespaces/default/configmaps", P.envelope("v1", "Foo", b""))
    assert (code, out["reason"]) == (400, "BadRequest")
    assert out["message"].startswith('Foo in version "v1" cannot be handled as a ConfigMap: no kind "Foo"')
    code, out = _request(bare, "POST", "/api/v1/namespaces/default/configmaps", b"\x0a\x00")
    assert (code, out["reason"]) == (400, "BadRequest") and "expected prefix [107 56 115 0]" in out["message"]
    # custom resources have no protobuf form: 415
    code, out = _request(bare, "POST", "/apis/karpenter.sh/v1/nodepools", P.envelope("karpenter.sh/v1", "NodePool", b""))
    assert (code, out["reason"]) == (415, "UnsupportedMediaType")
    assert out["message"] == ("the body of the request was in an unknown format - accepted media types include: "
                              "application/json, application/yaml")
    # a patch is never protobuf: the 415 of kube-apiserver's router
    code, out = _request(bare, "PATCH", "/api/v1/namespaces/default/configmaps/over-http", P.encode(cm))
    assert (code, out["reason"], out["message"]) == (415, "UnsupportedMediaType", "415: Unsupported Media Type")


def test_scale_and_eviction_in_protobuf(bare):
    d = _msg("apps/v1", "Deployment")
    d.metadata.name = "pb-scaled"
    d.spec.replicas = 1
    d.spec.selector.matchLabels["app"] = "pb-scaled"
    d.spec.template.metadata.labels["app"] = "pb-scaled"
    d.spec.template.spec.containers.add(name="c", image="nginx")
    assert _request(bare, "POST", "/apis/apps/v1/namespaces/default/deployments", P.encode(d))[0] == 201
    scale = _msg("autoscaling/v1", "Scale")
    scale.metadata.name = "pb-scaled"
    scale.spec.replicas = 0
    code, out = _request(bare, "PUT", "/apis/apps/v1/namespaces/default/deployments/pb-scaled/scale", P.encode(scale))
    assert code == 200 and out["spec"]["replicas"] == 0
    assert bare.get_json("/apis/apps/v1/namespaces/default/deployments/pb-scaled")["spec"]["replicas"] == 0
    pod = _msg("v1", "Pod")
    pod.metadata.name = "pb-evicted"
    pod.spec.containers.add(name="c", image="nginx")
    assert _request(bare, "POST", "/api/v1/namespaces/default/pods", P.encode(pod))[0] == 201
    ev = _msg("policy/v1", "Eviction")
    ev.metadata.name = "pb-evicted"
    code, out = _request(bare, "POST", "/api/v1/namespaces/default/pods/pb-evicted/eviction", P.encode(ev))
    assert code == 201, out


needs_kubectl = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl is not installed")


@needs_kubectl
def test_kubectl_generators(bare, tmp_path):
    k = bare.kubectl
    assert "namespace/gen created" in k("create", "namespace", "gen").stdout
    assert bare.get_json("/api/v1/namespaces/gen")["metadata"]["labels"] == {"kubernetes.io/metadata.name": "gen"}
    k("-n", "gen", "create", "deployment", "web", "--image=nginx", "--replicas=2", "--port=8080")
    dep = bare.get_json("/apis/apps/v1/namespaces/gen/deployments/web")
    assert dep["metadata"]["labels"] == {"app": "web"} and dep["spec"]["replicas"] == 2
    assert dep["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    [c] = dep["spec"]["template"]["spec"]["containers"]
    assert (c["name"], c["image"], c["ports"]) == ("nginx", "nginx", [{"containerPort": 8080, "protocol": "TCP"}])

    blob = bytes(range(256)) * 4
    (tmp_path / "blob.bin").write_bytes(blob)
    k("-n", "gen", "create", "configmap", "cfg", "--from-literal=greeting=hello", f"--from-file={tmp_path / 'blob.bin'}")
    cm = bare.get_json("/api/v1/namespaces/gen/configmaps/cfg")
    assert cm["data"] == {"greeting": "hello"} and base64.b64decode(cm["binaryData"]["blob.bin"]) == blob
    k("-n", "gen", "create", "secret", "generic", "creds", "--from-literal=user=admin", "--from-literal=empty=")
    secret = bare.get_json("/api/v1/namespaces/gen/secrets/creds")
    assert {n: base64.b64decode(v) for n, v in secret["data"].items()} == {"user": b"admin", "empty": b""}

    k("-n", "gen", "run", "box", "--image=busybox", "--labels=app=box,tier=x", "--env=MODE=test", "--", "sleep", "60")
    pod = bare.get_json("/api/v1/namespaces/gen/pods/box")
    assert pod["metadata"]["labels"] == {"app": "box", "tier": "x"}
    assert pod["spec"]["containers"][0]["args"] == ["sleep", "60"]
    assert pod["spec"]["containers"][0]["env"] == [{"name": "MODE", "value": "test"}]

    k("-n", "gen", "create", "job", "once", "--image=busybox", "--", "echo", "hi")
    job = bare.get_json("/apis/batch/v1/namespaces/gen/jobs/once")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"

    k("-n", "gen", "expose", "deployment", "web", "--port=80", "--target-port=8080")
    svc = bare.get_json("/api/v1/namespaces/gen/services/web")
    assert svc["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 8080}]
    assert svc["spec"]["selector"] == {"app": "web"}
    k("-n", "gen", "create", "service", "clusterip", "named", "--tcp=443:8443")
    assert bare.get_json("/api/v1/namespaces/gen/services/named")["spec"]["ports"][0]["targetPort"] == 8443

    k("-n", "gen", "create", "pdb", "web", "--selector=app=web", "--min-available=0")
    assert bare.get_json("/apis/policy/v1/namespaces/gen/poddisruptionbudgets/web")["spec"] == {
        "minAvailable": 0, "selector": {"matchLabels": {"app": "web"}}}
    k("create", "priorityclass", "gen-high", "--value=1000", "--description=high")
    pc = bare.get_json("/apis/scheduling.k8s.io/v1/priorityclasses/gen-high")
    assert (pc["value"], pc["description"]) == (1000, "high")
    k("-n", "gen", "create", "serviceaccount", "robot")
    k("-n", "gen", "create", "role", "reader", "--verb=get,list", "--resource=pods")
    k("-n", "gen", "create", "rolebinding", "reader", "--role=reader", "--serviceaccount=gen:robot")
    k("create", "clusterrole", "gen-nodes", "--verb=get", "--resource=nodes")
    k("create", "clusterrolebinding", "gen-nodes", "--clusterrole=gen-nodes", "--user=alice")
    assert bare.get_json("/apis/rbac.authorization.k8s.io/v1/namespaces/gen/roles/reader")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    rb = bare.get_json("/apis/rbac.authorization.k8s.io/v1/namespaces/gen/rolebindings/reader")
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "robot", "namespace": "gen"}]
    crb = bare.get_json("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gen-nodes")
    assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gen-nodes"}
    assert bare.get_json("/api/v1/namespaces/gen/serviceaccounts/robot")["metadata"]["name"] == "robot"

    # what the generators send in protobuf gives the objects their JSON gives (kubectl create -f of the same)
    k("create", "namespace", "gen-pb")
    k("create", "namespace", "gen-json")
    for args in (["create", "deployment", "web", "--image=nginx", "--replicas=2"],
                 ["create", "configmap", "cfg", "--from-literal=greeting=hello", f"--from-file={tmp_path / 'blob.bin'}"],
                 ["run", "box", "--image=busybox", "--labels=app=box", "--", "sleep", "60"],
                 ["create", "job", "once", "--image=busybox"],
                 ["create", "service", "nodeport", "np", "--tcp=80:8080"]):
        k("-n", "gen-pb", *args)
        manifest = k("-n", "gen-json", "--dry-run=client", "-o", "json", *args).stdout
        k("-n", "gen-json", "create", "--validate=false", "-f", "-", stdin=manifest)
    for path in ("apis/apps/v1/namespaces/{}/deployments/web", "api/v1/namespaces/{}/configmaps/cfg",
                 "api/v1/namespaces/{}/pods/box", "apis/batch/v1/namespaces/{}/jobs/once",
                 "api/v1/namespaces/{}/services/np"):
        pb, js = (_comparable(bare.get_json("/" + path.format(ns))) for ns in ("gen-pb", "gen-json"))
        assert pb == js, path


def _comparable(obj: dict) -> dict:
    """An object without what differs between two creations: identity, times, generated selectors."""
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    # (and the managed fields, which name the kubectl command that wrote the object)
    for k in ("uid", "resourceVersion", "creationTimestamp", "namespace", "managedFields"):
        meta.pop(k, None)
    obj.pop("status", None)
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Service":  # cluster IPs and node ports are allocated, one per Service
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
        for p in spec.get("ports") or ():
            p.pop("nodePort", None)
    text = re.sub(r"kube-api-access-[a-z0-9]{5}", "kube-api-access-*", json.dumps(obj, sort_keys=True))
    uid = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels", {}).get("batch.kubernetes.io/controller-uid")
    return json.loads(text.replace(uid, "UID")) if uid else json.loads(text)
