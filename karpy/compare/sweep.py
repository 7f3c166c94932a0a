"""``karpy sweep``: every variant of a base simulated, on a process pool of this machine or on Ray.

Rows stream to ``OUT.jsonl`` as variants finish (in the order they finish); ``OUT.csv`` is written at the end
with every row in the sweep's order and whether it is on the Pareto front. A row names its variant by a key
(a digest of the base, the variant and the simulation's options): a sweep started again over the same
``OUT.jsonl`` runs only the variants it does not hold yet.
"""

from __future__ import annotations

import csv
import hashlib
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator

import orjson

from .run import InputError, Options
from .task import task
from .variants import Variant

COLUMNS = ("costPerHour", "costPerHourAverage", "nodeClaims", "nodeClaimsLaunched", "podsPending", "disruptions",
           "podsEvicted")
MIX_COLUMNS = ("instanceTypes", "capacityTypes", "architectures", "disruptionsByReason")


# --- running the jobs ------------------------------------------------------------------------------------------

_BASE: list[dict] = []


def _init(base: list[dict]) -> None:
    global _BASE
    _BASE = base


def _pool_task(changed: dict[int, dict], opts: Options, full: bool) -> dict:
    return task(_BASE, changed, opts, full)


def execute(base: list[dict], jobs: list[tuple[Any, dict[int, dict]]], opts: Options, *, workers: int = 1,
            full: bool = False, ray_address: str | None = None) -> Iterator[tuple[Any, dict]]:
    """(job id, result) for every job, as each finishes: in this process (one worker), on a pool of
    ``workers`` processes that each receive the base once, or as Ray tasks."""
    if ray_address is not None:
        from .ray_backend import execute as ray_execute

        yield from ray_execute(ray_address, base, jobs, opts, full)
        return
    if workers <= 1 or len(jobs) <= 1:
        for jid, changed in jobs:
            yield jid, task(base, changed, opts, full)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")  # fork: the base is not copied
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx, initializer=_init,
                               initargs=(base,))
    try:
        pending = {pool.submit(_pool_task, changed, opts, full): jid for jid, changed in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                yield pending.pop(f), f.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


# --- rows, resuming, the Pareto front ---------------------------------------------------------------------------

def digest(obj: Any) -> str:
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def row_key(base_digest: str, v: Variant, opts: Options) -> str:
    return digest({"base": base_digest, "variant": v.spec, "options": opts.key()})


def read_rows(path: str) -> list[dict]:
    """The rows a previous run wrote; a last line cut short (the run was killed mid-write) is dropped from
    the file, so that the rows appended next start on a line of their own."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise InputError([f"{path}: {e.strerror}"]) from None
    keep = data[:data.rfind(b"\n") + 1]
    if keep != data:
        with open(path, "wb") as f:
            f.write(keep)
    rows = []
    for n, line in enumerate(keep.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise InputError([f"{path}:{n}: not a row of karpy sweep (JSON Lines)"]) from None
        if not isinstance(row, dict) or "key" not in row:
            raise InputError([f"{path}:{n}: not a row of karpy sweep (no key)"])
        rows.append(row)
    return rows


def pareto(rows: list[dict], cost: str = "costPerHour", disruption: str = "podsEvicted") -> list[dict]:
    """The rows no other row beats on both cost and disruption, cheapest first. Only the variants that left
    the fewest pods pending compete: a NodePool that cannot run the workload is cheap and not an option."""
    if not rows:
        return []
    fewest = min(r["podsPending"] for r in rows)
    cand = [r for r in rows if r["podsPending"] == fewest]
    front = [r for r in cand
             if not any(o[cost] <= r[cost] and o[disruption] <= r[disruption]
                        and (o[cost] < r[cost] or o[disruption] < r[disruption]) for o in cand)]
    return sorted(front, key=lambda r: (r[cost], r[disruption], r["index"]))


def _mix(d: dict) -> str:
    return ";".join(f"{k}={n}" for k, n in d.items())


def write_csv(path: str, rows: list[dict], axes: list[str], front: list[dict]) -> None:
    on_front = {r["key"] for r in front}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        # the mixes are named apart from the axes (an axis may be called capacityTypes too)
        w.writerow(["index", "variant", *axes, *COLUMNS, "pareto", *(f"{c}AtEnd" for c in MIX_COLUMNS[:3]),
                    MIX_COLUMNS[3], "key"])
        for r in rows:
            w.writerow([r["index"], r["variant"], *(flat(r["values"].get(a)) for a in axes),
                        *(r[c] for c in COLUMNS), str(r["key"] in on_front).lower(),
                        *(_mix(r[c]) for c in MIX_COLUMNS), r["key"]])


def flat(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "+".join(flat(x) for x in v)
    if isinstance(v, dict):
        return orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()
    return "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def run(base: list[dict], variants: list[Variant], opts: Options, out: str, base_digest: str, *,
        workers: int = 1, ray_address: str | None = None,
        on_row: Callable[[dict, int, int], None] | None = None) -> tuple[list[dict], int]:
    """Run the variants ``OUT.jsonl`` does not hold yet, appending each row as it finishes. Returns every row
    of the sweep in its order and how many were already there."""
    jsonl = out + ".jsonl"
    keys = {row_key(base_digest, v, opts): v for v in variants}
    old = read_rows(jsonl)
    stale = [r for r in old if r["key"] not in keys]
    if stale:
        raise InputError([f"{jsonl}: holds {len(stale)} row(s) of another sweep (another base, sweep file or "
                          f"options), such as {stale[0].get('variant')!r}: give another --out, or remove it"])
    done = {r["key"]: r for r in old}
    todo = [(k, v) for k, v in keys.items() if k not in done]
    by_key = {k: v for k, v in todo}
    with open(jsonl, "ab") as f:
        for n, (k, m) in enumerate(execute(base, [(k, v.changed) for k, v in todo], opts, workers=workers,
                                           ray_address=ray_address), 1):
            v = by_key[k]
            row = {"index": v.index, "variant": v.name, "values": v.values, "key": k, **m}
            f.write(orjson.dumps(row) + b"\n")
            f.flush()
            done[k] = row
            if on_row is not None:
                on_row(row, n, len(todo))
    rows = []
    for k, v in keys.items():  # the current names and order, whatever a previous run called them
        rows.append({**done[k], "index": v.index, "variant": v.name, "values": v.values})
    return rows, len(keys) - len(todo)
