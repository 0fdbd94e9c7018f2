"""communication*.json's millisecond and microsecond values become integer ns exactly as ``decimal`` rounds them
(half to even), also on the fast path that shifts plain decimal text as digits."""
from __future__ import annotations

import random
from decimal import Decimal, InvalidOperation

import pytest

from ascendscope.ingest.commfiles import _ms_to_ns, _scaled, _us_to_ns


def by_decimal(value, digits: int) -> int | None:
    """What the ingest computed before the fast path: Decimal of the value's text, scaled, rounded (None for
    what is not a finite number: Infinity used to raise OverflowError)."""
    if value is None or value == "":
        return None
    try:
        return int((Decimal(str(value)) * 10 ** digits).to_integral_value())
    except (InvalidOperation, ValueError, OverflowError):
        return None


EDGES = [0, 1, -1, 0.0, -0.0, 1.5, 2.5, -2.5, -3.5, "0.0000005", "0.0000015", "0.0000025", "-0.0000025",
         "0.00000050000001", "0.00000049999999", "12.3456785", "12.3456775", "1.", "5", "-7", " 1.5", "+1.5", ".5",
         "1_000", "1e3", "1E-7", 1e-7, 1e22, float("inf"), float("nan"), "nan", "abc", True, [1], {"a": 1},
         10 ** 25, -(10 ** 25), "123456789012345678901234567.8915", 123456.789012345, 0.1 + 0.2]


@pytest.mark.parametrize("digits", [3, 6])
def test_edges_agree_with_decimal(digits):
    for value in EDGES:
        assert _scaled(value, digits) == by_decimal(value, digits), value


@pytest.mark.parametrize("digits", [3, 6])
def test_random_values_agree_with_decimal(digits):
    rng = random.Random(17)
    for _ in range(20_000):
        kind = rng.randrange(4)
        if kind == 0:  # floats as the profiler writes them (repr), of every magnitude
            value = rng.uniform(-1, 1) * 10 ** rng.randrange(-9, 12)
        elif kind == 1:  # decimal text with a tie or near-tie past the kept digits
            value = f"{rng.randrange(-10**6, 10**6)}.{rng.randrange(10**digits):0{digits}d}" + rng.choice(
                ["5", "50", "500001", "49999", "", "0", "6"])
        elif kind == 2:
            value = rng.randrange(-10 ** 21, 10 ** 21)
        else:  # long text, past what the fast path takes
            value = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 30))) + "." + "".join(
                rng.choice("0123456789") for _ in range(rng.randrange(0, 12)))
        assert _scaled(value, digits) == by_decimal(value, digits), value


def test_ms_and_us():
    assert _ms_to_ns(0.0123) == 12_300 and _us_to_ns("1700000000123456.789") == 1_700_000_000_123_456_789
    assert _ms_to_ns(None) is None and _us_to_ns("") is None
