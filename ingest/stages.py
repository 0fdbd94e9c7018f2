"""Staging a run's files: rank by rank, or a group of small ranks at a time, and writing their traces.

``write_ranks`` (``ingest.pipeline``) stages the ranks it is given in *stages* (:func:`plan_groups`): a big rank,
or one of a format without a batch stager, alone — each of its files staged by its reader (:func:`stage_file`) —
or consecutive small ranks of one such format (the text export, the db export) together, each file kind of all of
them at once (:func:`stage_kind`, through the reader's ``stage_many``: the same statements as one rank, every one
of them per rank). Each rank still gets its own file entries and warnings, as if staged alone; a group whose
traces fail together is loaded again rank by rank, so one bad trace fails only its rank.

:func:`write_traces` appends each stage's tracks and slices to the run's tables as soon as they are nested, then
its flows, counters and steps, with each rank's ids from its fixed range (a shard, :func:`rank_id_bases`) or
following on from the previous rank's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import wait
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from . import commfiles, csvfiles, overlap, overview, readers, sqlfuncs, trace, tracefile
from .discover import RankSource
from .layout import MAX_SHARD_RANK, SLICE_ID_BITS, TRACK_ID_BITS
from .schema import EMPTY_TABLES
from .trace import IdRangeError, too_many_tracks

# file kinds that yield a timeline (appended by the trace writer in rank order)
TIMELINE_KINDS = readers.TIMELINE_KINDS


@dataclass(frozen=True)
class IdBases:
    """Where a run's ids start, and how many one rank may use (None: unbounded). A single-file run numbers every
    rank's ids on from the previous rank's; a shard gives its rank a fixed range (:func:`rank_id_bases`) so the
    shards of a run union without renumbering."""

    track: int = 0
    slice: int = 0  # slice_id and flow_id
    track_span: int | None = None
    slice_span: int | None = None


def rank_id_bases(rank: int) -> IdBases:
    """The id range of one rank's shard: track ids from ``rank << 16``, slice and flow ids from ``rank << 36``
    (below 2**53 for every rank a track id allows, so the browser's numbers stay exact)."""
    if not 0 <= rank <= MAX_SHARD_RANK:
        raise ValueError(f"rank {rank} is outside the ranks a shard's ids can hold (0..{MAX_SHARD_RANK})")
    return IdBases(track=rank << TRACK_ID_BITS, slice=rank << SLICE_ID_BITS, track_span=1 << TRACK_ID_BITS,
                   slice_span=1 << SLICE_ID_BITS)


class Progress:
    """Receives progress events; the CLI draws a bar from them. Methods may be called from several threads."""

    def begin(self, total_bytes: int, ranks: int) -> None: ...
    def file_start(self, rank: int, name: str, size: int) -> None: ...
    def file_done(self, rank: int, name: str, size: int, seconds: float) -> None: ...
    def phase(self, text: str) -> None: ...
    def file_progress(self, rank: int, name: str, done_bytes: int) -> None:
        """Part of a big file is done (called repeatedly while it loads; ``file_done`` still follows)."""


@dataclass
class RankResult:
    src: RankSource
    idx: int
    prefix: str  # its stage's (see Stage)
    files: list[dict] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    has_trace: bool = False
    overlap_source: str | None = None
    comm: dict[str, list[dict]] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)
    device_id: int | None = None  # from the memory CSVs
    trace_device_id: int | None = None  # from the trace's process labels ("NPU 3")
    csv_prefix: str = ""  # where the typed CSV tables are made: the run's own tables when there is one rank
    trace_entry: dict | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Stage:
    """The ranks staged together under one prefix: one rank (every file staged on its own, by its reader), or a
    group of small ranks of one format (``many``: each file kind of all of them staged at once, by the reader's
    ``stage_many``). Its trace writer waits for ``nested``."""

    idx: int
    prefix: str
    members: list[RankResult]
    many: bool = False
    nested: threading.Event = field(default_factory=threading.Event)  # set once slices are final (or on failure)
    # set once the overview is written or found not needed (or the trace failed): a lone big rank's other files
    # wait for it, so that its trace is read and its slices made on every core
    sliced: threading.Event = field(default_factory=threading.Event)
    nest_ok: bool = False
    failed: bool = False  # the group's traces failed together: each is loaded again alone
    on_sliced: Callable | None = None  # (cursor, prefix): its trace's slices are made (ingest.overview)
    track_limit: int | None = None  # a rank of more tracks is refused (trace.track_limit): its ids have a fixed range

    @property
    def ranks(self) -> list[int]:
        return [res.src.rank for res in self.members]


GROUP_BYTES = 32 << 20  # small ranks are staged (and sharded) together up to this much input …
GROUP_RANKS = 256  # … and this many ranks
# A sharded ingest groups up to a target between these, sized so a run makes at most GROUPS_PER_WORKER tasks per
# worker: a task costs ~0.7 CPU-s whatever its size (a file created, checkpointed and closed, ~350 statements of its
# stage, the level of detail), so at 32 MiB a 64-rank run of 12 MB ranks was 32 tasks of mostly overhead. Fewer,
# larger tasks make a run's first rank browsable later; two even rounds of tasks keep every worker busy to the end
# (1,000 tiny ranks on 2 workers: 18.8–19.6 s in 4 tasks, 20.4–20.9 s in 6, 22.0–23.2 s in 8, 23–24 s in 11; the
# first rank browsable after 10.7 s against 8.1 s in 8; docs/benchmarks.md, issue #17)
GROUP_BYTES_MAX = 128 << 20
GROUPS_PER_WORKER = 2


def group_target(ranks: list[RankSource], workers: int) -> int:
    """The group size of a sharded ingest of ``ranks`` by ``workers`` processes: the smallest that packs their
    groupable ranks, in order (as ``plan_groups`` does), into at most ``GROUPS_PER_WORKER * workers`` groups, so
    the groups come out as even as the ranks allow, within [``GROUP_BYTES``, ``GROUP_BYTES_MAX``]. It depends only
    on the input and the worker count, so a resumed ingest on the same machine plans the same shards and keeps
    those already written."""
    groups = GROUPS_PER_WORKER * max(1, int(workers))
    sizes = [sum(readers.size(kind, path) for kind, path in src.files.items()) for src in ranks if groupable(src)]
    lo = sum(sizes) // groups
    hi = lo + max(sizes, default=0)  # packs into `groups` at most: each group but the last holds over the average
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_pack(sizes, mid)) <= groups:
            hi = mid
        else:
            lo = mid + 1
    return max(GROUP_BYTES, min(GROUP_BYTES_MAX, hi))


def groupable(src: RankSource) -> bool:
    """A rank whose files are all of one reader that stages a file kind of several ranks at once (the text export,
    the db export: ``readers.batch_reader``)."""
    return readers.batch_reader(src.files) is not None


def plan_groups(ranks: list[RankSource], target_bytes: int = GROUP_BYTES, max_ranks: int = GROUP_RANKS
                ) -> list[list[int]]:
    """Indices of ``ranks`` in groups: consecutive groupable ranks of one format together while their input stays
    under ``target_bytes`` (a rank at least that big, or one of a format without a batch stager, is a group of its
    own)."""
    return _pack([sum(readers.size(kind, path) for kind, path in src.files.items()) if groupable(src) else None
                  for src in ranks], target_bytes, max_ranks,
                 families=[getattr(readers.batch_reader(src.files), "name", None) for src in ranks])


def _pack(sizes: list[int | None], target_bytes: int, max_ranks: int = GROUP_RANKS,
          families: list | None = None) -> list[list[int]]:
    """``plan_groups`` of ranks of these input sizes (None: a rank that is not groupable); ``families``: a group
    holds ranks of one family only (their format)."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, n in enumerate(sizes):
        if n is None or n >= target_bytes:
            if current:
                groups.append(current)
                current, size = [], 0
            groups.append([i])
            continue
        if current and (size + n > target_bytes or len(current) >= max_ranks
                        or (families is not None and families[i] != families[current[0]])):
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        groups.append(current)
    return groups


def display_name(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def stage_file(con, stage: Stage, res: RankResult, kind: str, path: Path, root: Path, work: Path,
                progress: Progress, split_read: bool) -> None:
    """Load one file of one rank into staging tables; problems become warnings of that rank."""
    try:
        _stage(con, stage, res, kind, path, root, work, progress, split_read)
    finally:
        if kind in TIMELINE_KINDS:
            stage.nested.set()  # whatever happened, never keep the writer waiting
            stage.sliced.set()  # (nor the rank's other files)


def _entry(res: RankResult, kind: str, path: Path, root: Path) -> tuple[dict, int]:
    display = display_name(path, root)
    if (group := readers.label(kind, path)) is not None:
        display = f"{display}/{group}"
    size = readers.size(kind, path)
    return {"rank": res.src.rank, "file": display, "kind": kind, "size_bytes": size, "rows": None,
            "status": "loaded"}, size


def _stage(con, stage: Stage, res: RankResult, kind: str, path: Path, root: Path, work: Path, progress: Progress,
           split_read: bool) -> None:
    cur = con.cursor()
    sqlfuncs.install(cur)
    rank = res.src.rank
    entry, size = _entry(res, kind, path, root)
    display = entry["file"]
    progress.file_start(rank, display, size)
    t0 = time.perf_counter()
    warnings: list[str] = []
    try:
        if size == 0:
            raise tracefile.TraceFileError("empty file")

        def nested():
            stage.nest_ok = True
            stage.nested.set()

        with trace.track_limit(stage.track_limit):
            got = readers.stage(readers.Job(
                cur=cur, prefix=res.prefix, csv_prefix=res.csv_prefix, rank=rank, display=display,
                workdir=work / f"r{res.idx}",
                on_progress=lambda f: progress.file_progress(rank, display, int(f * size)), on_nested=nested,
                split_read=split_read, on_sliced=stage.on_sliced), kind, path)
        _took(res, got, entry, warnings)
    except Exception as exc:  # noqa: BLE001 - an unexpected bug must not take the other files down with it
        _failed(entry, warnings, exc)
    finally:
        cur.close()
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    _record(res, kind, entry, warnings)
    progress.file_done(rank, display, size, entry["seconds"])


def _took(res: RankResult, got, entry: dict, warnings: list[str]) -> None:
    """What staging a file gave (``readers.Staged``), into its rank's result and file entry."""
    res.has_trace = res.has_trace or got.timeline
    res.overlap_source = got.overlap_source or res.overlap_source
    res.tables.extend(got.tables)
    for name, rows in got.comm.items():
        res.comm.setdefault(name, []).extend(rows)
    entry["rows"], entry["status"] = got.rows, got.status
    warnings.extend(got.warnings)


def _failed(entry: dict, warnings: list[str], exc: BaseException) -> None:
    entry["status"] = "failed"
    if isinstance(exc, (tracefile.TraceFileError, duckdb.Error, ValueError, OSError, UnicodeError)):
        warnings.append(f"not loaded: {error_text(exc)}")
    else:
        warnings.append(f"not loaded (internal error {type(exc).__name__}): {error_text(exc)}")


def _record(res: RankResult, kind: str, entry: dict, warnings: list[str]) -> None:
    with res.lock:
        if kind in TIMELINE_KINDS:
            res.trace_entry = entry
        res.files.append(entry)
        res.warnings.extend((entry["file"], w) for w in warnings)


def stage_kind(con, stage: Stage, kind: str, root: Path, work: Path, progress: Progress) -> None:
    """One file kind of every rank of a group, staged at once (its reader's ``stage_many``); each rank gets its
    file entry and warnings as if its file had been staged alone. The time is shared out by size."""
    cur = con.cursor()
    sqlfuncs.install(cur)
    members = [res for res in stage.members if kind in res.src.files]
    entries = {res.src.rank: _entry(res, kind, res.src.files[kind], root) for res in members}
    total = sum(size for _, size in entries.values()) or 1
    label = f"{members[0].src.files[kind].name} ×{len(members)}"
    progress.file_start(stage.ranks[0], label, total)
    t0 = time.perf_counter()

    def nested():
        stage.nest_ok = True
        stage.nested.set()

    job = readers.Job(cur=cur, prefix=stage.prefix, csv_prefix=members[0].csv_prefix, rank=members[0].src.rank,
                      display=label, workdir=work / f"g{stage.idx}_{kind}",
                      on_progress=lambda f: progress.file_progress(stage.ranks[0], label, int(f * total)),
                      on_nested=nested)
    try:
        with trace.track_limit(stage.track_limit):
            got = readers.stage_many(job, kind, [(res.src.rank, res.src.files[kind],
                                                  entries[res.src.rank][0]["file"]) for res in members])
    except Exception as exc:  # noqa: BLE001 - the kind failed for the whole group
        if kind in TIMELINE_KINDS:
            stage.failed = True  # its ranks' traces are loaded again one by one
            got = None
        else:
            got = dict.fromkeys((res.src.rank for res in members), exc)
    finally:
        cur.close()
        if kind in TIMELINE_KINDS:
            stage.nested.set()
    seconds = time.perf_counter() - t0
    for res in members:
        entry, size = entries[res.src.rank]
        if got is None:
            continue
        warnings: list[str] = []
        outcome = got.get(res.src.rank)
        if isinstance(outcome, BaseException) or outcome is None:
            _failed(entry, warnings, outcome or ValueError("not staged"))
        else:
            _took(res, outcome, entry, warnings)
        entry["seconds"] = round(seconds * size / total, 3)
        _record(res, kind, entry, warnings)
    progress.file_done(stage.ranks[0], label, total, round(seconds, 3))


def error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


DEVICE_FROM_TRACE = """
SELECT rank, arg_min(regexp_extract(label, 'NPU\\s+([0-9]+)', 1), local_track) FROM {p}tracks
WHERE label LIKE 'NPU %' GROUP BY rank
"""
DEVICE_FROM_MEMORY = """
SELECT rank, arg_min(regexp_extract({column}, 'NPU:?\\s*([0-9]+)', 1), src_row) FROM {table}
WHERE {column} LIKE 'NPU%' GROUP BY rank
"""


def _device_ids(cur, stage: Stage, from_trace: bool = False) -> None:
    """Each member's device id: from its trace's process labels ("NPU 3"), or from its memory CSVs."""
    members = {res.src.rank: res for res in stage.members}
    if from_trace:
        probes = [DEVICE_FROM_TRACE.format(p=stage.prefix)]
    else:
        csv_prefix = stage.members[0].csv_prefix
        probes = [DEVICE_FROM_MEMORY.format(table=f"{csv_prefix}{table}", column=column)
                  for table, column in (("memory_record", "device_type"), ("npu_module_mem", "device"))
                  if any(table in res.tables for res in stage.members)]
    for sql in probes:
        try:
            rows = cur.execute(sql).fetchall()
        except duckdb.Error:
            continue
        for rank, value in rows:
            res = members.get(int(rank))
            if res is None or value in (None, ""):
                continue
            if from_trace and res.trace_device_id is None:
                res.trace_device_id = int(value)
            elif not from_trace and res.device_id is None:
                res.device_id = int(value)


def write_traces(con, stages: list[Stage], trace_tasks: dict, bases: IdBases | None, at: list[int]) -> None:
    """Append each stage's trace tables to the run's tables, in stage order and as soon as they are ready: its
    tracks and slices once nested (while its flows are still being derived, and later stages and the CSVs still
    load), then its flows, counters and steps, each part in one transaction; a stage that fails part way is
    removed again. Then free its staging tables. ``bases``: each rank's fixed id range (a shard), else ids
    follow on from ``at`` (track, slice, flow: the next free of each), which is advanced."""
    cur = con.cursor()
    try:
        for stage in stages:
            task = trace_tasks.get(stage.idx)
            if task is None:
                continue
            stage.nested.wait()
            traced = [res for res in stage.members if res.has_trace or res.trace_entry is not None]
            if not stage.nest_ok or stage.failed:
                task.result()
                trace.drop_stage(cur, stage.prefix)
                continue
            ranks = [res.src.rank for res in stage.members]
            try:
                _device_ids(cur, stage, from_trace=True)
                counts = trace.staged_counts(cur, stage.prefix, flows=False)
                rows = _offsets(counts, bases, at, flows=False)
                trace.write_offsets(cur, stage.prefix, rows)
                _in_transaction(cur, trace.write_slices, stage.prefix, overlap.DERIVED_PID)
                task.result()
                if stage.failed:
                    raise _GroupFailed()
                # (a transaction only sees tables that existed when it began: the flows are newer)
                if any(res.has_trace for res in stage.members):
                    counts = trace.staged_counts(cur, stage.prefix)
                    trace.write_offsets(cur, stage.prefix, _offsets(counts, bases, at, flows=True))
                    _in_transaction(cur, trace.write_rest, stage.prefix)
                    _advance(at, counts, bases)
                else:  # failed after nesting: nothing of it is kept
                    _in_transaction(cur, trace.unwrite, ranks)
            except _GroupFailed:
                _in_transaction(cur, trace.unwrite, ranks)
            except (duckdb.Error, IdRangeError) as exc:
                _in_transaction(cur, trace.unwrite, ranks)
                # its derivations may still run (the flows after the slices): they end before their tables go,
                # and its file entries exist once they have
                _settle(task)
                traced = [res for res in stage.members if res.has_trace or res.trace_entry is not None]
                if stage.many and len(traced) > 1:
                    stage.failed = True
                    continue
                for res in traced:
                    res.has_trace = False
                    with res.lock:
                        if res.trace_entry is not None and res.trace_entry["status"] != "failed":
                            res.trace_entry["status"] = "failed"
                            res.warnings.append((res.trace_entry["file"], f"not loaded: {error_text(exc)}"))
            finally:
                trace.drop_stage(cur, stage.prefix)
    finally:
        cur.close()


def _settle(task) -> None:
    """Wait for a staging task to end, whatever its outcome (its own errors are its file's warnings)."""
    try:
        task.result()
    except Exception:  # noqa: BLE001 - recorded by the task itself
        pass


class _GroupFailed(Exception):
    """A group's traces failed together (each is loaded again alone)."""


def _offsets(counts: dict, bases: IdBases | None, at: list[int], flows: bool) -> list[tuple]:
    """Offsets rows (trace.write_offsets) for the staged ranks ``counts`` (trace.staged_counts): each rank's ids
    from its fixed range (``bases``: a function of the rank), or following on from ``at``. Checks that every
    rank fits its range."""
    rows = []
    t, s, f = at
    for rank, (n_tracks, t_base, n_slices, s_base, n_flows, f_base) in sorted(counts.items()):
        b = bases(rank) if callable(bases) else IdBases(track=t, slice=s)
        _check_id_range(b, n_tracks, n_slices, 0, 0)
        rows.append((rank, rank, b.track - t_base, b.slice - s_base, (b.slice if callable(bases) else f) - f_base))
        if not callable(bases):
            t, s, f = t + n_tracks, s + n_slices, f + (n_flows if flows else 0)
    return rows


def _advance(at: list[int], counts: dict, bases) -> None:
    if callable(bases):
        return
    at[0] += sum(c[0] for c in counts.values())
    at[1] += sum(c[2] for c in counts.values())
    at[2] += sum(c[4] for c in counts.values())


def _check_id_range(bases: IdBases, n_tracks: int, n_slices: int, used_tracks: int, used_slices: int) -> None:
    """Ids are local ids (from 1) plus the base: a rank must fit below the next rank's base."""
    if bases.track_span is not None and used_tracks + n_tracks >= bases.track_span:
        raise IdRangeError(too_many_tracks(n_tracks, bases.track_span - 1 - used_tracks))
    if bases.slice_span is not None and used_slices + n_slices >= bases.slice_span:
        raise IdRangeError(f"{n_slices} slices, more than the {bases.slice_span - 1} a shard's slice ids hold")


def _in_transaction(cur, work, *args):
    """``work(cur, *args)`` in one transaction on ``cur``."""
    cur.execute("BEGIN TRANSACTION")
    try:
        result = work(cur, *args)
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    cur.execute("COMMIT")
    return result


def assemble_files(con, stages: list[Stage], staged: list, work: Path) -> None:
    """The tables of the CSV and JSON files, from every stage's staging tables (runs while traces still load)."""
    wait(staged)
    cur = con.cursor()
    for stage in stages:
        _device_ids(cur, stage)  # the memory CSVs name the device; read them before they go
    results = [res for stage in stages for res in stage.members]
    prefixes = list(dict.fromkeys(res.csv_prefix for res in results))
    for table in sorted(set(csvfiles.TABLES.values())):
        if prefixes == ["main."]:  # one rank: its table was made in place (or is missing or failed: made empty)
            if not any(table in res.tables for res in results):
                cur.execute(f"DROP TABLE IF EXISTS main.{table}")
                cur.execute(EMPTY_TABLES[table])
            continue
        have = [p for p in prefixes if any(res.csv_prefix == p and table in res.tables for res in results)]
        if have:
            cur.execute(f"CREATE TABLE {table} AS " + " UNION ALL BY NAME ".join(f"SELECT * FROM {p}{table}"
                                                                               for p in have))
            for p in prefixes:
                cur.execute(f"DROP TABLE IF EXISTS {p}{table}")
        else:
            cur.execute(EMPTY_TABLES[table])
    for name in commfiles.COLUMNS:
        commfiles.create_table(cur, name, [row for res in results for row in res.comm.get(name, [])], work)
    cur.close()


def assemble_late(con, stages: list[Stage], made_before: dict[int, int]) -> None:
    """Add to the CSV tables those of ranks staged again alone, after ``assemble_files`` (a db-export rank's
    timeline file makes them too: ``write_ranks`` gives such a rank a stage, and tables, of its own);
    ``made_before``: how many tables each stage's rank had before (those are assembled already)."""
    cur = con.cursor()
    for stage in stages:
        _device_ids(cur, stage)
    for table in sorted(set(csvfiles.TABLES.values())):
        have = [res.csv_prefix for stage in stages for res in stage.members
                if table in res.tables[made_before[stage.idx]:]]
        if have:  # (a table no stage had is the empty one of EMPTY_TABLES: replaced, as assemble_files would)
            parts = [f"{p}{table}" for p in have]
            if cur.execute(f"SELECT count(*) FROM {table}").fetchone()[0]:
                parts.insert(0, table)
            cur.execute(f"CREATE OR REPLACE TABLE {table} AS "
                        + " UNION ALL BY NAME ".join(f"SELECT * FROM {t}" for t in parts))
        for stage in stages:
            cur.execute(f"DROP TABLE IF EXISTS {stage.prefix}{table}")
    cur.close()


def plan_tasks(stages: list[Stage]) -> list[tuple]:
    """(size, kind, stage, rank result or None, path or None) per file of a lone rank, per file kind of a group;
    biggest first, but the tasks that wait for an overview after every other (a pool's threads taken by waiting
    tasks must never keep the trace they wait for from starting)."""
    tasks = []
    for stage in stages:
        if stage.many:
            kinds = dict.fromkeys(k for res in stage.members for k in res.src.files)
            for kind in kinds:
                size = sum(readers.size(kind, res.src.files[kind]) for res in stage.members if kind in res.src.files)
                tasks.append((size, kind, stage, None, None))
        else:
            res = stage.members[0]
            tasks.extend((readers.size(kind, path), kind, stage, res, path) for kind, path in res.src.files.items())
    return sorted(tasks, key=lambda t: (waits_for_overview(t), -t[0]))


def submit(pool, con, task: tuple, root: Path, work: Path, progress: Progress, split_read: bool):
    _, kind, stage, res, path = task
    if res is None:
        return pool.submit(stage_kind, con, stage, kind, root, work, progress)
    if waits_for_overview(task):
        return pool.submit(_after_sliced, con, stage, res, kind, path, root, work, progress, split_read)
    return pool.submit(stage_file, con, stage, res, kind, path, root, work, progress, split_read)


def waits_for_overview(task: tuple) -> bool:
    """Whether a task (``plan_tasks``) waits for its rank's overview (``Stage.sliced``): a file other than the
    trace of a lone rank whose trace is big enough to likely have one."""
    _, kind, stage, res, _ = task
    return (res is not None and stage.on_sliced is not None and kind not in TIMELINE_KINDS
            and sum(readers.size(k, p) for k, p in res.src.files.items() if k in TIMELINE_KINDS) >= overview.WAIT_BYTES)


def _after_sliced(con, stage: Stage, res: RankResult, kind: str, path: Path, root: Path, work: Path,
                  progress: Progress, split_read: bool) -> None:
    stage.sliced.wait()
    stage_file(con, stage, res, kind, path, root, work, progress, split_read)

