"""kubectl's everyday commands on karpy sandbox that used to fail: an update of a Job (its generated selector was
refused as "not auto-generated"), and exec/attach/port-forward (a bare 404, now a message saying why)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from .harness import kubectl_binary

needs_kubectl = pytest.mark.skipif(kubectl_binary() is None, reason="kubectl is not installed")


@needs_kubectl
def test_a_job_can_be_updated(bare):
    bare.kubectl("create", "job", "gaps-job", "--image=busybox", "--", "true")
    created = json.loads(bare.kubectl("get", "job", "gaps-job", "-o", "json").stdout)
    bare.kubectl("label", "job", "gaps-job", "team=infra")
    bare.kubectl("annotate", "job", "gaps-job", "note=x")
    bare.kubectl("patch", "job", "gaps-job", "-p", '{"spec":{"suspend":true}}')
    bare.kubectl("replace", "-f", "-", stdin=bare.kubectl("get", "job", "gaps-job", "-o", "json").stdout)
    job = json.loads(bare.kubectl("get", "job", "gaps-job", "-o", "json").stdout)
    assert job["metadata"]["labels"]["team"] == "infra" and job["metadata"]["annotations"]["note"] == "x"
    assert job["spec"]["suspend"] is True
    assert job["spec"]["selector"] == created["spec"]["selector"]  # the generated one, kept
    # a selector of the user's own is still refused, on create and on update
    changed = bare.kubectl("patch", "job", "gaps-job", "--type=json", "-p",
                           '[{"op":"replace","path":"/spec/selector/matchLabels","value":{"a":"b"}}]', check=False)
    assert changed.returncode != 0 and "`selector` not auto-generated" in changed.stderr


@needs_kubectl
@pytest.mark.parametrize("command", [["exec", "gaps-pod", "--", "ls"], ["attach", "gaps-pod"]])
def test_exec_and_attach_say_the_sandbox_runs_no_containers(bare, command):
    bare.kubectl("run", "gaps-pod", "--image=busybox", check=False)
    p = bare.kubectl(*command, check=False)
    assert p.returncode != 0
    sub = command[0]
    assert f"karpy sandbox runs no containers: pods/{sub} has no process to connect to" in p.stderr, p.stderr


@pytest.mark.parametrize("sub", ["exec", "attach", "portforward", "proxy"])
def test_a_pods_streams_answer_400_with_the_reason(bare, sub):
    req = urllib.request.Request(f"{bare.url}/api/v1/namespaces/default/pods/anything/{sub}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        bare.urlopen(req)
    status = json.loads(e.value.read())
    assert (e.value.code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == f"karpy sandbox runs no containers: pods/{sub} has no process to connect to"
