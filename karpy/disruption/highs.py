"""The ConsolidationOptimizer's model, solved by HiGHS (``highspy``, the optional extra ``optimizer``).

Pure numbers in, numbers out: no karpy objects, no I/O, no clock. HiGHS runs on one thread with a fixed seed
and a node limit rather than a time limit, so the same input always gives the same answer.

The model (a multi-resource knapsack): remove candidate node ``n`` (binary ``r_n``) and launch ``x_t`` new
nodes of type ``t`` (integer), so that the new nodes hold what the removed nodes' pods request, in every
resource, within each NodePool's budget::

    min  sum_t price_t x_t  -  sum_n (1 - DISRUPTION_COST) price_n r_n
    s.t. sum_t FILL alloc_tk x_t + EXISTING_FILL (free_k + sum_n free_nk (1 - r_n))
             >=  sum_n demand_nk r_n                            for each resource k
         sum_{n in NodePool g} r_n <= budget_g                   for each NodePool g

``free_nk`` is what a kept candidate has unused, ``free_k`` what the other nodes that take moved pods have;
``FILL`` and ``EXISTING_FILL`` leave headroom for what bin packing cannot reach (free room on existing nodes is
scattered, so only half of it is counted); ``DISRUPTION_COST`` makes a removal worth it only
when it saves that share of the node's price, so of two plans saving alike the one disrupting fewer nodes
wins. The LP relaxation's dual prices of the resource rows value each node's pods, and so rank the chosen
nodes by how much they waste (price above what their pods are worth).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GATE = "ConsolidationOptimizer"
PACKAGE = "highspy==1.15.1"
FILL = 0.95
EXISTING_FILL = 0.5
DISRUPTION_COST = 0.05
MIP_MAX_NODES = 100  # branch-and-bound nodes (a deterministic limit, unlike a time limit)
MIP_REL_GAP = 1e-2


def missing() -> str | None:
    """Why the gate cannot run here, or None when the solver is installed."""
    try:
        import highspy  # noqa: F401
    except ImportError:
        return (f"feature gate {GATE} needs the HiGHS solver, which is not installed: "
                f"pip install 'karpy[optimizer]' (or pip install {PACKAGE})")
    return None


@dataclass
class Plan:
    remove: np.ndarray  # bool per candidate
    launch: np.ndarray  # new nodes per type (the model's, for the record; the scheduling simulation decides)
    waste: np.ndarray  # per candidate: its price minus its pods' worth at the LP's dual prices
    objective: float  # the model's cost change, $/h (negative: a saving)


def deterministic_highs():
    """A HiGHS instance that gives the same answer to the same model: one thread, a fixed seed, a node limit
    (for a MIP; an LP ignores it). The re-packing's LPs use it too."""
    import highspy

    h = highspy.Highs()
    for key, v in (("output_flag", False), ("threads", 1), ("random_seed", 0), ("presolve", "on"),
                   ("mip_max_nodes", MIP_MAX_NODES), ("mip_rel_gap", MIP_REL_GAP)):
        h.setOptionValue(key, v)
    return h


def solve(demand: np.ndarray, price: np.ndarray, group: np.ndarray, budget: np.ndarray,
          alloc: np.ndarray, tprice: np.ndarray, free: np.ndarray | None = None,
          free_elsewhere: np.ndarray | None = None) -> Plan:
    """``demand`` N x K, ``free`` N x K and ``price`` N of the candidates, ``group`` N (index into ``budget``,
    the NodePools' remaining allowances), ``alloc`` T x K and ``tprice`` T of the types new nodes may be,
    ``free_elsewhere`` K the room on the other nodes pods may move to."""
    import highspy

    n, k = demand.shape
    t = alloc.shape[0]
    scale = np.maximum(alloc.max(axis=0, initial=0.0), 1.0)  # rows of order 1
    a = FILL * alloc / scale
    d = demand / scale
    f = np.zeros_like(d) if free is None else EXISTING_FILL * np.maximum(free, 0.0) / scale
    room = f.sum(axis=0) + (0.0 if free_elsewhere is None else EXISTING_FILL * np.maximum(free_elsewhere, 0.0) / scale)
    d_eff = d + f  # removing a candidate takes its pods' demand and its free room away
    ncol = n + t
    cost = np.concatenate([-(1.0 - DISRUPTION_COST) * price, tprice]).astype(float)
    # column-wise matrix: candidate columns (-d in resource rows, 1 in its budget row), type columns (a)
    nrow = k + len(budget)
    starts, index, value = [0], [], []
    for i in range(n):
        for r in range(k):
            if d_eff[i, r]:
                index.append(r)
                value.append(-float(d_eff[i, r]))
        index.append(k + int(group[i]))
        value.append(1.0)
        starts.append(len(index))
    for j in range(t):
        for r in range(k):
            if a[j, r]:
                index.append(r)
                value.append(float(a[j, r]))
        starts.append(len(index))
    lp = highspy.HighsLp()
    lp.num_col_ = ncol
    lp.num_row_ = nrow
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(ncol)
    lp.col_upper_ = np.concatenate([np.ones(n), np.full(t, highspy.kHighsInf)])
    lp.row_lower_ = np.concatenate([-room, np.full(len(budget), -highspy.kHighsInf)])
    lp.row_upper_ = np.concatenate([np.full(k, highspy.kHighsInf), budget.astype(float)])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)

    def run(integer: bool):
        h = deterministic_highs()
        if integer:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * ncol
        else:
            lp.integrality_ = []
        h.passModel(lp)
        h.run()
        return h

    relaxed = run(False)
    duals = np.asarray(relaxed.getSolution().row_dual[:k], dtype=float)  # $ per scaled unit, >= 0
    worth = d @ np.maximum(duals, 0.0) / FILL
    waste = price - worth
    mip = run(True)
    sol = mip.getSolution()
    x = np.asarray(sol.col_value, dtype=float) if sol.value_valid else np.zeros(ncol)
    remove = x[:n] > 0.5
    launch = np.rint(x[n:]).astype(int)
    return Plan(remove, launch, waste, float(cost @ np.concatenate([remove.astype(float), launch])))


def select(need: np.ndarray, room: np.ndarray, group: np.ndarray | list, budget: np.ndarray,
           cost: np.ndarray) -> np.ndarray | None:
    """Part of a re-packing within the budgets: ``need`` N x R (what each of N removed nodes holds of each of R
    pod classes), ``room`` M x R (what each of M new nodes has room for), ``group`` N (index into ``budget``, the
    NodePools' remaining allowances), ``cost`` N + M (a removal's negative worth, then a new node's price).
    Chooses the removals and new nodes (binary) of least cost such that the new nodes chosen have room for every
    class the removals chosen hold; the choice per column (N + M booleans), or None when it saves nothing."""
    import highspy

    n, r = need.shape
    m = room.shape[0]
    ncol = n + m
    starts, index, value = [0], [], []
    for i in range(n):
        for k in np.flatnonzero(need[i]):
            index.append(int(k))
            value.append(float(need[i, k]))
        index.append(r + int(group[i]))
        value.append(1.0)
        starts.append(len(index))
    for j in range(m):
        for k in np.flatnonzero(room[j]):
            index.append(int(k))
            value.append(-float(room[j, k]))
        starts.append(len(index))
    lp = highspy.HighsLp()
    lp.num_col_ = ncol
    lp.num_row_ = r + len(budget)
    lp.col_cost_ = np.asarray(cost, dtype=float)
    lp.col_lower_ = np.zeros(ncol)
    lp.col_upper_ = np.ones(ncol)
    lp.row_lower_ = np.full(r + len(budget), -highspy.kHighsInf)
    lp.row_upper_ = np.concatenate([np.zeros(r), budget.astype(float)])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * ncol
    h = deterministic_highs()
    h.passModel(lp)
    h.run()
    sol = h.getSolution()
    if not sol.value_valid:
        return None
    x = np.asarray(sol.col_value, dtype=float) > 0.5
    if float(np.asarray(cost) @ x) >= -1e-9:
        return None
    return x
