"""The finding builder of the advice checks (``advice.py`` runs them): one :class:`Advisor` per request holds the
runner, the run id, the rank, what is known about the ranks and the findings so far; a check module adds its
findings through :meth:`Advisor.add` and :meth:`Advisor.instance`. Text helpers for the findings' prose sit here too.
"""

from __future__ import annotations

from urllib.parse import urlencode

from ascendscope.server.queries import links, ns_str, sources

MAX_INSTANCES = 200

RANKS_SQL = "SELECT rank, has_trace FROM ranks ORDER BY rank"
SLICES_SQL = """
SELECT s.slice_id, s.rank, s.name, s.ts_ns, s.dur_ns FROM slices s WHERE s.slice_id IN (SELECT unnest(?::BIGINT[]))
"""


def fmt_ms(ns) -> str:
    return f"{(ns or 0) / 1e6:,.3f} ms"


def fmt_us(ns) -> str:
    return f"{(ns or 0) / 1e3:,.1f} µs"


def fmt_pct(x) -> str:
    return f"{100 * (x or 0):.1f}%"


def fmt_count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def as_int(v) -> int:
    return 0 if v is None else int(v)


def timeline_url(run_id: str, rank: int | None, slice_id: int | None, ts_ns: int | None, dur_ns: int | None,
                 has_trace: bool = True) -> str | None:
    """The timeline around an instance with its slice selected (``slice``, ``start_ns``/``end_ns`` and ``rank``:
    the parameters the timeline page reads from its URL); the slice fills the middle half of the view."""
    if not has_trace or ts_ns is None:
        return None
    dur = max(0, int(dur_ns or 0))
    pad = max(links.WINDOW_PAD_NS, dur // 2)
    params = {}
    if rank is not None:
        params["rank"] = int(rank)
    if slice_id is not None:
        params["slice"] = int(slice_id)
    params["start_ns"] = int(ts_ns) - pad
    params["end_ns"] = int(ts_ns) + dur + pad
    return f"/runs/{run_id}/timeline?" + urlencode(params)


class Advisor:
    """Builds the findings of one request: the runner, the run id, the rank and what is known about the ranks."""

    def __init__(self, db, run_id: str, rank: int | None):
        self.db, self.run_id = db, run_id
        self.traced = {int(r): bool(t) for r, t in db.rows(RANKS_SQL)}
        ranks = sorted(self.traced)
        self.rank = rank if rank is not None else (ranks[0] if ranks else None)
        self.findings: list[dict] = []
        self.gaps: dict[int, dict] = {}  # slice_id → its gap row (GAP_COLUMNS), read once by gap_checks
        self._source_names: dict[str, dict[int, str]] = {}

    def source_name(self, table: str, rank: int | None) -> str:
        """The file or table ``table``'s rows of ``rank`` came from (the db export's table for a db run)."""
        if table not in self._source_names:
            self._source_names[table] = sources.source_names(self.db, table)
        names = self._source_names[table]
        return names.get(rank) or sources.TABLE_FEEDS[table].text_name

    # ---- building blocks -----------------------------------------------------------------------------------------
    def instance(self, rank: int, slice_id, name, ts_ns, dur_ns, **extra) -> dict:
        out = {"slice_id": None if slice_id is None else int(slice_id), "rank": int(rank), "name": name,
               "ts_ns": ns_str(ts_ns), "dur_ns": None if dur_ns is None else int(dur_ns)}
        out.update(extra)
        return out

    def add(self, category: str, key: str, severity: str, title: str, text: str, *, rank: int | None,
            metrics: dict, source: dict, instances: list[dict], instance_count: int | None = None,
            step=None) -> None:
        total = len(instances) if instance_count is None else int(instance_count)
        self.findings.append({
            "id": f"{category}:{'all' if rank is None else rank}:{key}", "category": category,
            "severity": severity, "title": title, "text": text, "rank": rank, "step": step,
            "metrics": metrics, "source": source, "instances": instances[:MAX_INSTANCES],
            "instance_count": total, "instances_truncated": total > min(len(instances), MAX_INSTANCES),
        })

    def resolve(self) -> None:
        """Instances take name and times from their slice (so a link shows what the row says) and get their link."""
        ids = sorted({i["slice_id"] for f in self.findings for i in f["instances"] if i["slice_id"] is not None})
        known = {}
        if ids:
            for sid, rank, name, ts, dur in self.db.rows(SLICES_SQL, [ids]):
                known[int(sid)] = (int(rank), name, int(ts), int(dur))
        for f in self.findings:
            for inst in f["instances"]:
                s = known.get(inst["slice_id"]) if inst["slice_id"] is not None else None
                if inst["slice_id"] is not None and s is None:
                    inst["slice_id"] = None
                if s is not None:
                    inst["rank"], inst["name"], inst["ts_ns"], inst["dur_ns"] = s[0], s[1], str(s[2]), s[3]
                ts = None if inst["ts_ns"] is None else int(inst["ts_ns"])
                shown = inst["span_ns"] if inst.get("span_ns") is not None else inst["dur_ns"]
                inst["timeline_url"] = timeline_url(self.run_id, inst["rank"], inst["slice_id"], ts, shown,
                                                    self.traced.get(inst["rank"], False))
