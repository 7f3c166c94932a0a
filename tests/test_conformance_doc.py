"""docs/conformance.md stays true: its summary matches its rows, every karpy test it names exists,
covered rows name a passing (non-xfail) test and departs rows an xfail one, and no n/a or missing
row lacks a reason. The checks live in scripts/conformance.py (run it with --fix after adding or
removing an xfail marker, --write after editing rows)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("conformance", ROOT / "scripts" / "conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("conformance", conformance)
_spec.loader.exec_module(conformance)


@pytest.fixture(scope="module")
def doc() -> str:
    return (ROOT / "docs" / "conformance.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def index():
    return conformance.index_tests(ROOT / "tests")


def test_the_doc_passes_every_check(doc, index):
    problems = conformance.check(doc, index)
    assert problems == [], "\n".join(problems[:40])


def test_every_row_has_a_known_status_and_the_doc_is_not_empty(doc):
    suites = conformance.parse(doc)
    rows = [r for s in suites for r in s.rows]
    assert len(suites) >= 30 and len(rows) >= 1300
    assert {r.status for r in rows} <= set(conformance.STATUSES)


def test_covered_rows_name_existing_test_functions(doc, index):
    for s in conformance.parse(doc):
        for r in s.rows:
            if r.status == "covered":
                assert any(t in index.functions for t in conformance.named_tests(r.detail)), r.cells


# --- the checker itself catches what it should ------------------------------------------------

ROWS = """# x

<!-- summary:begin -->
<!-- summary:end -->

## kubernetes-sigs/karpenter `pkg/a_test.go`

Area: **scheduling**

| # | upstream It | status | karpy |
|---|---|---|---|
{rows}
"""


def _problems(rows: str, index) -> list[str]:
    text = conformance.write_summary(ROWS.format(rows=rows))
    return conformance.check(text, index)


def test_checker_accepts_a_good_doc(index):
    good = next(t for t, x in index.functions.items() if x is None)
    rows = "\n".join([
        f"| 1 | C › \"a\" (L1) | covered | `{good}` (note) |",
        "| 2 | C › \"b\" (L2) | n/a | Prometheus metric: karpy exports no metrics yet |",
        "| 3 | C › \"c\" (L3) | missing | to test: a pod with X → no NodeClaim (plan in issue 8) |",
    ])
    assert _problems(rows, index) == []


@pytest.mark.parametrize("row,fragment", [
    ("| 1 | C › \"a\" (L1) | covered | `tests/test_nowhere.py::test_nothing` |", "does not exist"),
    ("| 1 | C › \"a\" (L1) | covered | a test somewhere |", "names no existing test function"),
    ("| 1 | C › \"a\" (L1) | missing | missing |", "without a reason"),
    ("| 1 | C › \"a\" (L1) | missing |  |", "without a reason"),
    ("| 1 | C › \"a\" (L1) | n/a | n/a |", "without a reason"),
    ("| 1 | C › \"a\" (L1) | maybe | `tests/test_api.py` |", "is not one of"),
])
def test_checker_rejects(row, fragment, index):
    assert any(fragment in p for p in _problems(row, index))


def test_checker_flips_covered_and_departs_by_xfail(index):
    name = "tests/test_fake.py::test_known_bug"
    fake = conformance.TestIndex({**index.functions, name: "BUG: something"}, index.classes)
    text = conformance.write_summary(ROWS.format(rows=f"| 1 | C › \"a\" (L1) | covered | `{name}` |"))
    assert any("marked xfail" in p for p in conformance.check(text, fake))
    fixed = conformance.write_summary(conformance.fix_xfail(text, fake))
    assert conformance.check(fixed, fake) == []
    assert "| departs |" in fixed and "xfail: BUG: something" in fixed
    healed = conformance.TestIndex({**index.functions, name: None}, index.classes)
    assert any("not marked xfail any more" in p or "none of its tests is marked xfail" in p
               for p in conformance.check(fixed, healed))
    back = conformance.write_summary(conformance.fix_xfail(fixed, healed))
    assert conformance.check(back, healed) == [] and "| covered |" in back


def test_a_stale_summary_is_reported(doc):
    stale = doc.replace("| **total** |", "| **total** | 1 |", 1)
    assert any("summary does not match" in p for p in conformance.check(stale, conformance.index_tests(ROOT / "tests")))
