"""Reader of CANN msprof output: ``PROF_*`` folders (FORMATS.md §1, §8).

Two layouts are read:

* the current one, ``PROF_*/mindstudio_profiler_output/``: the timeline ``msprof_*.json`` (possibly sliced,
  ``msprof_slice_*.json``), ``op_summary_*.csv`` (the kernel table, renamed as torch_npu does for
  kernel_details.csv), ``op_statistic_*.csv``, ``api_statistic_*.csv``, ``step_trace_*.csv`` (iterations) and
  ``PROF_*/analyze/communication*.json``; one rank per ``PROF_*`` folder. When it has none of these but an
  ``msprof_*.db``, the db is read by the db-export reader;
* the older one, ``PROF_*/device_N/timeline/{msprof,hccl,task_time,step_trace}_<dev>_<model>_<iter>.json``:
  one rank per device. Each iteration's ``msprof_*`` file is its whole timeline and the other kinds hold parts
  of it (``step_trace_*`` even repeats every iteration), so only the ``msprof_*`` files are read; the parts are
  read for an iteration that has no ``msprof_*`` file (``ingest.readers.msproftimeline`` merges them).

msprof names no rank: the ``rank_id`` of ``device_N/info.json.N`` is used when it is one (rank_source
``msprof_info``), else the device id (rank_source ``device_id``, with a warning). A ``PROF_*`` folder inside a
``*_ascend_pt`` rank folder is never reached: discovery stops at the rank folder, whose ASCEND_PROFILER_OUTPUT
was made from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from . import dbexport, msproftables, msproftimeline
from .protocol import Found, FoundRank, Job, Staged

PROF_DIR = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+$")
OUTPUT = "mindstudio_profiler_output"
DEVICE_DIR = re.compile(r"^device_(\d+)$")
TIMELINE_JSON = re.compile(r"^msprof(?:_slice)?(?:_\d+){1,4}\.json$")
STEP_TRACE_CSV = re.compile(r"^step_trace(?:_slice)?(?:_\d+)*\.csv$")
COMM_FILES = {"msprof_communication": "communication.json", "msprof_communication_matrix": "communication_matrix.json"}
GROUP_LABELS = {"msprof_timeline": "msprof_*.json", **{k: f"{f}_*.csv" for k, (f, _) in msproftables.FAMILIES.items()}}


class MsprofReader:
    name = "msprof output"
    kinds = ("msprof_timeline", *msproftables.FAMILIES, *COMM_FILES)
    timeline_kinds = ("msprof_timeline",)
    timeline_only = ("msprof_timeline",)

    def claims(self, filename: str) -> bool:
        return False  # msprof writes nothing into ASCEND_PROFILER_OUTPUT

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        return Found()

    def find_loose(self, path: Path) -> dict[str, Path]:
        return {}

    def find_ranks(self, folder: Path) -> list[FoundRank] | None:
        if not PROF_DIR.match(folder.name) or not folder.is_dir():
            return None
        devices = _devices(folder)
        out = folder / OUTPUT
        if out.is_dir() and (ranks := _current_layout(folder, out, devices)):
            return ranks
        old = [rank for n, path in devices if (rank := _older_layout(path, n)) is not None]
        if old:
            return old
        dbs = _dbs(folder)
        if dbs:
            rank = _rank(folder, devices)
            rank.files["db_export"] = dbs[0]
            rank.notes += [(p, f"not read: a second msprof db in one folder ({dbs[0].name} was read)") for p in dbs[1:]]
            return [rank]
        return [FoundRank(folder=folder, notes=[(folder, "msprof PROF_* folder without exported data (no "
                                                         f"{OUTPUT}, device_N/timeline or msprof_*.db): nothing to "
                                                         "read; export it with msprof --export=on")])]

    def parts(self, kind: str, path: Path) -> list[Path]:
        if kind == "msprof_timeline":
            if path.name == OUTPUT:
                return _timeline_jsons(path) + _step_trace_csvs(path)
            return msproftimeline.older_files(path)[0]
        if kind in msproftables.FAMILIES:
            return msproftables.family_files(path, kind)
        return [path]

    def label(self, kind: str, path: Path) -> str | None:
        if kind == "msprof_timeline" and path.name != OUTPUT:  # the parts when an iteration has no msprof_* file
            return "msprof_*.json" if all(p.name.startswith("msprof_") for p in self.parts(kind, path)) else "*.json"
        return GROUP_LABELS.get(kind)

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        if kind == "msprof_timeline":
            if path.name == OUTPUT:
                return msproftimeline.stage(job, _timeline_jsons(path), _step_trace_csvs(path), [])
            read, skipped = msproftimeline.older_files(path)
            return msproftimeline.stage(job, read, [], skipped)
        if kind in msproftables.FAMILIES:
            return msproftables.stage_family(job, kind, msproftables.family_files(path, kind))
        if kind == "msprof_communication":
            return msproftables.stage_communication(job, path)
        if kind == "msprof_communication_matrix":
            return msproftables.stage_matrix(job, path)
        raise ValueError(f"not an msprof file kind: {kind}")


READER = MsprofReader()


def _current_layout(folder: Path, out: Path, devices: list[tuple[int, Path]]) -> list[FoundRank]:
    """The one rank of a PROF_* folder with mindstudio_profiler_output (empty when it holds nothing we read)."""
    rank = _rank(folder, devices)
    if _timeline_jsons(out):
        rank.files["msprof_timeline"] = out
    for kind in msproftables.FAMILIES:
        if msproftables.family_files(out, kind):
            rank.files[kind] = out
    for kind, name in COMM_FILES.items():
        for where in (folder / "analyze", out):
            if (where / name).is_file():
                rank.files[kind] = where / name
                break
    if not rank.files:
        return []
    used = {p.name for kind, p in rank.files.items() for p in READER.parts(kind, p)}
    left = sorted(p.name for p in out.iterdir() if p.is_file() and p.name not in used
                  and not p.name.lower().startswith("readme") and not dbexport.MSPROF_DB.match(p.name))
    if left:
        rank.notes.append((out, f"not read ({len(left)} files; ascendscope reads msprof_*.json, op_summary, "
                                f"op_statistic, api_statistic and step_trace from msprof output): "
                                + ", ".join(_families(left))))
    rank.notes += [(db, "not read: the msprof JSON and CSV output beside it was read (a rank is read from one "
                        "export)") for db in _dbs(folder)]
    if len(devices) > 1:
        rank.notes.append((folder, f"this PROF_* folder holds devices {', '.join(str(n) for n, _ in devices)}: "
                                   f"read as one rank (rank {rank.rank})"))
    return [rank]


def _older_layout(device: Path, device_id: int) -> FoundRank | None:
    timeline = device / "timeline"
    if not timeline.is_dir() or not msproftimeline.older_files(timeline)[0]:
        return None
    rank = _device_rank(device, device_id)
    rank.files["msprof_timeline"] = timeline
    return rank


def _rank(folder: Path, devices: list[tuple[int, Path]]) -> FoundRank:
    if devices:
        rank = _device_rank(devices[0][1], devices[0][0])
        rank.folder = folder
        return rank
    return FoundRank(folder=folder)


def _device_rank(device: Path, device_id: int) -> FoundRank:
    """The rank of a device folder: its info.json's rank_id when it has one, else the device id."""
    rank = FoundRank(folder=device, device_id=device_id)
    info = device / f"info.json.{device_id}"
    try:
        rank_id = json.loads(info.read_bytes()).get("rank_id")
    except (OSError, ValueError, AttributeError):
        rank_id = None
    if isinstance(rank_id, int) and not isinstance(rank_id, bool) and rank_id >= 0:
        rank.rank, rank.rank_source = rank_id, "msprof_info"
    else:
        rank.rank, rank.rank_source = device_id, "device_id"
        rank.notes.append((device, f"msprof output names no rank id: rank {device_id} is the device id"))
    return rank


def _devices(folder: Path) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := DEVICE_DIR.match(p.name))]
    return sorted(found)


def _dbs(folder: Path) -> list[Path]:
    return sorted(p for where in (folder, folder / OUTPUT) if where.is_dir() for p in where.iterdir()
                  if dbexport.MSPROF_DB.match(p.name) and p.is_file())


def _timeline_jsons(out: Path) -> list[Path]:
    return sorted((p for p in out.iterdir() if TIMELINE_JSON.match(p.name) and p.is_file()), key=_natural)


def _step_trace_csvs(out: Path) -> list[Path]:
    return sorted((p for p in out.iterdir() if STEP_TRACE_CSV.match(p.name) and p.is_file()), key=_natural)


def _natural(path: Path) -> tuple:
    """Name order with numbers compared as numbers (slice 10 after slice 9)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name))


def _families(names: list[str]) -> list[str]:
    """File names grouped by their family (``npu_mem_*.csv``), so a note stays short."""
    out: dict[str, int] = {}
    for name in names:
        stem, dot, ext = name.partition(".")
        family = re.sub(r"(?:_slice)?(?:_\d+)+$", "", stem)
        key = f"{family}_*.{ext}" if family != stem else name
        out[key] = out.get(key, 0) + 1
    return [k if n == 1 else f"{k} ({n})" for k, n in out.items()]
