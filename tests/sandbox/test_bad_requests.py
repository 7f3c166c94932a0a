"""400s and 422s where kube-apiserver answers them, with its reasons and messages (each one checked against a
kube-apiserver v1.33): field selectors on fields a kind cannot be selected on, malformed selectors, invalid
names of namespaces and other objects, names that cannot be path segments."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from karpy.kube.errors import BadRequest
from karpy.kube.selectors import field_selector_terms, parse_field_selector

DEFAULT_ONLY = 'is not a known field selector: only "metadata.name", "metadata.namespace"'
LABEL_REGEX = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
               "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
               "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_REGEX = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                   "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                   "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _open(box, req: urllib.request.Request):
    """The request against the sandbox (through the harness's opener where it has one: it trusts the sandbox's CA)."""
    opener = getattr(box, "urlopen", None)
    return opener(req) if opener is not None else urllib.request.urlopen(req, timeout=10)


def _call(box, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(box.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with _open(box, req) as r:
            text = r.read().split(b"\n")[0]
            return r.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _select(box, path: str, selector: str, watch: bool = False) -> tuple[int, dict]:
    q = {"fieldSelector": selector}
    if watch:
        q.update(watch="1", timeoutSeconds="1")
    return _call(box, "GET", f"{path}?{urllib.parse.urlencode(q)}")


def _bad_request(box, path: str, selector: str, message: str, watch: bool = False) -> None:
    code, status = _select(box, path, selector, watch)
    assert (code, status.get("kind"), status.get("reason"), status.get("message")) == \
        (400, "Status", "BadRequest", message), (path, selector)


# --- field selectors -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path,selector,message", [
    ("/api/v1/pods", "spec.foo=bar", "field label not supported: spec.foo"),
    ("/api/v1/namespaces/default/pods", "spec.nodeName=x,status.foo=1", "field label not supported: status.foo"),
    # terms are sorted before they are checked: spec.foo comes first
    ("/api/v1/pods", "spec.nodeName=x,status.bar=2,spec.foo=1", "field label not supported: spec.foo"),
    ("/api/v1/nodes", "spec.foo=bar", "field label not supported: spec.foo"),
    ("/api/v1/nodes", "metadata.namespace=x", "field label not supported: metadata.namespace"),
    ("/api/v1/namespaces", "metadata.namespace=x", "field label not supported: metadata.namespace"),
    ("/api/v1/events", "regarding.kind=Pod", "field label not supported: regarding.kind"),
    ("/apis/events.k8s.io/v1/events", "involvedObject.kind=Pod", "field label not supported: involvedObject.kind"),
    ("/apis/events.k8s.io/v1/events", "reportingComponent=x", "field label not supported: reportingComponent"),
    ("/api/v1/secrets", "data.x=y", "field label not supported: data.x"),
    ("/api/v1/services", "spec.ports=1", "field label not supported: spec.ports"),
    ("/apis/batch/v1/jobs", "spec.foo=1", 'field label "spec.foo" not supported for Job'),
    ("/api/v1/configmaps", "data.a=b", f'"data.a" {DEFAULT_ONLY}'),
    ("/api/v1/persistentvolumes", "spec.foo=1", f'"spec.foo" {DEFAULT_ONLY}'),
    ("/apis/apps/v1/deployments", "status.replicas=1", f'"status.replicas" {DEFAULT_ONLY}'),
    ("/apis/apps/v1/replicasets", "status.replicas=1", f'"status.replicas" {DEFAULT_ONLY}'),
    ("/apis/coordination.k8s.io/v1/leases", "spec.holderIdentity=x", f'"spec.holderIdentity" {DEFAULT_ONLY}'),
    ("/apis/karpenter.sh/v1/nodepools", "spec.foo=1", "field label not supported: spec.foo"),
    ("/apis/karpenter.sh/v1/nodeclaims", "metadata.namespace=x", "field label not supported: metadata.namespace"),
    # what kube-apiserver cannot parse
    ("/api/v1/pods", "garbage", "invalid selector: 'garbage'; can't understand 'garbage'"),
    ("/api/v1/pods", "spec.nodeName>1", "invalid selector: 'spec.nodeName>1'; can't understand 'spec.nodeName>1'"),
    ("/api/v1/pods", "spec.nodeName=a=b", "invalid field selector: unescaped character in value: 61"),
    ("/api/v1/pods", "spec.nodeName=a\\", "invalid field selector: invalid escape sequence: \\"),
    ("/api/v1/pods", "spec.nodeName=\\q", "invalid field selector: invalid escape sequence: \\q"),
])
def test_unsupported_field_selectors(bare, path, selector, message):
    _bad_request(bare, path, selector, message)


def test_unsupported_field_selector_on_watch(bare):
    _bad_request(bare, "/api/v1/pods", "spec.foo=bar", "field label not supported: spec.foo", watch=True)
    _bad_request(bare, "/apis/apps/v1/namespaces/default/deployments", "spec.paused=true",
                 f'"spec.paused" {DEFAULT_ONLY}', watch=True)
    code, _ = _select(bare, "/api/v1/namespaces/default/pods", "spec.nodeName=n1", watch=True)
    assert code == 200


@pytest.mark.parametrize("path,selector", [
    ("/api/v1/pods", s) for s in ("metadata.name=x", "metadata.namespace=default", "spec.nodeName=n", "spec.host=n",
                                  "spec.restartPolicy=Always", "spec.schedulerName=s", "spec.serviceAccountName=s",
                                  "spec.hostNetwork=false", "status.phase=Running", "status.podIP=10.0.0.1",
                                  "status.podIPs=10.0.0.1", "status.nominatedNodeName=n", "spec.nodeName==n",
                                  "spec.nodeName!=n", ",,")
] + [
    ("/api/v1/nodes", "spec.unschedulable=true"), ("/api/v1/namespaces", "status.phase=Active"),
    ("/api/v1/events", "involvedObject.kind=Pod,reason=r,reportingComponent=c,source=s,type=Normal"),
    ("/apis/events.k8s.io/v1/events", "regarding.kind=Pod,reportingController=c,reason=r,type=Normal"),
    ("/api/v1/secrets", "type=Opaque"), ("/api/v1/services", "spec.clusterIP=None,spec.type=ClusterIP"),
    ("/apis/batch/v1/jobs", "status.successful=1"), ("/api/v1/persistentvolumes", "metadata.namespace=x"),
    ("/apis/karpenter.sh/v1/nodepools", "metadata.name=default"),
])
def test_supported_field_selectors(bare, path, selector):
    code, body = _select(bare, path, selector)
    assert code == 200 and body["kind"].endswith("List"), body


def test_field_selectors_select_as_kube_apiserver_does(bare):
    # kube-apiserver's selectable values: a Pod without hostNetwork is hostNetwork=false, a Node without
    # unschedulable is unschedulable=false, spec.host is the old name of spec.nodeName
    bare.kubectl("create", "namespace", "fs-select")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert _call(bare, "POST", "/api/v1/namespaces/fs-select/pods", pod)[0] == 201

    def names(selector: str) -> list[str]:
        code, body = _select(bare, "/api/v1/namespaces/fs-select/pods", selector)
        assert code == 200, body
        return [i["metadata"]["name"] for i in body["items"]]

    assert names("spec.hostNetwork=false") == ["plain"]
    assert names("spec.hostNetwork=true") == []
    assert names("spec.host=") == ["plain"] and names("spec.host=elsewhere") == []
    assert names("metadata.name=plain,spec.nodeName=") == ["plain"]


def test_crd_selectable_fields(bare):
    # a custom resource selects on metadata.name, and on what its CRD declares as selectableFields
    _bad_request(bare, "/apis/karpenter.sh/v1/nodeclaims", "spec.nodeClassRef.name=x",
                 "field label not supported: spec.nodeClassRef.name")
    crd = bare.get_json("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodeclaims.karpenter.sh")
    i = next(n for n, v in enumerate(crd["spec"]["versions"]) if v["name"] == "v1")
    patch = [{"op": "add", "path": f"/spec/versions/{i}/selectableFields",
              "value": [{"jsonPath": ".spec.nodeClassRef.name"}]}]
    bare.kubectl("patch", "crd", "nodeclaims.karpenter.sh", "--type=json", "-p", json.dumps(patch))
    code, body = _select(bare, "/apis/karpenter.sh/v1/nodeclaims", "spec.nodeClassRef.name=x")
    assert code == 200 and body["items"] == []


def test_field_selector_parsing():
    assert field_selector_terms("spec.nodeName=x,metadata.name==a\\,b,status.phase!=Running,,") == [
        ("metadata.name", "=", "a,b"), ("spec.nodeName", "=", "x"), ("status.phase", "!=", "Running")]
    assert parse_field_selector("metadata.name=a\\,b")({"metadata": {"name": "a,b"}})
    # an escaped backslash leaves the comma after it a separator
    assert field_selector_terms("a=b\\\\,c=d") == [("a", "=", "b\\"), ("c", "=", "d")]
    with pytest.raises(BadRequest, match="can't understand 'g'"):
        field_selector_terms("a=b\\\\,g")
    assert parse_field_selector("spec.unschedulable=false")({"kind": "Node", "spec": {}})
    assert parse_field_selector("source=karpenter")({"kind": "Event", "reportingComponent": "karpenter"})
    assert parse_field_selector("status.successful=0")({"kind": "Job"})


# --- names -----------------------------------------------------------------------------------------------------
def test_invalid_namespace_name(bare):
    code, status = _call(bare, "POST", "/api/v1/namespaces",
                         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Bad_Name"}})
    message = f'Invalid value: "Bad_Name": {LABEL_REGEX}'
    assert (code, status["reason"], status["message"]) == (
        422, "Invalid", f'Namespace "Bad_Name" is invalid: metadata.name: {message}')
    assert status["details"] == {"name": "Bad_Name", "kind": "Namespace", "causes": [
        {"reason": "FieldValueInvalid", "message": message, "field": "metadata.name"}]}
    # through kubectl create namespace, in protobuf
    p = bare.kubectl("create", "namespace", "Bad_Name", check=False)
    assert p.returncode != 0 and 'The Namespace "Bad_Name" is invalid: metadata.name: Invalid value' in p.stderr
    # too long: the name, and the kubernetes.io/metadata.name label that carries it
    long = "a" * 64
    code, status = _call(bare, "POST", "/api/v1/namespaces",
                         {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": long}})
    assert code == 422 and status["message"].startswith(f'Namespace "{long}" is invalid: [metadata.name: Invalid '
                                                        f'value: "{long}": must be no more than 63 characters')
    assert "metadata.labels" in status["message"]


def test_invalid_namespace_in_the_path(bare):
    # kube-apiserver does not validate the namespace segment: a list is empty, an object and a namespace are
    # not found
    code, body = _call(bare, "GET", "/api/v1/namespaces/Bad_Name/pods")
    assert code == 200 and body["kind"] == "PodList" and body["items"] == []
    code, status = _call(bare, "GET", "/api/v1/namespaces/Bad_Name/pods/x")
    assert (code, status["reason"], status["message"]) == (404, "NotFound", 'pods "x" not found')
    code, status = _call(bare, "POST", "/api/v1/namespaces/Bad_Name/configmaps",
                         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    assert (code, status["reason"], status["message"]) == (404, "NotFound", 'namespaces "Bad_Name" not found')
    assert status["details"] == {"name": "Bad_Name", "kind": "namespaces"}


def test_names_that_cannot_be_path_segments(bare):
    code, status = _call(bare, "GET", "/api/v1/namespaces/default/pods/a%25b")
    assert (code, status["reason"], status["message"]) == (400, "BadRequest",
                                                           'Name parameter invalid: "a%b": may not contain \'%\'')
    code, status = _call(bare, "GET", "/api/v1/namespaces/a%25b")
    assert (code, status["reason"]) == (400, "BadRequest")
    # "%2F" decodes to "/": no such resource
    code, status = _call(bare, "GET", "/api/v1/namespaces/default/configmaps/a%2Fb")
    assert (code, status["message"]) == (404, "the server could not find the requested resource")
    # an escaped ':' is a ':' (the Python client escapes it)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "karpy:reader"}}
    assert _call(bare, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)[0] == 201
    code, body = _call(bare, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/karpy%3Areader")
    assert code == 200 and body["metadata"]["name"] == "karpy:reader"


@pytest.mark.parametrize("path,kind,name,message", [
    ("/api/v1/namespaces/default/configmaps", "ConfigMap", "Bad_Name", SUBDOMAIN_REGEX),
    ("/api/v1/namespaces/default/secrets", "Secret", "Bad_Name", SUBDOMAIN_REGEX),
    ("/api/v1/namespaces/default/serviceaccounts", "ServiceAccount", "Bad_Name", SUBDOMAIN_REGEX),
    ("/api/v1/namespaces/default/services", "Service", "1bad",
     "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
     "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation "
     "is '[a-z]([-a-z0-9]*[a-z0-9])?')"),
    ("/apis/coordination.k8s.io/v1/namespaces/default/leases", "Lease", "Bad_Name", SUBDOMAIN_REGEX),
    ("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", "Role", "a%b", "may not contain '%'"),
])
def test_invalid_object_names(bare, path, kind, name, message):
    group = path.split("/")[2] if path.startswith("/apis/") else ""
    api_version = f"{group}/v1" if group else "v1"
    body = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
    if kind == "Service":
        body["spec"] = {"ports": [{"port": 80}]}
    code, status = _call(bare, "POST", path, body)
    qualified = f"{kind}.{group}" if group else kind
    assert (code, status["reason"], status["message"]) == (
        422, "Invalid", f'{qualified} "{name}" is invalid: metadata.name: Invalid value: "{name}": {message}')


def test_namespaces_carry_their_name_label(bare):
    code, ns = _call(bare, "POST", "/api/v1/namespaces",
                     {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "labelled", "labels": {"a": "b"}}})
    assert code == 201 and ns["metadata"]["labels"] == {"a": "b", "kubernetes.io/metadata.name": "labelled"}
    code, body = _call(bare, "GET", "/api/v1/namespaces?labelSelector=kubernetes.io%2Fmetadata.name%3Dlabelled")
    assert [i["metadata"]["name"] for i in body["items"]] == ["labelled"]
