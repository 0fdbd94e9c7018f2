"""Cluster tables: small rank-keyed tables the cluster views read instead of the per-rank tables.

Contract:

* :func:`build_cluster_tables` ``(con)`` creates (or replaces), in the connection's default database, from the
  run tables already there (one rank or several):

  - ``cluster_ranks``: one row per rank (device, folder, time range, slice / kernel / communication-op / step /
    warning counts, whether it has a trace);
  - ``cluster_steps``: one row per (rank, step): the step breakdown of the Summary view (``step_trace_time.csv``
    where the rank has it, else derived from its Overlap Analysis lane — the very SQL of ``ingest/breakdown.py``,
    which the Summary view uses too), with ``step_ns`` = Computing + Communication(Not Overlapped) + Free and
    ``exposed_comm_ns`` = Communication(Not Overlapped);
  - ``cluster_comm_matrix``: per rank file, step, comm type, group, op type and link, the summed size and time of
    ``comm_matrix`` (the per-op-type ``total`` slot, or the per-op rows of the older format, op names reduced to
    their type), bandwidth = size / time;
  - ``cluster_collectives``: one row per collective op instance per rank with what the rank did before it
    (``ingest/collectives.py``);
  - ``cluster_phases``: one row per mstx range per rank, with its role and iteration (``ingest/phases.py``);
  - ``cluster_moe_kernels``: the MoE layers' device kernels per rank (GroupedMatmul, token dispatch / combine),
    each with its call number in the step and its tokens (``ingest/experts.py``).

  Every row is computed from one rank's own rows, so the tables of several shards concatenated equal the tables
  built over the whole run. Readers deduplicate matrix links carried by several rank files (the source rank's
  file wins), as the Communication view does.

* :func:`load_cluster_analysis` ``(con, source_root) -> list[str]`` loads msprof-analyze's
  ``cluster_analysis_output/`` (found in ``source_root`` or a folder below it) into ``cluster_analysis_*`` tables,
  times as integer ns (exact, through ``decimal``), and ``cluster_analysis_files`` (one row per file seen: status
  ``loaded``, ``partial``, ``failed`` or ``skipped``). It always creates the tables (empty when there is no such
  folder). Each returned warning starts with the file it is about.
"""

from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path

from . import collectives, experts, jsonfile, phases
from .breakdown import ConnRunner, breakdown
from .columns import insert_columns
from .commfiles import _SLOT, _ms_to_ns, _num, _split_key, _step_id

CLUSTER_DIR = "cluster_analysis_output"
MAX_SEARCH_DEPTH = 3
MAX_WARNINGS_PER_FILE = 20  # then one line counts the rest

# the step breakdown's columns, as breakdown.breakdown() names them -> cluster_steps names
STEP_COLUMNS = (
    ("computing_ns", "computing_ns"), ("communication_ns", "communication_ns"),
    ("communication_not_overlapped_ns", "exposed_comm_ns"), ("overlapped_ns", "overlapped_ns"),
    ("free_ns", "free_ns"), ("preparing_ns", "preparing_ns"), ("stage_ns", "stage_ns"), ("bubble_ns", "bubble_ns"),
    ("communication_not_overlapped_and_exclude_receive_ns", "exposed_comm_excl_receive_ns"),
)
CLUSTER_STEPS_DDL = ("CREATE OR REPLACE TABLE cluster_steps (rank INTEGER, step BIGINT, source VARCHAR, "
                     "step_ns BIGINT, " + ", ".join(f"{c} BIGINT" for _, c in STEP_COLUMNS) + ")")

CLUSTER_RANKS_SQL = """
CREATE OR REPLACE TABLE cluster_ranks AS
SELECT r.rank, r.device_id, r.folder, r.rank_source, r.profiler_level, r.has_trace, r.overlap_source,
       r.start_ns, r.end_ns,
       coalesce((SELECT sum(t.slice_count) FROM tracks t WHERE t.rank = r.rank), 0)::BIGINT AS slice_count,
       (SELECT count(*) FROM kernels k WHERE k.rank = r.rank)::BIGINT AS kernel_count,
       (SELECT count(*) FROM comm_ops c WHERE c.rank = r.rank AND NOT c.is_total)::BIGINT AS comm_op_count,
       (SELECT count(*) FROM steps s WHERE s.rank = r.rank)::BIGINT AS step_count,
       (SELECT count(*) FROM warnings w WHERE w.rank = r.rank)::BIGINT AS warning_count
FROM ranks r ORDER BY r.rank
"""
# Per rank file and link: the op type's `total` slot (new format) or every op's own row (older format, keyed
# per op: the op name loses its `__<tag>_<n>` suffix so the ops of one type add up); LOCAL links are kept.
CLUSTER_MATRIX_SQL = r"""
CREATE OR REPLACE TABLE cluster_comm_matrix AS
WITH m AS (
  SELECT rank, step, step_id, comm_type, group_id,
         CASE WHEN slot IS NULL THEN regexp_replace(op_type, '__\d+(_\d+)*$', '') ELSE op_type END AS op_type,
         src_rank, dst_rank, transport_type, transit_size_mb, transit_time_ns, bandwidth_gbps
  FROM comm_matrix
  WHERE src_rank IS NOT NULL AND dst_rank IS NOT NULL
    AND (slot = 'total' OR (slot IS NULL AND op_type <> 'Total Op Info'))
)
SELECT rank, step, any_value(step_id) AS step_id, comm_type, group_id, op_type, src_rank, dst_rank,
       CASE WHEN count(DISTINCT transport_type) = 1 THEN any_value(transport_type) ELSE 'MIXED' END AS transport_type,
       count(*)::BIGINT AS entries, sum(transit_size_mb) AS transit_size_mb,
       sum(transit_time_ns)::BIGINT AS transit_time_ns,
       CASE WHEN count(*) = 1 THEN any_value(bandwidth_gbps)
            WHEN sum(transit_time_ns) > 0 THEN sum(transit_size_mb) / (sum(transit_time_ns) / 1e6) END AS bandwidth_gbps
FROM m GROUP BY rank, step, comm_type, group_id, op_type, src_rank, dst_rank
ORDER BY rank, step, comm_type, group_id, op_type, src_rank, dst_rank
"""


def build_cluster_tables(con) -> None:
    """Create ``cluster_ranks``, ``cluster_steps``, ``cluster_comm_matrix`` and ``cluster_collectives`` from the run
    tables of ``con``."""
    con.execute(CLUSTER_RANKS_SQL)
    con.execute(CLUSTER_STEPS_DDL)
    rows = breakdown(ConnRunner(con))
    if rows:  # one statement: executemany costs a round trip per row (minutes at 1,000 ranks × 100 steps)
        insert_columns(con, "cluster_steps", [[r["rank"] for r in rows], [r["step"] for r in rows],
                                              [r["source"] for r in rows], [r["e2e_ns"] for r in rows]]
                       + [[r[src] for r in rows] for src, _ in STEP_COLUMNS])
    con.execute(CLUSTER_MATRIX_SQL)
    collectives.build(con)  # cluster_collectives: the late-arrival analysis's instances (ingest/collectives.py)
    phases.build(con)  # cluster_phases: the mstx ranges as phases (ingest/phases.py)
    experts.build_moe_kernels(con)  # cluster_moe_kernels: the MoE layers' kernels (ingest/experts.py)


# --- cluster_analysis_output -------------------------------------------------------------------------------------

STEP_TRACE_FILE = "cluster_step_trace_time.csv"
MATRIX_FILE = "cluster_communication_matrix.json"
COMMUNICATION_FILE = "cluster_communication.json"
GROUPS_FILE = "communication_group.json"

# cluster_step_trace_time.csv header -> column (values in µs become ns)
STEP_TRACE_HEADER = {
    "Computing": "computing_ns", "Communication(Not Overlapped)": "communication_not_overlapped_ns",
    "Overlapped": "overlapped_ns", "Communication": "communication_ns", "Free": "free_ns", "Stage": "stage_ns",
    "Bubble": "bubble_ns",
    "Communication(Not Overlapped and Exclude Receive)": "communication_not_overlapped_and_exclude_receive_ns",
    "Preparing": "preparing_ns",
}
TABLES_DDL = {
    "cluster_analysis_files": "file VARCHAR, kind VARCHAR, rows BIGINT, status VARCHAR",
    "cluster_analysis_step_trace": "src_row INTEGER, step BIGINT, type VARCHAR, \"index\" VARCHAR, rank INTEGER, "
                                   + ", ".join(f"{c} BIGINT" for c in STEP_TRACE_HEADER.values())
                                   + ", extra JSON",
    "cluster_analysis_comm_matrix": "group_name VARCHAR, step VARCHAR, step_id BIGINT, matrix_key VARCHAR, "
                                    "op_type VARCHAR, slot VARCHAR, group_id VARCHAR, src_rank INTEGER, "
                                    "dst_rank INTEGER, transport_type VARCHAR, transit_size_mb DOUBLE, "
                                    "transit_time_ns BIGINT, bandwidth_gbps DOUBLE",
    "cluster_analysis_comm_ops": "group_name VARCHAR, step VARCHAR, step_id BIGINT, op_key VARCHAR, "
                                 "op_name VARCHAR, group_id VARCHAR, is_total BOOLEAN, rank INTEGER, "
                                 "start_ns BIGINT, elapse_time_ns BIGINT, transit_time_ns BIGINT, "
                                 "wait_time_ns BIGINT, synchronization_time_ns BIGINT, idle_time_ns BIGINT, "
                                 "wait_time_ratio DOUBLE, synchronization_time_ratio DOUBLE",
    "cluster_analysis_comm_bandwidth": "group_name VARCHAR, step VARCHAR, op_key VARCHAR, rank INTEGER, "
                                       "transport VARCHAR, transit_size_mb DOUBLE, transit_time_ns BIGINT, "
                                       "bandwidth_gbps DOUBLE, large_packet_ratio DOUBLE, size_distribution JSON",
    "cluster_analysis_groups": "comm_type VARCHAR, group_index INTEGER, ranks INTEGER[]",
}
_TIME_KEYS = {"Elapse Time(ms)": "elapse_time_ns", "Transit Time(ms)": "transit_time_ns",
              "Wait Time(ms)": "wait_time_ns", "Synchronization Time(ms)": "synchronization_time_ns",
              "Idle Time(ms)": "idle_time_ns"}
_INT = re.compile(r"^\s*-?\d+\s*$")


class _Problems:
    """Warnings of one file: the first few verbatim, then a count."""

    def __init__(self, name: str):
        self.name, self.items, self.more = name, [], 0

    def add(self, text: str) -> None:
        if len(self.items) < MAX_WARNINGS_PER_FILE:
            self.items.append(f"{self.name}: {text}")
        else:
            self.more += 1

    def out(self) -> list[str]:
        return self.items + ([f"{self.name}: {self.more} more problems like the above"] if self.more else [])


def find_cluster_dir(source_root: str | Path) -> Path | None:
    """The shallowest ``cluster_analysis_output`` folder at or below ``source_root`` (rank folders not entered)."""
    root = Path(source_root)
    if root.name == CLUSTER_DIR and root.is_dir():
        return root
    level = [root] if root.is_dir() else []
    for _ in range(MAX_SEARCH_DEPTH):
        nxt = []
        for d in level:
            cand = d / CLUSTER_DIR
            if cand.is_dir() and not cand.is_symlink():
                return cand
            try:
                nxt.extend(sorted(p for p in d.iterdir() if p.is_dir() and not p.is_symlink()
                                  and not p.name.endswith("_ascend_pt") and p.name != "ASCEND_PROFILER_OUTPUT"))
            except OSError:
                continue
        level = nxt
    return None


def _us_to_ns(text) -> int | None:
    try:
        return int((Decimal(str(text).strip()) * 1000).to_integral_value())
    except (InvalidOperation, ValueError):
        return None


def _create(con, table: str, rows: list[tuple]) -> None:
    con.execute(f"CREATE OR REPLACE TABLE {table} ({TABLES_DDL[table]})")
    if rows:
        n = len(rows[0])
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * n)})", [list(r) for r in rows])


def _read_step_trace(path: Path, p: _Problems) -> list[tuple]:
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader, [])]
    if not header:
        p.add("empty file")
        return []
    for need in ("Step", "Type", "Index"):
        if need not in header:
            p.add(f"no {need!r} column: file not read")
            return []
    known = {h: i for i, h in enumerate(header)}
    extra_cols = [h for h in header if h not in STEP_TRACE_HEADER and h not in ("Step", "Type", "Index")]
    rows = []
    for n, cells in enumerate(reader, start=1):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            p.add(f"row {n}: {len(cells)} cells for {len(header)} columns, row skipped")
            continue
        get = {h: cells[i].strip() for h, i in known.items()}
        step_text, kind, index = get["Step"], get["Type"], get["Index"]
        step = int(step_text) if _INT.match(step_text) else None
        if step is None and step_text:
            p.add(f"row {n}: step {step_text!r} is not an integer, kept as NULL")
        rank = int(index) if kind == "rank" and _INT.match(index) else None
        if kind == "rank" and rank is None:
            p.add(f"row {n}: rank row with index {index!r}, which is not a rank number; rank kept as NULL")
        times = []
        for h in STEP_TRACE_HEADER:
            v = get.get(h)
            ns = None if v in (None, "") else _us_to_ns(v)
            if v not in (None, "") and ns is None:
                p.add(f"row {n}: {h} {v!r} is not a number, kept as NULL")
            times.append(ns)
        extra = {h: get[h] for h in extra_cols}
        rows.append((n, step, kind, index, rank, *times, json.dumps(extra) if extra else None))
    return rows


def _link_ranks(link: str) -> tuple[int | None, int | None]:
    src, sep, dst = str(link).partition("-")
    if not sep or not _INT.match(src) or not _INT.match(dst):
        return None, None
    return int(src), int(dst)


def _read_matrix(path: Path, p: _Problems) -> list[tuple]:
    data = jsonfile.load(path)
    if not isinstance(data, dict):
        p.add("expected a JSON object keyed by group: file not read")
        return []
    rows = []
    for group, by_step in data.items():
        if not isinstance(by_step, dict):
            p.add(f"group {group!r}: not an object, skipped")
            continue
        for step, entries in by_step.items():
            if not isinstance(entries, dict):
                p.add(f"group {group!r} {step}: not an object, skipped")
                continue
            for key, links in entries.items():
                if not isinstance(links, dict):
                    p.add(f"{group!r} {step} {key}: not an object, skipped")
                    continue
                m = _SLOT.match(key)
                op_type, slot, gid = (m.group("op"), m.group("slot"), m.group("group")) if m else \
                    (_split_key(key)[0], None, _split_key(key)[1])
                for link, v in links.items():
                    src, dst = _link_ranks(link)
                    if src is None or not isinstance(v, dict):
                        p.add(f"{group!r} {step} {key}: link {link!r} is not 'src-dst' with an object, skipped")
                        continue
                    size, ms = v.get("Transit Size(MB)"), v.get("Transit Time(ms)")
                    time_ns = _ms_to_ns(ms)
                    if (ms not in (None, "") and time_ns is None) or (size not in (None, "") and _num(size) is None):
                        p.add(f"{group!r} {step} {key} {link}: size {size!r} / time {ms!r} not numbers, kept as NULL")
                    rows.append((group, step, _step_id(step), key, op_type, slot, gid, src, dst,
                                 v.get("Transport Type"), _num(size), time_ns, _num(v.get("Bandwidth(GB/s)"))))
    return rows


def _read_communication(path: Path, p: _Problems) -> tuple[list[tuple], list[tuple]]:
    data = jsonfile.load(path)
    if not isinstance(data, dict):
        p.add("expected a JSON object keyed by group: file not read")
        return [], []
    ops, bws = [], []
    for group, by_step in data.items():
        if not isinstance(by_step, dict):
            p.add(f"group {group!r}: not an object, skipped")
            continue
        for step, entries in by_step.items():
            if not isinstance(entries, dict):
                p.add(f"group {group!r} {step}: not an object, skipped")
                continue
            for op_key, by_rank in entries.items():
                if not isinstance(by_rank, dict):
                    p.add(f"{group!r} {step} {op_key}: not an object, skipped")
                    continue
                is_total = op_key == "Total Op Info"
                op_name, gid = (None, None) if is_total else _split_key(op_key)
                for rank_text, info in by_rank.items():
                    if not _INT.match(str(rank_text)) or not isinstance(info, dict):
                        p.add(f"{group!r} {step} {op_key}: entry {rank_text!r} is not a rank with an object, skipped")
                        continue
                    rank = int(rank_text)
                    t = info.get("Communication Time Info") or {}
                    start = t.get("Start Timestamp(us)")
                    times = [_ms_to_ns(t.get(k)) for k in _TIME_KEYS]
                    if any(t.get(k) not in (None, "") and v is None for k, v in zip(_TIME_KEYS, times)):
                        p.add(f"{group!r} {step} {op_key} rank {rank}: a time is not a number, kept as NULL")
                    ops.append((group, step, _step_id(step), op_key, op_name, gid, is_total, rank,
                                None if start in (None, "") else _us_to_ns(start), *times,
                                _num(t.get("Wait Time Ratio")), _num(t.get("Synchronization Time Ratio"))))
                    for transport, bw in (info.get("Communication Bandwidth Info") or {}).items():
                        if not isinstance(bw, dict):
                            p.add(f"{group!r} {step} {op_key} rank {rank}: {transport} is not an object, skipped")
                            continue
                        bws.append((group, step, op_key, rank, transport, _num(bw.get("Transit Size(MB)")),
                                    _ms_to_ns(bw.get("Transit Time(ms)")), _num(bw.get("Bandwidth(GB/s)")),
                                    _num(bw.get("Large Packet Ratio")),
                                    json.dumps(bw.get("Size Distribution") or {})))
    return ops, bws


def _read_groups(path: Path, p: _Problems) -> list[tuple]:
    data = jsonfile.load(path)
    if not isinstance(data, dict):
        p.add("expected a JSON object: file not read")
        return []
    rows = []
    for comm_type, groups in data.items():
        if not isinstance(groups, list):
            p.add(f"{comm_type!r}: not a list, skipped")
            continue
        for i, g in enumerate(groups):
            if not isinstance(g, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in g):
                p.add(f"{comm_type!r} group {i}: not a list of ranks, skipped")
                continue
            rows.append((comm_type, i, sorted(g)))
    return rows


def load_cluster_analysis(con, source_root: str | Path) -> list[str]:
    """Load ``cluster_analysis_output/`` under ``source_root`` into the ``cluster_analysis_*`` tables (created
    empty when there is none); the warnings, each naming its file."""
    found = find_cluster_dir(source_root)
    tables: dict[str, list[tuple]] = {t: [] for t in TABLES_DDL}
    warnings: list[str] = []
    if found is not None:
        root = Path(source_root)
        base = found.relative_to(root) if found != root and found.is_relative_to(root) else Path(found.name)

        def read(name: str, kind: str, fn) -> None:
            path = found / name
            if not path.is_file():
                return
            label = str(base / name)
            p = _Problems(label)
            try:
                got = fn(path, p)
            except (OSError, ValueError, UnicodeError, csv.Error) as exc:
                p.add(f"not loaded: {exc}")
                tables["cluster_analysis_files"].append((label, kind, 0, "failed"))
                warnings.extend(p.out())
                return
            parts = got if isinstance(got, tuple) else (got,)
            targets = {"step_trace": ("cluster_analysis_step_trace",), "matrix": ("cluster_analysis_comm_matrix",),
                       "communication": ("cluster_analysis_comm_ops", "cluster_analysis_comm_bandwidth"),
                       "groups": ("cluster_analysis_groups",)}[kind]
            for t, rows in zip(targets, parts):
                tables[t].extend(rows)
            status = "partial" if p.items else "loaded"
            tables["cluster_analysis_files"].append((label, kind, len(parts[0]), status))
            warnings.extend(p.out())

        read(STEP_TRACE_FILE, "step_trace", _read_step_trace)
        read(MATRIX_FILE, "matrix", _read_matrix)
        read(COMMUNICATION_FILE, "communication", _read_communication)
        read(GROUPS_FILE, "groups", _read_groups)
        read_names = {STEP_TRACE_FILE, MATRIX_FILE, COMMUNICATION_FILE, GROUPS_FILE}
        for other in sorted(q for q in found.iterdir() if q.name not in read_names):
            label = str(base / other.name)
            tables["cluster_analysis_files"].append((label, "other", 0, "skipped"))
            warnings.append(f"{label}: not read (ascendscope reads {', '.join(sorted(read_names))})")
    for t, rows in tables.items():
        _create(con, t, rows)
    return warnings
