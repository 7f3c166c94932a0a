"""A pod's key (``namespace/name``) is one string however many places keep pods by key."""

from __future__ import annotations

import copy

from karpy.state.pods import pod_key


def test_a_pods_key_is_one_string_object_for_every_version_of_the_pod():
    pod = {"metadata": {"name": "web-" + str(1234), "namespace": "shop"}}
    later = copy.deepcopy(pod)
    later["spec"] = {"nodeName": "node-a"}
    a, b = pod_key(pod), pod_key(later)
    assert a == "shop/web-1234" and a is b
    assert pod_key({"metadata": {"name": "x"}}) == "default/x"


def test_a_key_asked_again_follows_a_renamed_pod():
    pod = {"metadata": {"name": "web-1", "namespace": "shop"}}
    assert pod_key(pod) == "shop/web-1"
    pod["metadata"]["name"] = "web-2"  # the same metadata object, changed in place (a caller's own dict)
    assert pod_key(pod) == "shop/web-2"
    pod["metadata"]["namespace"] = "store"
    assert pod_key(pod) == "store/web-2"
    assert pod_key({"metadata": {"name": "web-2", "namespace": "shop"}}) == "shop/web-2"
