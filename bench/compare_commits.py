"""Compare this working tree's speed with a base commit's, on the same machine, in one run.

The base commit is checked out with ``git worktree add --detach`` into a temporary directory; the same
command then runs against each tree in turn (base, current, base, current, ...: ``--rounds`` pairs), with
this virtualenv's interpreter and ``PYTHONPATH`` set to the tree, so ``import karpy`` (and the ``karpy``
console script) load that tree's code while the benchmark script itself is this tree's. Each run's CPU
seconds (user + sys of the child and its children, ``os.wait4``), wall seconds and peak RSS are recorded;
the medians of each side and their ratios (current / base) are printed. Alternating runs share whatever
else the machine is doing, so the ratios hold on a busy machine where absolute seconds do not.

    .venv/bin/python bench/compare_commits.py main~1                       # default: bench/e2e.py diverse 5000
    .venv/bin/python bench/compare_commits.py origin/main --rounds 5 -- bench/e2e.py wide 34
    .venv/bin/python bench/compare_commits.py HEAD~3 --max-ratio 1.10 -- bench/scheduling.py --sizes 5000

Exits 1 when ``--max-ratio`` is given and the CPU ratio exceeds it, 2 when a run fails. Nothing here is a
unit test: timings are reported, never asserted by the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["bench/e2e.py", "diverse", "5000"]


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def run_once(tree: Path, command: list[str], quiet: bool) -> tuple[float, float, float]:
    """(CPU s, wall s, peak RSS MiB) of ``command`` run from this tree with ``tree``'s karpy first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])))
    argv = [sys.executable, *command] if command[0].endswith(".py") else command
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL if quiet else None)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed against {tree} (exit {os.waitstatus_to_exitcode(status)})")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", help="the commit to compare against (anything git rev-parse takes)")
    ap.add_argument("--rounds", type=int, default=3, help="base/current pairs, alternated (default 3)")
    ap.add_argument("--max-ratio", type=float, default=None, help="fail when median CPU current/base exceeds it")
    ap.add_argument("-v", "--verbose", action="store_true", help="show the benchmark's own output")
    ap.epilog = f"after --: the benchmark, run from the repository root (default: {' '.join(DEFAULT)})"
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    command = argv[cut + 1:] or DEFAULT
    sha = git("rev-parse", "--verify", f"{args.base}^{{commit}}")
    head = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    with tempfile.TemporaryDirectory(prefix="karpy-compare-") as tmp:
        base_tree = Path(tmp) / "base"
        git("worktree", "add", "--detach", str(base_tree), sha)
        try:
            sides = {"base": base_tree, "current": ROOT}
            runs: dict[str, list[tuple[float, float, float]]] = {"base": [], "current": []}
            print(f"command: {' '.join(command)}")
            print(f"base    {sha[:12]} ({args.base}) in {base_tree}")
            print(f"current {head}{' + uncommitted changes' if dirty else ''} in {ROOT}")
            for i in range(args.rounds):
                for side in ("base", "current"):
                    r = run_once(sides[side], command, quiet=not args.verbose)
                    runs[side].append(r)
                    print(f"  round {i + 1} {side:<7} CPU {r[0]:8.2f} s  wall {r[1]:8.2f} s  peak RSS {r[2]:7.0f} MiB",
                          flush=True)
        finally:
            git("worktree", "remove", "--force", str(base_tree))
    med = {side: [statistics.median(r[k] for r in runs[side]) for k in range(3)] for side in runs}
    print(f"{'':8}{'CPU s':>10}{'wall s':>10}{'RSS MiB':>10}   (medians of {args.rounds})")
    for side in ("base", "current"):
        print(f"{side:<8}{med[side][0]:10.2f}{med[side][1]:10.2f}{med[side][2]:10.0f}")
    ratios = [med["current"][k] / med["base"][k] if med["base"][k] else float("inf") for k in range(3)]
    print(f"{'ratio':<8}{ratios[0]:10.3f}{ratios[1]:10.3f}{ratios[2]:10.3f}   current / base (< 1: faster)")
    if args.max_ratio is not None and ratios[0] > args.max_ratio:
        print(f"CPU ratio {ratios[0]:.3f} > --max-ratio {args.max_ratio}: REGRESSION")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
