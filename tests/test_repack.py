"""The ConsolidationOptimizer's whole re-packing (karpy/disruption/repack.py): which new nodes hold a set of pods
most cheaply, zone by zone, within each class's per-node cap and the types it may go on."""

from __future__ import annotations

import numpy as np
import pytest

from karpy.disruption import highs, repack

pytestmark = pytest.mark.skipif(highs.missing() is not None, reason="the optional solver (karpy[optimizer]) is not installed")

# the kwok families: c 2 GiB per vCPU, s 4, m 8, priced per vCPU (m dearest), sizes 1 to 16 vCPU
FAMILIES = {"c": (2, 0.02715), "s": (4, 0.0293), "m": (8, 0.0336)}
TYPES = [(f, v) for f in FAMILIES for v in (1, 2, 4, 8, 16)]
ALLOC = np.array([[v * 1000 - 100, v * FAMILIES[f][0] * 1024 - 10, 16 * v] for f, v in TYPES], dtype=float)  # m, MiB, pods
PRICE = np.array([v * FAMILIES[f][1] for f, v in TYPES])


def _check(p: repack.Packing, sizes, counts, cap, compat):
    for z, nodes in enumerate(p.nodes):
        placed = np.zeros(len(sizes))
        for t, y in nodes:
            load = sizes.T @ y
            assert np.all(load <= ALLOC[t, :2]) and y.sum() <= ALLOC[t, 2], "a node holds more than its type offers"
            assert np.all(y <= cap), "a class above its per-node cap"
            assert np.all(compat[t, y > 0]), "a class on a type it may not use"
            placed += y
        assert np.array_equal(placed, counts[z]), "every pod placed once, in its own zone"


def test_cpu_and_memory_heavy_pods_share_nodes_near_the_fractional_bound():
    # 40 CPU-heavy pods (3.5 vCPU, 2 GiB) and 40 memory-heavy ones (0.5 vCPU, 28 GiB) in each of two zones:
    # apart, they need c and m nodes half empty in the other resource; together they fill s nodes
    sizes = np.array([[3500, 2048], [500, 28 * 1024]], dtype=float)
    counts = np.array([[40, 40], [40, 40]], dtype=float)
    cap = np.array([1 << 30, 1 << 30], dtype=float)
    compat = np.ones((len(TYPES), 2), dtype=bool)
    p = repack.pack(sizes, counts, cap, ALLOC, np.tile(PRICE, (2, 1)), compat)
    _check(p, sizes, counts, cap, compat)
    fractional = sum(repack.fractional(counts[z] @ sizes, counts[z].sum(), ALLOC, PRICE) for z in range(2))
    # whole pods cannot fill a node exactly (3 + 4 of them leave 3.4 vCPU and 10 GiB of a m-16x): the LP over
    # node patterns lies above the fractional cover, and the integer choice within 2 % of it
    assert fractional <= p.bound <= p.cost <= 1.02 * p.bound
    # first-fit by CPU with each node the cheapest type for what landed on it (upstream's packing) costs more
    assert p.cost < 0.95 * _first_fit_cost(sizes, counts)


def _first_fit_cost(sizes, counts) -> float:
    total = 0.0
    for z in range(len(counts)):
        pods = sorted((i for i in range(len(sizes)) for _ in range(int(counts[z, i]))), key=lambda i: -sizes[i, 0])
        nodes: list[np.ndarray] = []
        for i in pods:
            for n in nodes:
                if np.all(n + sizes[i] <= ALLOC[:, :2].max(axis=0)):
                    n += sizes[i]
                    break
            else:
                nodes.append(sizes[i].copy())
        total += sum(min(PRICE[t] for t in range(len(TYPES)) if np.all(n <= ALLOC[t, :2])) for n in nodes)
    return total


def test_a_per_node_cap_and_the_types_a_class_may_use_hold():
    sizes = np.array([[250, 256], [1000, 4096]], dtype=float)
    counts = np.array([[6, 10], [0, 3]], dtype=float)
    cap = np.array([1, 1 << 30], dtype=float)  # the first class: one per node (hostname anti-affinity)
    compat = np.ones((len(TYPES), 2), dtype=bool)
    compat[[i for i, (f, _) in enumerate(TYPES) if f == "c"], 1] = False  # the second class avoids the c family
    p = repack.pack(sizes, counts, cap, ALLOC, np.tile(PRICE, (2, 1)), compat)
    _check(p, sizes, counts, cap, compat)
    assert len(p.nodes[0]) >= 6  # six pods that may not share a node


def test_a_class_no_type_in_its_zone_fits_gives_no_packing():
    sizes = np.array([[64000, 1024]], dtype=float)  # 64 vCPU: more than any type
    p = repack.pack(sizes, np.array([[1.0]]), np.array([1 << 30], dtype=float), ALLOC, PRICE[None, :],
                    np.ones((len(TYPES), 1), dtype=bool))
    assert p is None


def test_a_type_not_offered_in_a_zone_is_not_used_there():
    sizes = np.array([[3500, 2048]], dtype=float)
    price = np.tile(PRICE, (2, 1))
    big = [i for i, (_, v) in enumerate(TYPES) if v == 16]
    price[1, big] = np.inf  # no 16-vCPU type in the second zone
    counts = np.array([[8.0], [8.0]])
    p = repack.pack(sizes, counts, np.array([1 << 30], dtype=float), ALLOC, price, np.ones((len(TYPES), 1), dtype=bool))
    _check(p, sizes, counts, np.array([1 << 30]), np.ones((len(TYPES), 1), dtype=bool))
    assert not any(t in big for t, _ in p.nodes[1]) and p.nodes[1]


def test_a_node_already_packed_well_is_kept_and_only_the_wasteful_one_is_replaced():
    # five CPU-heavy pods (3.5 vCPU, 2 GiB). Today a c-16x holds four of them, as full as any node can be, and an
    # m-16x holds the fifth, mostly empty. Moving the c-16x's pods cannot save what a disruption must save; the
    # fifth pod fits a c-4x, a fifth of the m-16x's price.
    sizes = np.array([[3500, 2048]], dtype=float)
    counts = np.array([[5.0]])
    cap = np.array([1 << 30], dtype=float)
    compat = np.ones((len(TYPES), 1), dtype=bool)
    c16, m16 = PRICE[TYPES.index(("c", 16))], PRICE[TYPES.index(("m", 16))]
    keep = [[(np.array([4.0]), c16 * (1 - highs.DISRUPTION_COST), c16),
             (np.array([1.0]), m16 * (1 - highs.DISRUPTION_COST), m16)]]
    p = repack.pack(sizes, counts, cap, ALLOC, PRICE[None, :], compat, keep)
    assert p.kept == [[0]]  # the well-packed node stays as it is
    assert [y.tolist() for _, y in p.nodes[0]] == [[1.0]]  # only the wasteful node's pod moves
    new_cost = sum(PRICE[t] for t, _ in p.nodes[0])
    assert new_cost < 0.25 * m16 and p.cost == pytest.approx(c16 + new_cost)
    # offered nothing to keep, the packing places every pod on new nodes
    q = repack.pack(sizes, counts, cap, ALLOC, PRICE[None, :], compat)
    assert q.kept is None and sum(y.sum() for _, y in q.nodes[0]) == 5
