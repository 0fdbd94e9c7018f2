"""Reader of MindSpore's profiler output (docs/formats.md, "MindSpore output").

MindSpore 2.3 and later write a ``{worker}_{pid}_{timestamp}_ascend_ms`` folder per rank whose
``ASCEND_PROFILER_OUTPUT`` holds torch_npu's files under torch_npu's names: discovery takes it for a rank folder
and the text-export reader reads it. What differs is data, not files, and is known where it is used: the
framework lane is the ``MindSpore`` process (and ``CPU OP``), a framework lane like torch_npu's ``Python``
(``ingest.trace``'s lane kinds); its step records are ``Python::PythonObserved::ProfilerStep#N``
(``ingest.trace.STEP_NAME``); ``memory_record.csv``'s components are ``MindSpore`` / ``MindSpore+GE``; the
profiler level is under ``profiler_parameters`` in ``profiler_info_{rank}.json`` (``ingest.pipeline``).

This module reads the older layout, MindSpore 2.0-2.2's ``profiler`` folder (the profiler's ``output_path``
plus ``profiler``): MindSpore's own summaries, ``ascend_timeline_display_{rank}.json`` (times in µs from the
first task, not epoch; lanes known only by ``process_labels``) and ``*_intermediate_*`` / ``*_raw_*`` CSVs,
beside the CANN msprof ``PROF_*`` folders they were made from. A ``PROF_*`` folder that msprof exported holds
the same tasks with their clock times and CANN's lanes, so a rank is read from it (``ingest.readers.msprof``,
which names each rank by its device's ``rank_id``) and the summaries are reported as not read, by name. A rank
whose ``PROF_*`` holds raw data only (MindSpore before 2.2 parsed it itself) is read from its
``ascend_timeline_display_{rank}.json`` instead (``ascend_timeline``): each labelled process becomes a lane named
by its label, the ``Steps`` thread gives the steps and the ``Op Overlap Analyse`` process the Overlap Analysis
lane (its threads renamed to the lane's: Merged Computation Op -> Computing, Merged Communication Op ->
Communication, Pure Communication Op -> Communication(Not Overlapped), Free Time -> Free).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from .. import trace
from . import msprof
from .protocol import Found, FoundRank, Job, Staged

TIMELINE = re.compile(r"^ascend_timeline_display_(\d+)\.json$")
INFO = re.compile(r"^profiler_info_(\d+)\.json$")
KIND = "ascend_timeline"
MAX_TIMELINE_BYTES = 1 << 30  # MindSpore caps this file at 20 MB by default (its timeline_limit); read in memory
# process_labels of MindSpore's own timeline -> the kind of the lane named by it
LABEL_KINDS = {"AICORE OP": "hardware", "Ascend Op": "hardware", "AICPU OP": "hardware",
               "Communication Op": "communication", "Host CPU OP": "python"}
# the core a task of a device lane ran on, as kernels name it (MindSpore's PyNative lane does not say: its label)
LABEL_CORES = {"AICORE OP": "AI_CORE", "AICPU OP": "AI_CPU", "Ascend Op": "Ascend Op"}
OVERLAP_LABEL = "Op Overlap Analyse"
# MindSpore numbers these processes so; older files write events without any metadata: their labels by pid (the
# device's own process is its device id, a number below these, labelled AICORE OP in graph mode)
PID_LABELS = {9000: "AICPU OP", 10000: "Communication Op", 11000: "Host CPU OP", 12000: OVERLAP_LABEL,
              13000: "Activity Op"}
DEVICE_LABEL = "AICORE OP"
OVERLAP_THREADS = {"Merged Computation Op": "Computing", "Merged Communication Op": "Communication",
                   "Pure Communication Op": "Communication(Not Overlapped)", "Free Time": "Free"}
OWN_THREADS = ("Steps", "Scope Name")  # threads of the device process that are not tasks: lanes of their own
STEPS_FROM_LANE = """
INSERT INTO {p}steps
SELECT rank, step, name, local_id, ts_ns, end_ns, ts_ns, end_ns FROM (
    SELECT t.rank, TRY_CAST(e.name AS BIGINT) AS step, e.name, n.local_id, n.ts_ns, n.ts_ns + n.dur_ns AS end_ns
    FROM {p}nest n JOIN {p}ev e USING (seq) JOIN {p}tracks t USING (local_track)
    WHERE e.ph = 'X' AND t.process_name = 'Steps' AND TRY_CAST(e.name AS BIGINT) IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY t.rank, step ORDER BY n.ts_ns, n.local_id) = 1)
ORDER BY ts_ns
"""


class TimelineLoad(trace.TraceLoad):
    """MindSpore's own timeline, rewritten with process names (``_named``): lanes by name, kinds by label."""

    EXTRA_KINDS = "\n".join(f"                WHEN p.process_name = '{label}' THEN '{kind}'"
                             for label, kind in LABEL_KINDS.items())


class MindSporeReader:
    name = "MindSpore output"
    kinds = (KIND,)  # the rest of what it finds is staged by the msprof reader
    timeline_kinds = (KIND,)
    timeline_only = (KIND,)

    def claims(self, filename: str) -> bool:
        return False  # 2.3+ writes torch_npu's file names into ASCEND_PROFILER_OUTPUT

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        return Found()

    def find_loose(self, path: Path) -> dict[str, Path]:
        return {}

    def find_ranks(self, folder: Path) -> list[FoundRank] | None:
        """The ranks of a MindSpore 2.0-2.2 ``profiler`` folder: those of its ``PROF_*`` folders."""
        try:
            entries = sorted(folder.iterdir()) if folder.is_dir() else []
        except OSError:
            return None
        timelines = {int(m.group(1)): p for p in entries if (m := TIMELINE.match(p.name)) and p.is_file()}
        if not timelines:
            return None
        ranks: list[FoundRank] = []
        for child in entries:
            if child.is_dir() and not child.is_symlink():
                ranks += msprof.READER.find_ranks(child) or []
        files = [p.name for p in entries if p.is_file() and not INFO.match(p.name)]
        read = {r.rank for r in ranks if r.files}
        for n, path in sorted(timelines.items()):
            if n in read:
                continue
            named = (folder / f"profiler_info_{n}.json").is_file()
            rest = [f for f in files if re.search(rf"_{n}(?:_|\.)", f) and f != path.name]
            notes = [(path, "read MindSpore's own timeline: no msprof output of this rank was exported; its times "
                            "count from the first task (not clock times) and it has no CANN lanes")]
            if rest:
                notes.append((folder, f"MindSpore's other summaries are not read ({len(rest)} files: "
                                      f"{', '.join(rest[:6])}{' …' if len(rest) > 6 else ''})"))
            ranks.append(FoundRank(folder=folder, files={KIND: path}, rank=n,
                                   rank_source="profiler_info_file" if named else "file_name", notes=notes))
        for rank in ranks:
            if KIND in rank.files or not rank.files:
                continue
            own = [f for f in files if re.search(rf"_{rank.rank}(?:_|\.)", f)]
            note = (f"MindSpore's own summaries are not read ({len(own)} files: {', '.join(own[:6])}"
                    f"{' …' if len(own) > 6 else ''}): their times count from the first task; the rank is read from "
                    "the msprof PROF_* output they were made from")
            if rank.rank not in timelines:
                note += f" (no ascend_timeline_display_{rank.rank}.json names this rank)"
            rank.notes.append((folder, note))
        return ranks

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        if kind != KIND:
            raise ValueError(f"not a MindSpore file kind: {kind}")
        job.workdir.mkdir(parents=True, exist_ok=True)
        named = job.workdir / f"{path.stem}.named.json"
        notes = _named(path, named)
        tl = TimelineLoad(job.cur, job.prefix, named, job.workdir, job.display, on_progress=job.on_progress,
                          on_nested=job.on_nested, rank=job.rank)
        tl.read()
        stats = tl.derive()
        job.cur.execute(STEPS_FROM_LANE.format(p=job.prefix))
        own = job.cur.execute(f"SELECT count(*) FROM {job.prefix}tracks WHERE kind = 'overlap'").fetchone()[0]
        return Staged(rows=stats["events"], status=tl.status, warnings=notes + list(tl.warnings), timeline=True,
                      overlap_source="trace" if own else None)


READER = MindSporeReader()


def _named(src: Path, dst: Path) -> list[str]:
    """Write MindSpore's own timeline ``src`` to ``dst`` with a ``process_name`` per labelled process, the
    Overlap Analysis lane's names, and the Steps / Scope Name threads as processes of their own; the notes."""
    if src.stat().st_size > MAX_TIMELINE_BYTES:
        raise ValueError(f"larger than {MAX_TIMELINE_BYTES >> 20} MB: MindSpore writes at most its timeline_limit")
    try:
        events = json.loads(src.read_bytes())
    except (ValueError, UnicodeError) as exc:
        raise ValueError(f"not a JSON timeline: {exc}") from exc
    if isinstance(events, dict):
        events = events.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError("not a JSON timeline: no event array")
    events = [e for e in events if isinstance(e, dict)]
    kept = [e for e in events if _hashable(e.get("pid")) and _hashable(e.get("tid"))]
    odd, events = len(events) - len(kept), kept
    labels = {e.get("pid"): (e.get("args") or {}).get("labels") for e in events
              if e.get("ph") == "M" and e.get("name") == "process_labels" and isinstance(e.get("args"), dict)}
    threads = {(e.get("pid"), e.get("tid")): (e.get("args") or {}).get("name") for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and isinstance(e.get("args"), dict)}
    own = {key: name for key, name in threads.items() if name in OWN_THREADS}
    guessed = set()
    numbered = {e["pid"] for e in events if e.get("ph") == "X" and type(e.get("pid")) is int}
    for pid in numbered - set(labels):
        if 0 <= pid < min(PID_LABELS) or pid in PID_LABELS:
            labels[pid] = PID_LABELS.get(pid, DEVICE_LABEL)
            guessed.add(pid)
    out = []
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if key in own:  # a thread of its own becomes a process named by it (pid: its tid, as MindSpore numbers it)
            e = dict(e, pid=e.get("tid"))
        elif labels.get(e.get("pid")) == OVERLAP_LABEL and e.get("name") == "thread_name" and e.get("ph") == "M":
            e = dict(e, args={"name": OVERLAP_THREADS.get(threads.get(key), threads.get(key))})
        elif e.get("ph") == "X" and labels.get(e.get("pid")) in LABEL_CORES:  # a device task: a kernel
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            e = dict(e, args={"Accelerator Core": LABEL_CORES[labels[e.get("pid")]], **args})
        out.append(e)
    for pid, label in labels.items():
        name = "Overlap Analysis" if label == OVERLAP_LABEL else label
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
    for (_pid, tid), name in own.items():
        out.append({"ph": "M", "name": "process_name", "pid": tid, "tid": 0, "args": {"name": name}})
    dst.write_text(json.dumps(out), encoding="utf-8")
    busy = {e.get("pid") for e in events if e.get("ph") == "X"}
    unknown = sorted({str(label) for pid, label in labels.items()
                      if pid in busy and label not in LABEL_KINDS and label != OVERLAP_LABEL})
    notes = [f"lanes of unknown labels shown as other: {', '.join(unknown)}"] if unknown else []
    if odd:
        notes.append(f"{odd} events skipped: their pid or tid is neither a number nor text")
    if guessed:
        notes.append("no process_labels for pid " + ", ".join(str(p) for p in sorted(guessed)) + ": labelled by "
                     "MindSpore's pid numbering (" + ", ".join(f"{p} {labels[p]}" for p in sorted(guessed)) + ")")
    return notes


def _hashable(value) -> bool:
    return value is None or isinstance(value, (int, float, str))
