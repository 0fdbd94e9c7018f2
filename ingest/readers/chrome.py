"""Reader of plain Chrome traces opened on their own: PyTorch/Kineto ``*.pt.trace.json``, GPU or other profilers'
``*.json`` / ``*.json.gz``, a bare event array or ``{"traceEvents": [...]}``.

The events are read and derived exactly as a ``trace_view.json`` (``ingest.trace``): lanes from the process and
thread names (``process_name`` / ``thread_name`` metadata, ``Process <pid>`` / ``Thread <tid>`` without them),
flows paired by ``(cat, id)`` (Kineto's ``ac2g`` launch-to-kernel and ``fwdbwd`` flows included), counters from
``C`` events. Lanes no Ascend process name claims are given a kind by their labels, so they sort and open like
the Ascend ones: a process labelled ``GPU <n>`` (Kineto's kernel, memcpy and memset streams) is a device lane
like Ascend Hardware, and a process running torch ops (``cpu_op``, ``python_function``, ``user_annotation``) is a
host lane like Python (``Operator`` is the older Kineto's name of ``cpu_op``). Kineto writes ``ts`` relative to
``baseTimeNanoseconds`` when that key is present: it is added back, so times are epoch ns like the other formats'.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .. import overlap, trace, tracefile
from .protocol import Found, Job, Staged

SUFFIXES = (".json", ".json.gz")
BASE_TIME_KEY = "baseTimeNanoseconds"
# "Operator" is what Kineto before PyTorch 1.9 (2021) called cpu_op
HOST_CATEGORIES = ("cpu_op", "python_function", "user_annotation", "Operator")


class ChromeTraceLoad(trace.TraceLoad):
    """A TraceLoad that knows Kineto's conventions (lane kinds by label, ts relative to a base time)."""

    UNDERSTOOD_KEYS = trace.TraceLoad.UNDERSTOOD_KEYS | {BASE_TIME_KEY}
    DROP_EVENTS = True  # (nothing reads them after derive())
    EXTRA_KINDS = f"""
                WHEN p.label LIKE 'GPU%' THEN 'hardware'
                WHEN k.pid IN (SELECT DISTINCT pid FROM {{p}}ev
                               WHERE ph = 'X' AND cat IN {HOST_CATEGORIES}) THEN 'python'"""

    def _read_done(self) -> None:
        base = self.extra.get(BASE_TIME_KEY)
        if isinstance(base, int) and not isinstance(base, bool) and base:
            # shifted values beyond the usable range become NULL: _read_done then reports them as unusable ts
            self.sql(f"UPDATE {{p}}ev_t SET ts_ns = CASE WHEN abs(ts_ns) < {trace.TS_LIMIT} THEN ts_ns + {base} END "
                     "WHERE ts_ns IS NOT NULL")
            self.warnings.append(f"ts values are relative to {BASE_TIME_KEY} ({base}): it was added to every time")
        elif base is not None and not isinstance(base, int):
            self.warnings.append(f"{BASE_TIME_KEY} is not an integer ({str(base)[:40]}): times read as written")
        super()._read_done()


class ChromeTraceReader:
    name = "Chrome trace"
    kinds = ("chrome_trace",)
    timeline_kinds = ("chrome_trace",)
    timeline_only = ("chrome_trace",)

    def claims(self, filename: str) -> bool:
        return False  # inside ASCEND_PROFILER_OUTPUT only trace_view.json is a trace

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        return Found()

    def find_loose(self, path: Path) -> dict[str, Path]:
        if path.name.endswith(SUFFIXES) and tracefile.looks_like_trace(path):
            return {"chrome_trace": path}
        return {}

    def find_ranks(self, folder: Path) -> None:
        return None

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        tl = ChromeTraceLoad(job.cur, job.prefix, path, job.workdir, job.display, on_progress=job.on_progress,
                             on_nested=job.on_nested, split_read=job.split_read, rank=job.rank,
                             on_sliced=job.on_sliced)
        tl.read()
        read = job.cur.execute(f"SELECT count(*) FROM {job.prefix}ev_t").fetchone()[0]  # the file's own events
        added = overlap.derive(job.cur, job.prefix, job.rank)
        stats = tl.derive()
        own = job.cur.execute(f"SELECT count(*) FROM {job.prefix}tracks WHERE kind = 'overlap'").fetchone()[0]
        staged = Staged(rows=min(stats["events"], read), status=tl.status, warnings=list(tl.warnings), timeline=True,
                        overlap_source="derived" if added else "trace" if own else None)
        if added:
            staged.warnings.append(f"no Overlap Analysis lane in the trace: derived one from the device tasks "
                                   f"({added} slices)")
        return staged


READER = ChromeTraceReader()

