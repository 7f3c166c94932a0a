"""``karpy sweep --ray ADDRESS``: the variants as Ray tasks on an existing Ray cluster.

The base is put in Ray's object store once and every task reads it from there; a task returns the same
row a local run computes. The cluster's workers need karpy installed (``pip install 'karpy[ray]'`` in their
image) at the version of the machine that submits the sweep. Ray is an optional extra.
"""

from __future__ import annotations

from typing import Any, Iterator

from .run import InputError, Options


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError(["--ray: Ray is not installed: pip install 'karpy[ray]'"]) from None
    return ray


def _run(base: list[dict], changed: dict[int, dict], opts: Options, full: bool) -> dict:
    from .task import task

    return task(base, changed, opts, full)


def _reachable(address: str) -> None:
    """A host:port that refuses connections is an error now, not after Ray's minute of retries."""
    import socket

    host, sep, port = address.rpartition(":")
    if address in ("auto", "local") or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as e:
        raise InputError([f"--ray: cannot connect to the Ray cluster at {address}: {e}"]) from None


def execute(address: str, base: list[dict], jobs: list[tuple[Any, dict[int, dict]]], opts: Options,
            full: bool) -> Iterator[tuple[Any, dict]]:
    ray = _ray()
    _reachable(address)
    try:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise InputError([f"--ray: cannot connect to the Ray cluster at {address}: {e}"]) from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(_run)
        base_ref = ray.put(base)  # shipped once; every task reads it from the object store
        pending = {remote.remote(base_ref, changed, opts, full): jid for jid, changed in jobs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                yield pending.pop(ref), ray.get(ref)
    finally:
        ray.shutdown()
