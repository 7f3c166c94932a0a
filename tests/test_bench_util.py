"""The benchmarks import karpy from the tree PYTHONPATH names (bench/compare_commits.py's base commit), and from
this repository otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = "import _util, karpy; print(karpy.__file__)"


def _imported(env: dict) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT / "bench", env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_a_tree_named_by_pythonpath_is_the_karpy_a_benchmark_imports(tmp_path):
    (tmp_path / "karpy").mkdir()
    (tmp_path / "karpy" / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    assert Path(_imported(env)) == tmp_path / "karpy" / "__init__.py"


def test_without_pythonpath_a_benchmark_imports_this_repository():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert Path(_imported(env)) == ROOT / "karpy" / "__init__.py"
