"""`karpy simulate` shows its progress on standard error when that is a terminal, and nothing when it
is not or with --quiet; standard output is the same in every case."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tshirt-budgets"


def _karpy() -> list[str]:
    script = Path(sys.executable).with_name("karpy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "karpy.cli"]


def _run(*args: str, tty: bool) -> tuple[str, str]:
    cmd = [*_karpy(), "simulate", str(EXAMPLE), *args]
    if not tty:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout, p.stderr
    master, slave = pty.openpty()
    out_file = tempfile.TemporaryFile()
    try:
        # standard output to a file: a pipe nobody reads while the terminal is drained would fill and block
        proc = subprocess.Popen(cmd, stdout=out_file, stderr=slave)
        os.close(slave)
        err = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            err += chunk
        assert proc.wait(timeout=120) == 0, err.decode(errors="replace")
        out_file.seek(0)
        return out_file.read().decode(), err.decode(errors="replace")
    finally:
        os.close(master)
        out_file.close()


def test_progress_on_a_terminal_and_not_on_a_pipe():
    out_tty, err_tty = _run("-o", "json", tty=True)
    out_pipe, err_pipe = _run("-o", "json", tty=False)
    assert "simulated 2026-01-05T" in err_tty and "pods bound" in err_tty and "NodeClaims" in err_tty
    assert err_tty.rstrip().endswith("\x1b[2K")  # the line is cleared at the end
    assert "simulated" not in err_pipe
    assert out_tty == out_pipe


def test_quiet_silences_the_terminal():
    _, err = _run("-q", "-o", "json", tty=True)
    assert "simulated" not in err
