"""Independent re-readings of the source files, used by the ingest tests as the expected values."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

from tests.samples import PYTORCH_TEXT  # noqa: F401  (the real samples, or their generated twins)
from tests.samples import REAL_SAMPLES as REAL  # noqa: F401


def us_text_to_ns(text: str) -> int:
    """The exact conversion, written independently of ingest: split on the dot, pad the fraction."""
    text = text.strip().strip("\t")
    neg = text.startswith("-")
    whole, _, frac = text.lstrip("-").partition(".")
    frac = (frac + "000000000")[:9]
    ns_times_1e6 = int(whole) * 10**9 + int(frac)  # value in units of 1e-9 µs
    ns = (ns_times_1e6 + 500_000) // 1_000_000 if not neg else -((ns_times_1e6 + 500_000) // 1_000_000)
    return ns


def trace_events(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))


def expected_trace(path: Path) -> dict:
    events = trace_events(path)
    xs = [e for e in events if e.get("ph") == "X"]
    starts = Counter()
    for e in events:
        if e.get("ph") == "s":
            starts[(e.get("cat"), str(e.get("id")))] += 1
    flows = Counter(e.get("cat") for e in events
                    if e.get("ph") == "f" and starts[(e.get("cat"), str(e.get("id")))])
    return {
        "x_count": len(xs),
        "min_ts_ns": min(us_text_to_ns(str(e["ts"])) for e in xs),
        "flows": dict(flows),
        "counter_values": sum(len(e.get("args") or {}) for e in events if e.get("ph") == "C"),
    }


def csv_rows(path: Path) -> int:
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1
