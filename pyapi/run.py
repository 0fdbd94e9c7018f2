"""A run from Python: :class:`Run` answers with the numbers of the dashboard's views, as pandas DataFrames.

Open one with :func:`ascendscope.open`. Each table method is the view's own query (``ascendscope.tables``), over
a read-only, locked-down connection (``ascendscope.readonly``); ``arrow=True`` returns a ``pyarrow.Table``
instead. Times are integer nanoseconds (columns ending ``_ns``; absolute ones are epoch ns), sizes in MB or KB as
their names say. :meth:`Run.sql` runs your own reading query over the tables of ``docs/schema.md``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ascendscope import frames, readonly, sqlproc, tables
from ascendscope.locate import Located
from ascendscope.server.queries import DuckRunner, Page
from ascendscope.server.queries import communication as cq
from ascendscope.server.queries import phases as phq
from ascendscope.server.queries import serving as svq
from ascendscope.server.queries import summary as sq
from ascendscope.server.schema_check import check_schema

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


class Run:
    """One ingested run, opened read-only. Use it as a context manager, or call :meth:`close`."""

    def __init__(self, located: Located):
        self.id: str = located.run_id
        self.name: str = located.name
        self.database: Path = located.database
        self.data_dir: Path | None = located.data_dir
        self._conn = readonly.connect(located.database)
        check_schema(self._conn)  # an older ascendscope's file would be misread: open(..., reingest=True)
        self._ranks: list[int] | None = None
        self._sql: sqlproc.SqlProcess | None = None

    # ---- basics ------------------------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<ascendscope.Run {self.id!r}: {len(self.ranks)} rank(s) from {self.database}>"

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._sql is not None:
            self._sql.close()
            self._sql = None
        self._conn.close()

    def _db(self) -> DuckRunner:
        return DuckRunner(self._conn.cursor())

    @property
    def ranks(self) -> list[int]:
        """The run's ranks (those with a trace and those without)."""
        if self._ranks is None:
            self._ranks = [int(r) for (r,) in self._conn.cursor().execute(
                "SELECT rank FROM ranks ORDER BY rank").fetchall()]
        return list(self._ranks)

    def info(self) -> dict[str, Any]:
        """The Summary view's base information (source, ranks, steps, versions, files) and each rank's
        configuration (``ranks``: device, profiler level and config, versions, parallel groups, environment)."""
        db = self._db()
        ranks = sq.rank_metadata(db)
        base = sq.base_info(db, ranks, sq.breakdown(db))
        return {**base, "ranks": ranks, "parallel_groups": sq.parallel_groups(ranks)}

    # ---- the views' tables -------------------------------------------------------------------------------------
    def table(self, name: str, *, arrow: bool = False, **filters) -> pd.DataFrame | pa.Table:
        """Any exportable table by name (``ascendscope.tables.TABLES``: steps, kernels, kernel_instances, operators,
        memory, memory_allocations, communication, communication_ops, advice) with the view's filters."""
        if name not in tables.TABLES:
            raise ValueError(f"no table {name!r}; choose one of {', '.join(tables.TABLES)}")
        function, accepted = tables.TABLES[name]
        unknown = sorted(set(filters) - set(accepted))
        if unknown:
            raise TypeError(f"table {name!r} has no filter {', '.join(unknown)} (it takes {', '.join(accepted)})")
        frame = frames.to_frame(function(self._db(), self.id, **filters))
        return frames.to_arrow(frame) if arrow else frame

    def steps(self, rank: int | None = None, source: str = "auto", *, arrow: bool = False) -> pd.DataFrame | pa.Table:
        """Summary: per (rank, step) computing, communication (not overlapped = exposed), overlapped, free,
        preparing, stage, bubble and e2e time in ns, and the ratios. ``source``: ``step_trace``
        (step_trace_time.csv), ``overlap`` (derived from the Overlap Analysis lane) or ``auto`` (the CSV where a
        rank has it)."""
        return self.table("steps", rank=rank, source=source, arrow=arrow)

    def kernels(self, rank: int | None = None, group_by: str = "name", kind: str = "all", step: int | None = None,
                *, arrow: bool = False) -> pd.DataFrame | pa.Table:
        """Operator: device kernels grouped ``by`` type, name, name_shapes or core — count, total/avg/min/max/wait ns
        and share of the rank's kernel time. ``kind``: all, computing or communication; ``step``: one step."""
        return self.table("kernels", rank=rank, group_by=group_by, kind=kind, step=step, arrow=arrow)

    def kernel_instances(self, rank: int | None = None, *, arrow: bool = False, **filters) -> pd.DataFrame | pa.Table:
        """Operator: every kernel (or those of one group: ``group_by`` + ``group_key``) with its timeline slice."""
        return self.table("kernel_instances", rank=rank, arrow=arrow, **filters)

    def operators(self, rank: int | None = None, group_by: str = "name", *, arrow: bool = False
                  ) -> pd.DataFrame | pa.Table:
        """Operator: host torch ops (operator_details.csv) with host and device self/total ns, per name,
        name_shapes, or ``none`` (one row per op)."""
        return self.table("operators", rank=rank, group_by=group_by, arrow=arrow)

    def memory(self, rank: int | None = None, *, arrow: bool = False) -> pd.DataFrame | pa.Table:
        """Memory: per rank and component, the peak allocated / reserved / active MB and when they were reached."""
        return self.table("memory", rank=rank, arrow=arrow)

    def memory_allocations(self, rank: int | None = None, *, arrow: bool = False, **filters
                           ) -> pd.DataFrame | pa.Table:
        """Memory: the operator allocations (operator_memory.csv); ``is_peak`` marks the peak."""
        return self.table("memory_allocations", rank=rank, arrow=arrow, **filters)

    def communication(self, rank: int | None = None, step: str | None = None, group: str | None = None, *,
                      arrow: bool = False) -> pd.DataFrame | pa.Table:
        """Communication: per rank elapse, transit, wait, synchronization and idle ns, the wait and synchronization
        ratios and bandwidth per transport. ``step`` is a step key such as ``step50``; ``group`` an HCCL group."""
        return self.table("communication", rank=rank, step=step, group=group, arrow=arrow)

    def communication_ops(self, rank: int | None = None, *, arrow: bool = False, **filters
                          ) -> pd.DataFrame | pa.Table:
        """Communication: every HCCL op with its times and ratios."""
        return self.table("communication_ops", rank=rank, arrow=arrow, **filters)

    def advice(self, rank: int | None = None, *, arrow: bool = False) -> pd.DataFrame | pa.Table:
        """Advice: the findings (category, severity, title, text, and the ``metrics`` they rest on) of one rank, or
        of all ranks with the cross-rank findings (``rank`` empty)."""
        return self.table("advice", rank=rank, arrow=arrow)

    def communication_findings(self, step: str | None = None, group: str | None = None) -> dict[str, Any]:
        """Communication: the slow ranks (elapse more than 10% below the longest), the rank that waits the most,
        the slowest link per transport, and the view's advice in plain words."""
        db = self._db()
        totals = cq.rank_totals(db, step, group)
        return {"slow_ranks": totals["slow_ranks"], "most_waiting": totals["most_waiting"],
                "advice": totals["advice"], "slow_links": cq.slow_links(db, step, group)}

    def phases(self, *, arrow: bool = False, **filters) -> pd.DataFrame | pa.Table:
        """Phases: every mstx range of every rank (role, rank, iteration, phase, the message verbatim, microbatch,
        source ``host``/``device``, slice_id, start_ns, end_ns, dur_ns), by start time; ``filters``: role, rank,
        iteration, phase, source. :meth:`phases_summary` has what they add up to."""
        unknown = sorted(set(filters) - set(phq.FILTERS))
        if unknown:
            raise TypeError(f"phases has no filter {', '.join(unknown)} (it takes {', '.join(phq.FILTERS)})")
        got = phq.rows(self._db(), self.id, filters, Page(0, 2 ** 62))
        rows = [{**r, "start_ns": int(r["start_ns"]), "end_ns": int(r["end_ns"])} for r in got["rows"]]
        frame = frames.to_frame(tables.Table(phq.ROW_COLUMNS, rows))
        return frames.to_arrow(frame) if arrow else frame

    def phases_summary(self) -> dict[str, Any]:
        """The Phases view's figures: per iteration its wall time and deciding chain, per iteration × role busy and
        idle ns, per rank its idle gaps, the iteration × phase table, per pipeline stage its bubble and ratio."""
        return phq.summary(self._db())

    def requests(self, start_ns: int | None = None, end_ns: int | None = None, *, arrow: bool = False
                 ) -> pd.DataFrame | pa.Table:
        """Serving (msServiceProfiler): every request overlapping [start_ns, end_ns] (epoch ns; None: unbounded)
        — arrival and end, input and output tokens, queue wait, TTFT, prefill, decode, e2e and TPOT in ns."""
        return self._serving("requests", start_ns, end_ns, arrow)

    def batches(self, start_ns: int | None = None, end_ns: int | None = None, *, arrow: bool = False
                ) -> pd.DataFrame | pa.Table:
        """Serving: every batch overlapping the range — start and end, model execution ns, size, prefill and
        decode requests, and the request ids it held (``rids``)."""
        return self._serving("batches", start_ns, end_ns, arrow)

    def _serving(self, which: str, start_ns, end_ns, arrow: bool):
        columns, rows = svq.table_rows(self._db(), which, start_ns, end_ns)
        frame = frames.to_frame(tables.Table(columns=list(columns), rows=rows))
        return frames.to_arrow(frame) if arrow else frame

    # ---- SQL ---------------------------------------------------------------------------------------------------
    def sql(self, query: str, params: list | tuple | dict | None = None, *, arrow: bool = False,
            timeout_s: float | None = sqlproc.DEFAULT_TIMEOUT_S,
            memory_limit: str | None = sqlproc.MEMORY_LIMIT) -> pd.DataFrame | pa.Table:
        """Your own reading query over the run's tables (docs/schema.md), with ``?`` or ``$name`` parameters.
        One statement of SELECT / WITH / DESCRIBE / SHOW / SUMMARIZE / EXPLAIN; no file access; anything else
        raises :class:`ascendscope.ReadOnlyQueryError` (its ``code`` names the rule).

        Bounded as the dashboard's SQL console is: it runs in a process of its own (``ascendscope.sqlproc``),
        stopped after ``timeout_s`` (:class:`~ascendscope.readonly.QueryTimedOut`), with DuckDB's ``memory_limit``
        and an address-space limit a little above it (``out_of_memory``, or ``query_crashed`` when the process had
        to end). ``None`` lifts either; with both lifted the query runs in this process, as fast as DuckDB goes.
        Sums of integers (HUGEINT) and whole-number decimals come back as integers."""
        if timeout_s is None and memory_limit is None:
            table = readonly.run_query(self._conn, query, params, fetch="arrow")
        else:
            table = self._worker(memory_limit).arrow(self.database, query, params, timeout_s)
        table = frames.exact_integers(table)
        return table if arrow else frames.sql_frame(table)

    def _worker(self, memory_limit: str | None) -> sqlproc.SqlProcess:
        """The process that runs :meth:`sql` (one per run, started by its first query), held to ``memory_limit``."""
        if self._sql is None or self._sql.limits.memory_limit != memory_limit:
            if self._sql is not None:
                self._sql.close()
            self._sql = sqlproc.SqlProcess(sqlproc.Limits(memory_limit=memory_limit))
        return self._sql

    # ---- export ------------------------------------------------------------------------------------------------
    def export(self, name: str, path: str | os.PathLike, format: str | None = None, **filters) -> Path:
        """Write a table (see :meth:`table`) as CSV or Parquet (``format``, or the file's suffix)."""
        return frames.write(self.table(name, **filters), path, format)

    def export_trace(self, path: str | os.PathLike, ranks: list[int] | None = None, start_ns: int | None = None,
                     end_ns: int | None = None) -> dict:
        """Write the timeline (of ``ranks``, in the window ``[start_ns, end_ns]`` of epoch ns; default: all) as a
        Chrome trace JSON that Perfetto and chrome://tracing open, with the same lanes, slices, counters and flow
        arrows. Returns counts of what was written."""
        from ascendscope import chrometrace

        return chrometrace.write(self._conn, path, ranks=ranks, start_ns=start_ns, end_ns=end_ns)

    # ---- notebooks ---------------------------------------------------------------------------------------------
    def url(self, view: str = "timeline", *, server: str | None = None, **params) -> str:
        """The dashboard page of this run (see :func:`ascendscope.jupyter.view_url`)."""
        from ascendscope import jupyter

        return jupyter.view_url(self.id, view, server=server, **params)

    def show(self, view: str = "timeline", *, rank: int | None = None, start_ns: int | None = None,
             end_ns: int | None = None, server: str | None = None, width: str | int = "100%", height: int = 640,
             **params):
        """Display the view inline in a notebook: an IFrame of the page served by ascendscope behind Jupyter
        (``jupyter-server-proxy``: the ``[jupyter]`` extra), or by ``server`` (``http://127.0.0.1:8000/``).
        The run must be in the data dir that server serves (``open`` puts runs there)."""
        from ascendscope import jupyter

        return jupyter.show(self.id, view, rank=rank, start_ns=start_ns, end_ns=end_ns, server=server, width=width,
                            height=height, **params)
