"""``karpy simulate -k DIR``: a kustomization rendered as ``kubectl apply -k DIR`` renders it.

karpy runs ``kubectl kustomize DIR`` (the kustomize built into kubectl, which is what ``kubectl apply
-k`` uses) when ``kubectl`` is on PATH, else ``kustomize build DIR``. There is no maintained Python
implementation of kustomize; rendering with the user's own kubectl gives exactly what they would apply.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from typing import Any

TIMEOUT = 300.0  # seconds: remote bases are fetched over the network


def command(directory: str) -> list[str] | None:
    """The command that renders ``directory``, or None when neither kubectl nor kustomize is on PATH."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        return [kubectl, "kustomize", directory]
    kustomize = shutil.which("kustomize")
    if kustomize:
        return [kustomize, "build", directory]
    return None


class RenderError(Exception):
    pass


def render(directory: str, read: Any) -> str:
    """The manifests ``directory`` renders to. ``read(stream)`` reads the output within the input budget
    (it raises past it). Raises RenderError with a message for the user."""
    if not os.path.exists(directory):
        raise RenderError("no such file or directory")
    cmd = command(directory)
    if cmd is None:
        raise RenderError("rendering a kustomization needs kubectl (kubectl kustomize) or kustomize on PATH, "
                          "and neither is there")
    tool = " ".join([os.path.basename(cmd[0]), cmd[1]])
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        except OSError as e:
            raise RenderError(f"cannot run {tool}: {e.strerror or e}") from None
        timed_out = threading.Event()

        def stop() -> None:  # a hung render must not hang karpy
            timed_out.set()
            proc.kill()

        timer = threading.Timer(TIMEOUT, stop)
        timer.start()
        try:
            with proc.stdout:  # type: ignore[union-attr]
                out = read(proc.stdout)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if timed_out.is_set():
            raise RenderError(f"{tool} did not finish within {int(TIMEOUT)} s")
        if proc.returncode != 0:
            err.seek(0)
            lines = [ln.strip() for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip()]
            detail = "; ".join(lines[-3:]) or f"exit status {proc.returncode}"
            raise RenderError(f"{tool} failed: {detail}")
    return out
