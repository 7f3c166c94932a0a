"""JSON merge patch (RFC 7386) when the patch re-sends parts of the stored object itself (a controller writing
back a whole status it read): the result is the value a patch of copies gives, and the parts that come back
unchanged stay the stored objects (stored objects are never mutated, so caches keyed on them keep hitting)."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from karpy.kube.patch import merge_patch

scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["a", "b", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from("wxyz"), inner, max_size=3)),
                      max_leaves=12)
maps = st.dictionaries(st.sampled_from("abcd"), values, max_size=4)


@settings(max_examples=300, deadline=None)
@given(maps, st.data())
def test_a_patch_sharing_the_targets_parts_gives_what_a_patch_of_copies_gives(target, data):
    keys = sorted(target)
    shared = data.draw(st.lists(st.sampled_from(keys), unique=True) if keys else st.just([]))
    extra = data.draw(maps)
    patch = {**extra, **{k: target[k] for k in shared}}  # some values are the target's own objects
    want = merge_patch(copy.deepcopy(target), copy.deepcopy(patch))
    before = copy.deepcopy(target)
    assert merge_patch(target, patch) == want
    assert target == before  # the target is never changed


def test_a_status_sent_back_keeps_its_unchanged_parts():
    capacity = {"cpu": "4", "memory": "16Gi"}
    conditions = [{"type": "Ready", "status": "True"}]
    stored = {"metadata": {"name": "n"}, "status": {"capacity": capacity, "conditions": conditions}}
    status = dict(stored["status"])
    status["conditions"] = conditions + [{"type": "Consolidatable", "status": "True"}]
    out = merge_patch(stored, {"status": status})
    assert out["status"]["capacity"] is capacity
    assert out["status"]["conditions"][-1]["type"] == "Consolidatable"
    assert stored["status"]["conditions"] == [{"type": "Ready", "status": "True"}]


def test_a_null_in_a_map_sent_back_still_removes_its_key():
    labels = {"a": "1", "b": None}
    out = merge_patch({"metadata": {"labels": labels}}, {"metadata": {"labels": labels}})
    assert out == {"metadata": {"labels": {"a": "1"}}}
