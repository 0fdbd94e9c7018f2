"""From a table row to the timeline: find the slice a kernel or a communication op was drawn as.

A kernel of ``kernel_details.csv`` is the slice on one of its rank's Ascend Hardware tracks with the same name and
``ts_ns = start_ns``. HCCL kernels are not on the hardware tracks but on the Communication op lane, and the CSV
rounds their start to the µs string the trace also rounds differently (±1 ns), so a small tolerance is allowed and
the nearest slice wins. Communication ops (``comm_ops``) carry a float-µs start that is only µs-exact, hence the
larger tolerance there. A rank without a trace has no slices: callers then show "no trace" instead of a link.
"""

from __future__ import annotations

from urllib.parse import urlencode

KERNEL_TOLERANCE_NS = 1_000
COMM_OP_TOLERANCE_NS = 2_000
WINDOW_PAD_NS = 50_000  # a time link opens a little around the thing it points at

TRACE_RANKS_SQL = "SELECT rank FROM ranks WHERE has_trace"

MATCH_SQL = """
WITH want AS (SELECT unnest(?::BIGINT[]) AS start_ns, unnest(?::VARCHAR[]) AS name)
SELECT w.start_ns, w.name, s.slice_id, s.ts_ns, t.kind
FROM want w
JOIN slices s ON s.name = w.name AND s.ts_ns BETWEEN w.start_ns - ? AND w.start_ns + ?
JOIN tracks t ON t.track_id = s.track_id
WHERE s.rank = ? AND t.kind IN ('hardware', 'communication')
"""


def trace_ranks(db) -> set[int]:
    return {int(r[0]) for r in db.rows(TRACE_RANKS_SQL)}


def match_slices(db, rank: int, items: list[tuple[int, str]], tolerance_ns: int,
                 prefer: tuple[str, ...] = ("hardware", "communication")) -> dict[tuple[int, str], int]:
    """``{(start_ns, name): slice_id}`` for the items that have a slice on ``rank``.

    Best match: an exact start on the preferred track kind first, then the nearest start, then the kind order.
    """
    items = [(int(s), n) for s, n in items if s is not None and n is not None]
    if not items:
        return {}
    rows = db.rows(MATCH_SQL, [[s for s, _ in items], [n for _, n in items], tolerance_ns, tolerance_ns, rank])
    best: dict[tuple[int, str], tuple] = {}
    for start, name, slice_id, ts, kind in rows:
        rank_kind = prefer.index(kind) if kind in prefer else len(prefer)
        score = (abs(int(ts) - int(start)), rank_kind, int(slice_id))
        key = (int(start), name)
        if key not in best or score < best[key][0]:
            best[key] = (score, int(slice_id))
    return {k: v[1] for k, v in best.items()}


def slice_url(run_id: str, slice_id: int | None) -> str | None:
    return None if slice_id is None else f"/runs/{run_id}/timeline?{urlencode({'slice': slice_id})}"


def window_url(run_id: str, start_ns: int | None, end_ns: int | None, pad_ns: int = WINDOW_PAD_NS) -> str | None:
    """A timeline link to an absolute time window (``end_ns`` may be None for an instant)."""
    if start_ns is None:
        return None
    end = int(end_ns) if end_ns is not None else int(start_ns)
    return f"/runs/{run_id}/timeline?" + urlencode({"start_ns": int(start_ns) - pad_ns, "end_ns": end + pad_ns})
