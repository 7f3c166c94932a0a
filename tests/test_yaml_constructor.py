"""karpy's fast YAML constructor against PyYAML's own constructor (the path it gives way to).

For every example, fixture and deploy manifest and a set of awkward documents, the fast path must build the
same JSON-shaped values as PyYAML's constructor followed by the loader's JSON conversion, and report a key
given twice with the same message and lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from karpy.api import loader

ROOT = Path(__file__).resolve().parents[1]

AWKWARD = [
    "a: 1\nb: [1, 2.5, -3, 0o17, 0x1f, 1_000, 1e3, 1.5e3, yes, no, on, ~, null, '', \"x\"]\n",
    "true: 1\nnull: 2\n3: 4\n1.5: x\n",
    "a: 2026-01-01\nb: 2026-01-01T00:00:00Z\n",
    "a: &x [1, {k: v}]\nb: *x\n",
    "<<: {a: 1}\nb: 2\n",
    "a: !!binary aGVsbG8=\nb: !!set {x, y}\n",
    "[1, [2, [3, {a: [b, {c: d}]}]]]\n",
    "just a string\n",
    "42\n",
    "s: &s word\nt: *s\n",
    "a: !!str 1\nb: !!int '7'\nc: !!float '2'\nd: !!null ''\n",
]
DUPLICATES = ["a: 1\nb: 2\na: 3\n", "x:\n  k: 1\n  'k': 2\n", "1: x\n'1': y\n", "true: 1\n'true': 2\n",
              "m: {a: 1, b: 2, b: 3}\n"]


class _PyYAMLConstructor(loader._Loader):
    def construct_document(self, node: Any) -> Any:
        return yaml.constructor.SafeConstructor.construct_document(self, node)


def _texts() -> list[str]:
    files = sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("tests/**/*.yaml"), *ROOT.glob("deploy/**/*.yaml")])
    return [f.read_text() for f in files] + AWKWARD


def _fast(text: str) -> list:
    return [d.value if isinstance(d, loader._CleanDocument) else loader._to_json(d, [10**9])
            for d in yaml.load_all(text, Loader=loader._Loader)]


def _reference(text: str) -> list:
    return [loader._to_json(d, [10**9]) for d in yaml.load_all(text, Loader=_PyYAMLConstructor)]


def test_the_fast_constructor_builds_what_pyyaml_builds():
    texts = _texts()
    assert len(texts) > 50
    for text in texts:
        assert _fast(text) == _reference(text), text[:200]


@pytest.mark.parametrize("text", DUPLICATES)
def test_a_key_given_twice_is_reported_as_pyyaml_path_reports_it(text: str):
    with pytest.raises(yaml.constructor.ConstructorError) as fast:
        _fast(text)
    with pytest.raises(yaml.constructor.ConstructorError) as reference:
        _reference(text)
    assert str(fast.value) == str(reference.value)
    assert "already defined at line" in str(fast.value)


def test_plain_scalars_resolve_as_pyyaml_resolves_them():
    words = ["1", "1.0", "yes", "No", "~", "null", "0x1A", "0o7", "1_0", ".inf", "-.Inf", ".nan", "2026-01-01", "x", ""]
    for w in words * 2:  # the second time from what was remembered
        node = yaml.compose(f"a: {w}\n", Loader=loader._Loader).value[0][1]
        plain = yaml.compose(f"a: {w}\n", Loader=yaml.SafeLoader).value[0][1]
        expected = plain.tag if plain.tag != "tag:yaml.org,2002:timestamp" else "tag:yaml.org,2002:str"
        assert node.tag == expected, w


def test_loading_leaves_the_cycle_collector_as_it_found_it(tmp_path: Path):
    import gc

    f = tmp_path / "pod.yaml"
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: b}]}\n")
    assert gc.isenabled()
    assert len(loader.load_documents([str(f)]).documents) == 1
    assert gc.isenabled()
    gc.disable()
    try:
        loader.load_documents([str(f)])
        assert not gc.isenabled()
    finally:
        gc.enable()
