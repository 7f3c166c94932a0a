"""Keep docs/conformance.md honest: recount its summary and check every karpy test it names.

docs/conformance.md has one section per upstream suite file::

    ## kubernetes-sigs/karpenter `pkg/controllers/provisioning/suite_test.go`

    Area: **provisioning**

    | # | upstream It | status | karpy |
    |---|---|---|---|
    | 1 | Context › "should ..." (L119) | covered | `tests/x.py::TestA::test_b` (note) |

and a summary between ``<!-- summary:begin -->`` and ``<!-- summary:end -->`` that this script
computes from the rows. A row's status is one of:

* ``covered``: the last column names at least one karpy test (``tests/...py::[Class::]test``,
  in backticks) and every test it names exists and is not marked ``xfail``;
* ``departs``: it names a test marked ``xfail`` (karpy documents the departure there) and
  quotes the xfail reason;
* ``n/a``: a reason;
* ``missing``: a reason or plan (never empty, never just "missing").

Every test named anywhere (any status) must exist. Parametrized ids (``test_x[case]``) are
checked by function name.

    python scripts/conformance.py            # check; exit 1 and list the problems
    python scripts/conformance.py --write    # rewrite the summary from the rows
    python scripts/conformance.py --fix      # also flip covered <-> departs where a test's xfail
                                             # marker was added or removed, then rewrite the summary
    python scripts/conformance.py --base REV # also count the rows whose status changed since git
                                             # revision REV (e.g. main~5), by transition and area

It always prints the totals per area and overall.
"""

from __future__ import annotations

import argparse
import ast
import collections
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "conformance.md"
TESTS = ROOT / "tests"

STATUSES = ("covered", "departs", "n/a", "missing")
AREAS = ("scheduling", "provisioning", "disruption", "termination", "expiration", "providers", "appendix")
BEGIN, END = "<!-- summary:begin -->", "<!-- summary:end -->"
HEADING = re.compile(r"^## (\S+) `([^`]+)`\s*$")
AREA = re.compile(r"^Area: \*\*([\w-]+)\*\*")
TEST_ID = re.compile(r"`(tests/[\w/.-]+\.py(?:::\w+)+)(\[[^`]*\])?`")
MIN_REASON = 15  # characters: "missing"/"n/a" rows need a real sentence


@dataclass
class Row:
    lineno: int  # line in the doc
    cells: list[str]

    @property
    def status(self) -> str:
        return self.cells[2].strip()

    @property
    def detail(self) -> str:
        return self.cells[3].strip()


@dataclass
class Suite:
    repo: str
    path: str
    area: str = ""
    rows: list[Row] = field(default_factory=list)


def split_row(line: str) -> list[str]:
    """Cells of a markdown table row; ``\\|`` does not split."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def parse(text: str) -> list[Suite]:
    suites: list[Suite] = []
    cur: Suite | None = None
    for i, line in enumerate(text.splitlines(), 1):
        m = HEADING.match(line)
        if m:
            cur = Suite(m.group(1), m.group(2))
            suites.append(cur)
            continue
        if line.startswith("## ") or line.startswith("# "):
            cur = None
            continue
        if cur is None:
            continue
        m = AREA.match(line)
        if m:
            cur.area = m.group(1)
            continue
        if line.startswith("|") and not line.startswith("|---") and not line.startswith("| #"):
            cells = split_row(line)
            if len(cells) == 4 and cells[0].isdigit():
                cur.rows.append(Row(i, cells))
    return suites


# --- karpy's tests ----------------------------------------------------------------------------

@dataclass
class TestIndex:
    functions: dict[str, str | None]  # id -> xfail reason (None: not xfail)
    classes: set[str]


def _xfail_reason(node: ast.AST) -> str | None:
    for d in getattr(node, "decorator_list", ()):
        src = ast.unparse(d)
        if "xfail" not in src:
            continue
        if isinstance(d, ast.Call):
            for kw in d.keywords:
                if kw.arg == "reason":
                    try:
                        return str(ast.literal_eval(kw.value))
                    except ValueError:
                        return ast.unparse(kw.value)
        return "xfail"
    return None


def index_tests(root: Path = TESTS) -> TestIndex:
    functions: dict[str, str | None] = {}
    classes: set[str] = set()
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root.parent).as_posix()
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        module_xfail = None
        for n in tree.body:  # pytestmark = pytest.mark.xfail(...)
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets):
                if "xfail" in ast.unparse(n.value):
                    module_xfail = "xfail"

        def visit(body, prefix: str, inherited: str | None) -> None:
            for n in body:
                if isinstance(n, ast.ClassDef):
                    cid = f"{prefix}::{n.name}"
                    classes.add(cid)
                    visit(n.body, cid, _xfail_reason(n) or inherited)
                elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test"):
                    functions[f"{prefix}::{n.name}"] = _xfail_reason(n) or inherited

        visit(tree.body, rel, module_xfail)
    return TestIndex(functions, classes)


# --- checks -----------------------------------------------------------------------------------

def named_tests(detail: str) -> list[str]:
    return [m.group(1) for m in TEST_ID.finditer(detail)]


def check(text: str, idx: TestIndex) -> list[str]:
    problems: list[str] = []
    suites = parse(text)
    if not suites:
        return ["no suite sections found"]
    for s in suites:
        where = f"{s.repo} {s.path}"
        if s.area not in AREAS:
            problems.append(f"{where}: area {s.area!r} is not one of {', '.join(AREAS)}")
        if not s.rows:
            problems.append(f"{where}: no rows")
        for r in s.rows:
            at = f"docs/conformance.md:{r.lineno} ({where} row {r.cells[0]})"
            st, detail = r.status, r.detail
            if st not in STATUSES:
                problems.append(f"{at}: status {st!r} is not one of {', '.join(STATUSES)}")
                continue
            ids = named_tests(detail)
            for t in ids:
                if t not in idx.functions and t not in idx.classes:
                    problems.append(f"{at}: names {t}, which does not exist")
            funcs = [t for t in ids if t in idx.functions]
            if st in ("covered", "departs") and not funcs:
                problems.append(f"{at}: {st} but names no existing test function")
            if st == "covered":
                for t in funcs:
                    if idx.functions[t] is not None:
                        problems.append(f"{at}: covered by {t}, which is marked xfail: mark the row departs "
                                        "(scripts/conformance.py --fix)")
            if st == "departs":
                if not any(idx.functions[t] is not None for t in funcs):
                    problems.append(f"{at}: departs, but none of its tests is marked xfail any more: "
                                    "mark the row covered (scripts/conformance.py --fix)")
            if st in ("missing", "n/a"):
                reason = re.sub(r"[`*_]", "", detail).strip()
                if len(reason) < MIN_REASON or reason.lower() in ("missing", "n/a", "not applicable", "todo", "tbd"):
                    problems.append(f"{at}: {st} without a reason")
    want = render_summary(suites)
    have = current_summary(text)
    if have is None:
        problems.append(f"docs/conformance.md: no summary between {BEGIN} and {END}")
    elif have.strip() != want.strip():
        problems.append("docs/conformance.md: the summary does not match the rows (scripts/conformance.py --write)")
    return problems


# --- summary ----------------------------------------------------------------------------------

def counts(suites: list[Suite]) -> dict[str, collections.Counter]:
    by_area: dict[str, collections.Counter] = {a: collections.Counter() for a in AREAS}
    for s in suites:
        for r in s.rows:
            by_area.setdefault(s.area, collections.Counter())[r.status] += 1
    return by_area


def _line(name: str, c: collections.Counter) -> str:
    total = sum(c[s] for s in STATUSES)
    return f"| {name} | {total} | " + " | ".join(str(c[s]) for s in STATUSES) + " |"


def render_summary(suites: list[Suite]) -> str:
    by_area = counts(suites)
    out = ["| area | Its | covered | departs | n/a | missing |", "|---|---:|---:|---:|---:|---:|"]
    total: collections.Counter = collections.Counter()
    for a in AREAS:
        if a == "appendix":
            continue
        out.append(_line(a, by_area[a]))
        total.update(by_area[a])
    out.append(_line("**total**", total))
    if sum(by_area["appendix"].values()):
        out.append(_line("appendix (outside the main suites)", by_area["appendix"]))
    out += ["", "Per suite file:", "", "| suite | area | Its | covered | departs | n/a | missing |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for s in suites:
        c = collections.Counter(r.status for r in s.rows)
        out.append(f"| {s.repo} `{s.path}` | {s.area} | {sum(c.values())} | "
                   + " | ".join(str(c[st]) for st in STATUSES) + " |")
    return "\n".join(out)


def current_summary(text: str) -> str | None:
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def write_summary(text: str) -> str:
    body = "\n" + render_summary(parse(text)) + "\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + body + END + tail


def fix_xfail(text: str, idx: TestIndex) -> str:
    """Flip covered <-> departs where a named test's xfail marker appeared or went."""
    lines = text.splitlines(keepends=True)
    for s in parse(text):
        for r in s.rows:
            funcs = [t for t in named_tests(r.detail) if t in idx.functions]
            xfails = [t for t in funcs if idx.functions[t] is not None]
            cells = list(r.cells)
            if r.status == "covered" and xfails:
                cells[2] = "departs"
                cells[3] = r.detail + "".join(f" — xfail: {idx.functions[t]}".replace("|", "\\|").replace("\n", " ")
                                             for t in xfails)
            elif r.status == "departs" and funcs and not xfails:
                cells[2] = "covered"
                cells[3] = re.sub(r"\s*— xfail: .*$", "", r.detail)
            else:
                continue
            lines[r.lineno - 1] = "| " + " | ".join(cells) + " |\n"
    return "".join(lines)


# --- progress -----------------------------------------------------------------------------------

def statuses(suites: list[Suite]) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(repo, suite path, row #) -> (area, status)."""
    return {(s.repo, s.path, r.cells[0]): (s.area, r.status) for s in suites for r in s.rows}


def changes(old: list[Suite], new: list[Suite]) -> collections.Counter:
    """(area, old status, new status) -> rows, for rows present in both whose status differs; a row only in
    ``new`` counts as ('area', '(new)', status), one only in ``old`` as (area, status, '(gone)')."""
    before, after = statuses(old), statuses(new)
    out: collections.Counter = collections.Counter()
    for k, (area, st) in after.items():
        if k not in before:
            out[(area, "(new)", st)] += 1
        elif before[k][1] != st:
            out[(area, before[k][1], st)] += 1
    for k, (area, st) in before.items():
        if k not in after:
            out[(area, st, "(gone)")] += 1
    return out


def doc_at(rev: str, doc: Path = DOC) -> str:
    rel = doc.resolve().relative_to(ROOT).as_posix()
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel}"], check=True, capture_output=True,
                          text=True).stdout


def report(suites: list[Suite], base: list[Suite] | None = None, rev: str = "") -> list[str]:
    """The totals per area (with the change in each status since ``base``), and the status changes."""
    by_area = counts(suites)
    old = counts(base) if base is not None else None
    out = []
    total: collections.Counter = collections.Counter()
    old_total: collections.Counter = collections.Counter()
    for a in AREAS:
        c = by_area.get(a, collections.Counter())
        total.update(c)
        if old is not None:
            old_total.update(old.get(a, collections.Counter()))
        out.append(_report_line(a, c, old.get(a, collections.Counter()) if old is not None else None))
    out.append(_report_line("total", total, old_total if old is not None else None))
    if base is not None:
        ch = changes(base, suites)
        out.append(f"{sum(ch.values())} rows changed status since {rev}" + (":" if ch else ""))
        for (area, a, b), n in sorted(ch.items()):
            out.append(f"  {area}: {a} -> {b}: {n}")
    return out


def _report_line(name: str, c: collections.Counter, old: collections.Counter | None) -> str:
    def one(st: str) -> str:
        d = c[st] - old[st] if old is not None else 0
        return f"{c[st]} {st}" + (f" ({d:+d})" if d else "")
    return f"{name:<13} {sum(c[s] for s in STATUSES):>5} rows: " + ", ".join(one(st) for st in STATUSES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the summary from the rows")
    ap.add_argument("--fix", action="store_true", help="flip covered/departs by xfail markers, rewrite the summary")
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--base", metavar="REV", help="count the rows whose status changed since this git revision")
    args = ap.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    idx = index_tests()
    if args.fix:
        text = fix_xfail(text, idx)
    if args.fix or args.write:
        text = write_summary(text)
        args.doc.write_text(text, encoding="utf-8")
    problems = check(text, idx)
    for p in problems:
        print(p, file=sys.stderr)
    base = None
    if args.base:
        try:
            base = parse(doc_at(args.base, args.doc))
        except (subprocess.CalledProcessError, ValueError) as e:
            why = str(getattr(e, "stderr", "") or e).strip()
            print(f"--base {args.base}: cannot read the doc at that revision: {why}", file=sys.stderr)
            return 2
    suites = parse(text)
    total = collections.Counter()
    for c in counts(suites).values():
        total.update(c)
    print(", ".join(f"{total[s]} {s}" for s in STATUSES) + f" ({sum(total.values())} rows)")
    for line in report(suites, base, args.base or ""):
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
