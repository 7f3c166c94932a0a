"""scripts/conformance.py reports progress: the totals per area and the rows whose status changed since a revision."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("conformance_progress", ROOT / "scripts" / "conformance.py")
conformance = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = conformance  # its dataclasses look their module up
_spec.loader.exec_module(conformance)


def doc(*rows: tuple[str, str, str]) -> str:
    """A two-suite doc; rows are (suite, row #, status)."""
    out = []
    for suite, area in (("a_test.go", "disruption"), ("b_test.go", "termination")):
        out += ["", f"## org/repo `{suite}`", "", f"Area: **{area}**", "", "| # | upstream It | status | karpy |",
                "|---|---|---|---|"]
        out += [f"| {n} | It {n} | {st} | a reason long enough |" for s, n, st in rows if s == suite]
    return "\n".join(out) + "\n"


BEFORE = doc(("a_test.go", "1", "missing"), ("a_test.go", "2", "missing"), ("a_test.go", "3", "n/a"),
             ("b_test.go", "1", "missing"))
AFTER = doc(("a_test.go", "1", "covered"), ("a_test.go", "2", "missing"), ("a_test.go", "3", "covered"),
            ("b_test.go", "1", "covered"), ("b_test.go", "2", "n/a"))


def test_changes_count_rows_by_transition_and_area():
    ch = conformance.changes(conformance.parse(BEFORE), conformance.parse(AFTER))
    assert ch == {("disruption", "missing", "covered"): 1, ("disruption", "n/a", "covered"): 1,
                  ("termination", "missing", "covered"): 1, ("termination", "(new)", "n/a"): 1}


def test_report_shows_each_area_with_its_change():
    lines = conformance.report(conformance.parse(AFTER), conformance.parse(BEFORE), "main~1")
    disruption = next(line for line in lines if line.startswith("disruption"))
    assert "3 rows" in disruption and "2 covered (+2)" in disruption and "1 missing (-1)" in disruption
    assert "0 n/a (-1)" in disruption
    total = next(line for line in lines if line.startswith("total"))
    assert "5 rows" in total and "3 covered (+3)" in total
    assert "4 rows changed status since main~1:" in lines
    assert "  termination: missing -> covered: 1" in lines


def test_without_a_base_only_the_totals():
    lines = conformance.report(conformance.parse(AFTER))
    assert not any("changed" in line for line in lines)
    assert any(line.startswith("termination") and "2 rows" in line for line in lines)


def test_the_command_line_against_a_revision():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "conformance.py"), "--base", "HEAD"],
                         capture_output=True, text=True, cwd=ROOT)
    assert "rows changed status since HEAD" in run.stdout
    assert any(line.startswith("disruption") for line in run.stdout.splitlines())
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "conformance.py"), "--base", "no-such-revision"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "cannot read the doc at that revision" in bad.stderr
