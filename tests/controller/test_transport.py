"""karpy controller warns, once at start, when its credentials would cross a network in clear text or go to a
server whose certificate it does not check; it stays quiet on loopback, over verified TLS, and without
credentials."""

from __future__ import annotations

import io
import json

import pytest
from lightkube.config.kubeconfig import KubeConfig

from karpy.controller.process import ControllerProcess
from karpy.controller.settings import ControllerSettings
from karpy.controller.transport import credential_warnings
from karpy.kube.memory import MemoryAPI


def _config(server: str, user: dict, insecure: bool = False):
    cluster: dict = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    return KubeConfig.from_dict({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}).get()


@pytest.mark.parametrize("server,user,insecure,expected", [
    ("http://10.0.0.5:8080", {"token": "t"}, False, ["clear text"]),
    ("http://api.example.com", {"username": "a", "password": "p"}, False, ["clear text"]),
    ("https://10.0.0.5:6443", {"token": "t"}, True, ["TLS verification"]),
    ("http://127.0.0.1:8080", {"token": "t"}, False, []),
    ("http://[::1]:8080", {"token": "t"}, False, []),
    ("http://localhost:8080", {"token": "t"}, False, []),
    ("https://10.0.0.5:6443", {"token": "t"}, False, []),
    ("http://10.0.0.5:8080", {}, False, []),  # nothing to leak
])
def test_warnings_name_clear_text_and_unverified_servers(server, user, insecure, expected):
    got = [m for m, _ in credential_warnings(_config(server, user, insecure))]
    assert len(got) == len(expected) and all(e in m for e, m in zip(expected, got)), got


class _API(MemoryAPI):
    def __init__(self, config):
        super().__init__()
        self.config = config


def test_the_process_logs_the_warning_once_at_start():
    out = io.StringIO()
    api = _API(_config("http://10.0.0.5:8080", {"token": "secret-token"}))
    proc = ControllerProcess(ControllerSettings(metrics_port=0, health_probe_port=0, bind_address="127.0.0.1",
                                                leader_elect=False), api, log_stream=out)
    proc.start()
    proc.request_stop()
    proc.run()
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    warned = [x for x in lines if "clear text" in x.get("message", "")]
    assert len(warned) == 1 and warned[0]["level"] == "WARN" and warned[0]["server"] == "http://10.0.0.5:8080", warned
    assert "secret-token" not in out.getvalue()
