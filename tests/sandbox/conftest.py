"""Fixtures: the sandboxes of :mod:`.harness`, one per session each."""

from __future__ import annotations

import pytest

from .harness import RunningSandbox


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory):
    box = RunningSandbox(tmp_path_factory.mktemp("sandbox"), ["--speed", "100", "--watch-history", "100"])
    yield box
    code = box.stop()
    assert code == 0, box.log("stderr")
    assert "Traceback" not in box.log("stderr"), box.log("stderr")


@pytest.fixture(scope="session")
def bare(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bare")
    (tmp / "start.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: preloaded}\n---\n"
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: preloaded-high}\nvalue: 1000\n")
    box = RunningSandbox(tmp, [str(tmp / "start.yaml"), "--no-karpenter", "--speed", "100"])
    yield box
    code = box.stop()
    assert code == 0, box.log("stderr")
    assert "Traceback" not in box.log("stderr"), box.log("stderr")
