"""The ConsolidationOptimizer's global re-packing: which new nodes hold a set of pods most cheaply.

Pure numbers in, numbers out (no karpy objects, no I/O, no clock). A cutting-stock model solved by column
generation: a *pattern* is a node type and how many pods of each class it holds; the master problem chooses
how many nodes of each pattern to launch so that every class's pods are covered at least cost (an LP, solved by
HiGHS), and its dual prices say what each class is worth. A new pattern is worth adding when its pods are worth
more than its type costs; the most valuable pattern for every type at once comes from one two-dimensional
knapsack table (CPU x memory, sizes rounded up to the table's grid, so every pattern fits for real). When no
pattern is worth adding, the LP is as cheap as any packing can be. The integer choice is a dive: every pattern the
LP uses (nearly) whole is launched, then the patterns are priced again for the pods left, until none are; every
node chosen is shrunk to the cheapest type its pods fit. Nothing depends on time or chance: the same input gives
the same nodes.

Classes are zoned: pods keep the zone they run in, so zone spreads keep their counts; a class may cap how many
of its pods one node takes (hostname anti-affinity or spread: one), and may only go on the types it tolerates
and selects (``compat``).

The nodes the pods run on now may be offered as patterns too (``keep``: each node's pods per class and its
price, less what moving its pods would have to save): the plan keeps such a node as it is when no re-packing of
its pods pays for the move, so only the nodes whose pods really move are disrupted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .highs import deterministic_highs as _highs

CPU_CELLS = 480  # the knapsack table's grid: CPU and memory cells across the largest type
MEM_CELLS = 768
MAX_ROUNDS = 120  # column generation rounds per zone (each adds up to one pattern per type)
ROUND_UP = 0.75  # the share of a pattern the dive rounds up to a whole node
DIVE_ROUNDS = 10  # and after each step of the dive


@dataclass
class Packing:
    """Per zone, the nodes to launch: (type index, pods per class)."""

    nodes: list[list[tuple[int, np.ndarray]]]
    cost: float  # what they cost together, the nodes kept included
    bound: float  # the LP's cost: no packing of these pods into these types (or the nodes kept) is cheaper
    kept: list[list[int]] | None = None  # per zone, the ``keep`` nodes the plan keeps as they are
    patterns: list[tuple[int, np.ndarray]] | None = None  # every pattern the column generation found


class _Table:
    """The two-dimensional knapsack: for class values ``v``, the most valuable multiset of classes (within the
    per-node caps and the zone's counts) that fits every type's CPU and memory, read off one table."""

    def __init__(self, sizes: np.ndarray, alloc: np.ndarray):
        top = alloc[:, :2].max(axis=0)
        self.unit = np.maximum(top / np.array([CPU_CELLS, MEM_CELLS]), 1e-9)
        self.cells = np.ceil(sizes[:, :2] / self.unit - 1e-9).astype(int)  # rounded up: patterns fit for real
        self.cap = np.floor(alloc[:, :2] / self.unit + 1e-9).astype(int)
        self.shape = (int(self.cap[:, 0].max()) + 1, int(self.cap[:, 1].max()) + 1)

    def best(self, values: np.ndarray, limit: np.ndarray, allowed: np.ndarray) -> list[np.ndarray]:
        """For every type, the pods per class of the most valuable pattern (``allowed``: T x I)."""
        out: list[np.ndarray | None] = [None] * len(self.cap)
        for row in {tuple(r) for r in allowed}:
            mask = np.array(row, dtype=bool)
            types = [t for t in range(len(self.cap)) if tuple(allowed[t]) == row]
            for t, y in zip(types, self._solve(values, np.where(mask, limit, 0), [self.cap[t] for t in types])):
                out[t] = y
        return out  # type: ignore[return-value]

    def _solve(self, values: np.ndarray, limit: np.ndarray, caps: list[np.ndarray]) -> list[np.ndarray]:
        n = len(values)
        dp = np.zeros(self.shape, dtype=np.float32)
        steps: list[tuple[int, int, np.ndarray]] = []  # (class, copies, where taking them won: from (copies' cells))
        for i in np.flatnonzero((values > 1e-12) & (limit > 0)):
            a, b = self.cells[i]
            if a >= self.shape[0] or b >= self.shape[1]:
                continue
            left, k = int(limit[i]), 1
            while left > 0:  # bounded copies as 1, 2, 4, ... items (binary splitting)
                take = min(k, left)
                left -= take
                da, db = a * take, b * take
                if da >= self.shape[0] or db >= self.shape[1]:
                    break
                gain = dp[: self.shape[0] - da, : self.shape[1] - db] + np.float32(values[i] * take)
                won = gain > dp[da:, db:] * np.float32(1 + 1e-6) + np.float32(1e-9)
                if won.any():  # ``gain`` is a new array: the table can be updated in place
                    np.maximum(dp[da:, db:], gain, out=dp[da:, db:])
                    steps.append((int(i), take, won))
                k *= 2
        out = []
        for cap in caps:
            y = np.zeros(n)
            c, m = int(cap[0]), int(cap[1])
            for i, take, won in reversed(steps):
                da, db = self.cells[i][0] * take, self.cells[i][1] * take
                if c >= da and m >= db and won[c - da, m - db]:
                    y[i] += take
                    c -= self.cells[i][0] * take
                    m -= self.cells[i][1] * take
            out.append(y)
        return out


def _master(cols: list[tuple[int, np.ndarray]], price, demand: np.ndarray, used: set[int] = frozenset()):
    """The LP over the patterns so far: ``price(t)`` of a pattern's type; a pattern of type ``t < 0`` is the node
    there now numbered ``-1 - t``, at most once, and not at all once ``used``."""
    import highspy

    n, m = len(demand), len(cols)
    a = np.array([y for _, y in cols], dtype=float).T  # classes x patterns
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = m, n
    lp.col_cost_ = np.array([price(t) for t, _ in cols], dtype=float)
    lp.col_lower_ = np.zeros(m)
    lp.col_upper_ = np.array([highspy.kHighsInf if t >= 0 else (0.0 if -1 - t in used else 1.0) for t, _ in cols],
                             dtype=float)
    lp.row_lower_ = demand.astype(float)
    lp.row_upper_ = np.full(n, highspy.kHighsInf)
    rows, colidx = np.nonzero(a)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.searchsorted(rows, np.arange(n + 1)).astype(np.int32)
    lp.a_matrix_.index_ = colidx.astype(np.int32)
    lp.a_matrix_.value_ = a[rows, colidx]
    h = _highs()
    h.passModel(lp)
    h.run()
    sol = h.getSolution()
    x = np.asarray(sol.col_value, dtype=float) if sol.value_valid else None
    return h.getInfo().objective_function_value, np.asarray(sol.row_dual, dtype=float), x


def pack(sizes: np.ndarray, counts: np.ndarray, cap: np.ndarray, alloc: np.ndarray, price: np.ndarray,
         compat: np.ndarray, keep: list[list[tuple[np.ndarray, float, float]]] | None = None,
         start: list[tuple[int, np.ndarray]] | None = None) -> Packing | None:
    """``sizes`` I x 2 (CPU, memory of one pod of each class), ``counts`` Z x I (pods per zone), ``cap`` I (most
    pods of a class on one node), ``alloc`` T x 3 (CPU, memory, pods a type offers pods), ``price`` Z x T (inf:
    not offered in the zone), ``compat`` T x I (the class may go on the type); ``keep``, per zone, the nodes that
    hold these pods now: (pods per class, what keeping it weighs in the choice, what it costs); ``start``,
    patterns (type, pods per class) to start the column generation from (an earlier packing's ``patterns``).
    None when some class fits no type offered in its zone."""
    zones, n = counts.shape
    kept_out: list[list[int]] = []
    table = _Table(sizes, alloc)
    fits = compat & np.all(sizes[None, :, :2] <= alloc[:, None, :2] + 1e-9, axis=2)  # T x I
    out: list[list[tuple[int, np.ndarray]]] = []
    cost = bound = 0.0
    # patterns found for one zone serve the others (where offered)
    pool: list[tuple[int, np.ndarray]] = [(t, y) for t, y in start or [] if y.sum() <= alloc[t, 2]
                                          and np.all(y <= cap) and np.all(fits[t] | (y == 0))
                                          and np.all(y @ sizes <= alloc[t, :2] + 1e-9)]
    for z in range(zones):
        demand = counts[z].astype(float)
        if not demand.any():
            out.append([])
            continue
        offered = np.isfinite(price[z])
        zp = np.where(offered, price[z], 0.0)
        here = list(keep[z]) if keep is not None else []
        # the nodes there now come first, as columns of their own (type -1-k, at most one each, never pooled)
        cols = [(-1 - k, np.asarray(y, dtype=float)) for k, (y, _, _) in enumerate(here)]
        cols += [(t, y) for t, y in pool if offered[t]]
        weight = np.array([w for _, w, _ in here], dtype=float)

        def col_price(t: int) -> float:
            return float(weight[-1 - t]) if t < 0 else float(zp[t])
        for i in np.flatnonzero(demand):  # a start: each class alone on the cheapest type it fits
            ok = [t for t in np.flatnonzero(fits[:, i] & offered)]
            if not ok:
                return None
            t = min(ok, key=lambda t: (zp[t], t))
            y = np.zeros(n)
            y[i] = max(1.0, min(cap[i], demand[i], _most(sizes[i], alloc[t])))
            cols.append((int(t), y))
        allowed = compat & offered[:, None]  # sizes are the table's own check
        seen = {(t, tuple(y)) for t, y in cols}

        def generate(want: np.ndarray, rounds: int) -> tuple[float, np.ndarray | None]:
            """Column generation for the pods ``want``: the LP's cost and pattern counts."""
            limit = np.minimum(cap, want)
            lpv, x = 0.0, None
            for _ in range(rounds):
                lpv, duals, x = _master(cols, col_price, want, used)
                added = False
                for t, y in enumerate(table.best(np.maximum(duals, 0.0), limit, allowed)):
                    if y is None or not offered[t] or not y.any() or y.sum() > alloc[t, 2]:
                        continue
                    if zp[t] - float(duals @ y) < -1e-7 and (t, tuple(y)) not in seen:
                        seen.add((t, tuple(y)))
                        cols.append((t, y))
                        added = True
                if not added:
                    break
            return lpv, x

        # the integer choice by diving: launch every pattern the LP uses whole, (or, when it uses none whole,
        # the one it uses most), then generate again for the pods left, until none are
        left = demand.copy()
        nodes: list[tuple[int, np.ndarray]] = []
        used: set[int] = set()  # the nodes there now that the dive keeps (or can no longer keep)
        kept: list[int] = []
        first = True
        while left.any():
            lpv, x = generate(left, MAX_ROUNDS if first else DIVE_ROUNDS)
            if x is None:
                return None
            if first:
                bound += lpv
                first = False
            whole = np.floor(x + 1 - ROUND_UP)  # a pattern the LP uses nearly whole is launched whole
            if not whole.any():
                whole[int(np.argmax(x))] = 1.0
            for k in sorted(np.flatnonzero(whole), key=lambda k: (cols[k][0] >= 0, -cols[k][1].sum(), k)):
                t = cols[k][0]
                if t < 0:  # a node there now, kept as it is when every pod it holds is still to be placed
                    if -1 - t in used:
                        continue
                    used.add(-1 - t)
                    if np.all(cols[k][1] <= left):
                        left -= cols[k][1]
                        kept.append(-1 - t)
                    continue
                for _ in range(int(whole[k])):
                    y = np.minimum(cols[k][1], left)
                    if not y.any():
                        continue
                    left -= y
                    nodes.append((_shrink(y, sizes, alloc, zp, offered, compat), y))
            # a node there now whose pods are partly placed elsewhere can no longer be kept whole
            used.update(-1 - t for t, y in cols if t < 0 and not np.all(y <= left))
        pool = [(t, y) for t, y in cols if t >= 0]
        out.append(nodes)
        kept_out.append(kept)
        cost += sum(zp[t] for t, _ in nodes) + sum(here[k][2] for k in kept)
    return Packing(out, cost, bound, kept_out if keep is not None else None, pool)


def _most(size: np.ndarray, alloc: np.ndarray) -> float:
    return float(np.min(np.floor((alloc[:2] + 1e-9) / np.maximum(size[:2], 1e-9))))


def _shrink(y: np.ndarray, sizes: np.ndarray, alloc: np.ndarray, price: np.ndarray, offered: np.ndarray,
            compat: np.ndarray) -> int:
    """The cheapest type offered that holds the pods ``y`` (ties: the lower index)."""
    load = sizes[:, :2].T @ y
    ok = offered & np.all(alloc[:, :2] + 1e-9 >= load, axis=1) & (alloc[:, 2] >= y.sum()) \
        & np.all(compat[:, y > 0], axis=1)
    return int(min(np.flatnonzero(ok), key=lambda t: (price[t], t)))


def fractional(demand: np.ndarray, pods: float, alloc: np.ndarray, price: np.ndarray) -> float:
    """The cheapest fractional cover of CPU, memory (``demand``) and ``pods`` by the types offered (finite
    ``price``): no packing of these pods costs less."""
    import highspy

    offered = np.flatnonzero(np.isfinite(price))
    if not len(offered):
        return float("inf")
    a = alloc[offered].T.astype(float)  # 3 x T
    m = len(offered)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = m, 3
    lp.col_cost_ = price[offered].astype(float)
    lp.col_lower_ = np.zeros(m)
    lp.col_upper_ = np.full(m, highspy.kHighsInf)
    lp.row_lower_ = np.array([demand[0], demand[1], pods], dtype=float)
    lp.row_upper_ = np.full(3, highspy.kHighsInf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array([0, m, 2 * m, 3 * m], dtype=np.int32)
    lp.a_matrix_.index_ = np.tile(np.arange(m, dtype=np.int32), 3)
    lp.a_matrix_.value_ = a.reshape(-1)
    h = _highs()
    h.passModel(lp)
    h.run()
    return float(h.getInfo().objective_function_value)
