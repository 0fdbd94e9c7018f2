"""ingest.overlap's interval arithmetic (union, subtract) against the unit points each interval covers.

Integer times make an interval [s, e) the set {s, …, e-1}: union and difference are then plain set operations, and
the disjoint sorted intervals of a set are its runs of consecutive points. ``subtract`` is also the Overlap
Analysis lane's "Communication(Not Overlapped)" and "Free", and the collective breakdown's launch-bound time.
"""

from __future__ import annotations

import numpy as np
import pytest

from ascendscope.ingest.overlap import subtract, union


def points(starts, ends) -> set[int]:
    return {t for s, e in zip(starts.tolist(), ends.tolist()) for t in range(s, e)}


def runs(covered: set[int]) -> tuple[list[int], list[int]]:
    """The disjoint sorted intervals (touching ones merged) covering exactly ``covered``."""
    s, e = [], []
    for t in sorted(covered):
        if e and e[-1] == t:
            e[-1] = t + 1
        else:
            s.append(t)
            e.append(t + 1)
    return s, e


def random_intervals(rng, k: int) -> tuple[np.ndarray, np.ndarray]:
    s = rng.integers(0, 80, k).astype(np.int64)
    return s, s + rng.integers(0, 12, k).astype(np.int64)  # some of zero length


@pytest.mark.parametrize("seed", range(4))
def test_subtract_is_the_difference_of_the_covered_points(seed):
    rng = np.random.default_rng(seed)
    for _ in range(1500):
        a = union(*random_intervals(rng, int(rng.integers(0, 10))))
        b = union(*random_intervals(rng, int(rng.integers(0, 10))))
        got_s, got_e = subtract(*a, *b)
        want = points(*a) - points(*b)
        # zero-length intervals of A cover no point and are dropped, except when B is empty (A is returned as is)
        if len(b[0]) == 0:
            assert np.array_equal(got_s, a[0]) and np.array_equal(got_e, a[1])
            continue
        assert (got_s.tolist(), got_e.tolist()) == runs(want), (a, b)


def test_union_merges_overlapping_and_touching_intervals():
    rng = np.random.default_rng(7)
    for _ in range(1500):
        s, e = random_intervals(rng, int(rng.integers(1, 10)))
        got_s, got_e = union(s, e)
        assert all(got_s[1:] > got_e[:-1])  # disjoint, sorted, none touching
        positive = e > s
        assert points(got_s, got_e) == points(s[positive], e[positive])


def test_subtract_cuts_an_interval_by_several_and_keeps_the_edges():
    a = (np.array([0, 100], dtype=np.int64), np.array([50, 200], dtype=np.int64))
    b = (np.array([-10, 10, 30, 150, 300], dtype=np.int64), np.array([5, 20, 30, 160, 400], dtype=np.int64))
    s, e = subtract(*a, *b)
    # [30, 30) removes nothing, so [20, 50) stays whole; [150, 160) splits [100, 200)
    assert s.tolist() == [5, 20, 100, 160] and e.tolist() == [10, 50, 150, 200]
