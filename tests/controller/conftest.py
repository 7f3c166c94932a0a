import pytest

from controller.apiserver import FakeAPIServer
from karpy.kube.client import KubeClient, RetryPolicy, load_config


@pytest.fixture
def server():
    srv = FakeAPIServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def kubeconfig(server, tmp_path):
    return server.kubeconfig(str(tmp_path / "kubeconfig"))


@pytest.fixture
def client(kubeconfig):
    config, in_cluster = load_config(kubeconfig)
    assert not in_cluster
    c = KubeClient(config, retry=RetryPolicy(attempts=6, base=0.01, cap=0.05))
    yield c
    c.close()
