"""The NodeClaim lifecycle writes a status by sending only the fields that changed: the stored status is the
one sending the whole status would give, nulls and all."""

from __future__ import annotations

import random

from karpy.controllers.lifecycle import _status_patch
from karpy.kube.patch import merge_patch

FIELDS = ("capacity", "allocatable", "conditions", "providerID", "nodeName", "imageID")


def _value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.4 and depth < 2:
        return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randint(0, 3))}
    if r < 0.55:
        return [{"type": "Ready", "status": rng.choice(["True", None])}]
    return rng.choice(["a", "b", "4", "8Gi"])


def test_the_partial_status_patch_stores_what_the_whole_status_would():
    rng = random.Random(7)
    for _ in range(2000):
        old = {k: _value(rng) for k in FIELDS if rng.random() < 0.7}
        new = dict(old)  # what the controller does: a copy, some fields replaced or added
        for k in FIELDS:
            if rng.random() < 0.3:
                new[k] = _value(rng)
        status_of = {"kind": "NodeClaim", "status": old}
        assert merge_patch(status_of, {"status": _status_patch(old, new)}) == \
            merge_patch(status_of, {"status": new}), (old, new)


def test_unchanged_fields_are_not_sent():
    cap = {"cpu": "4", "memory": "16Gi"}
    old = {"capacity": cap, "allocatable": cap, "providerID": "kwok://a", "conditions": [{"type": "Launched"}]}
    new = {**old, "conditions": [{"type": "Launched"}, {"type": "Registered"}], "nodeName": "n"}
    assert _status_patch(old, new) == {"conditions": new["conditions"], "nodeName": "n"}
