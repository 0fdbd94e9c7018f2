"""Find every rank and its files under a path.

A path may be one ``*_ascend_pt`` folder, a folder holding several (one per rank, nested a few levels deep), an
archive of either (extracted by ``ingest.archive``), msprof ``PROF_*`` folders, or loose Chrome-trace JSON files or
profiler databases. The files of each format are found by its reader in ``ingest.readers``. A rank folder is one
that holds ``ASCEND_PROFILER_OUTPUT`` (whatever its name) or whose name ends in ``_ascend_pt``; its ``PROF_*``
folder is the raw data the output was made from, and is not read (unless the rank has no ASCEND_PROFILER_OUTPUT
and msprof exported that folder). The rank id comes from ``profiler_info_{rank}.json``, then
``profiler_info.json``'s ``rank_id``, then a number in the folder name, then the first free id; all but the first
two leave a warning. A rank id met twice keeps the newer folder (with a warning), except in an RL job's role folders
(``ingest.roles``: verl's ``actor_update/``, ``rollout/``, …, each numbering its ranks from 0): there every folder
is kept, the later ones under the first free ids above the run's ids, and every rank of a group folder carries that
folder and its own rank id (``RankSource.group``, ``own_rank``; ``session`` orders a group's folders of one rank id
by start). A reader may also claim a folder of its own layout and give its ranks: a ``PROF_*`` folder
gives one rank per device (``ingest.readers.msprof`` says where its id comes from), and MindSpore 2.0-2.2's
``profiler`` folder one rank per device of its ``PROF_*`` output, or per ``ascend_timeline_display_{rank}.json``
(``ingest.readers.mindspore``). MindSpore 2.3+'s ``*_ascend_ms`` folder is a rank folder like ``*_ascend_pt``.
What we find but cannot load (a MindSpore folder that was never analysed) is reported as a warning, never
silently skipped. A memory snapshot pickle beside rank folders joins the rank it belongs to
(``ingest.readers.memsnap``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import jsonfile, readers, roles
from .readers import memsnap, serving

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
MAX_DEPTH = 5

_IGNORED_NAMES = {"analyse.done"}
_INFO_FILE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_FOLDER_RANK = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass
class RankSource:
    folder: Path
    files: dict[str, Path] = field(default_factory=dict)
    rank: int | None = None
    rank_source: str = "fallback"
    profiler_info: dict | None = None
    profiler_info_path: Path | None = None
    metadata_path: Path | None = None
    device_id: int | None = None  # when the format names it (msprof's device_N folders)
    group: str | None = None  # the RL job's role folder holding it (ingest.roles), as named
    own_rank: int | None = None  # the rank id in its own files (``rank`` differs when another group has that id)
    session: int | None = None  # 1, 2, …: its place among its group's folders of the same own rank, by start


@dataclass
class Discovery:
    root: Path
    ranks: list[RankSource] = field(default_factory=list)
    warnings: list[tuple[int | None, str, str]] = field(default_factory=list)

    def warn(self, rank: int | None, file: str, message: str) -> None:
        self.warnings.append((rank, file, message))


def _rel(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root)
        return str(rel) if str(rel) != "." else path.name
    except ValueError:
        return str(path)


def is_rank_dir(path: Path) -> bool:
    """A torch_npu rank folder: it holds ASCEND_PROFILER_OUTPUT, or is named ``*_ascend_pt``."""
    return (path / OUTPUT_DIR).is_dir() or path.name.endswith("_ascend_pt")


def _walk(root: Path, disc: Discovery) -> tuple[list[Path], list[Path], list[RankSource]]:
    """Rank folders, loose files, and the ranks of folders in a reader's own layout (msprof ``PROF_*``)."""
    rank_dirs: list[Path] = []
    loose: list[Path] = []
    own: list[RankSource] = []
    stack = [(root, 0)]
    while stack:
        path, depth = stack.pop()
        if is_rank_dir(path):
            rank_dirs.append(path)
            continue
        name = path.name
        found = readers.find_ranks(path)
        if found is not None:
            for f in found:
                for note_path, note in f.notes:
                    disc.warn(f.rank, _rel(note_path, disc.root), note)
                own.append(RankSource(folder=f.folder, files=f.files, rank=f.rank, rank_source=f.rank_source,
                                      device_id=f.device_id))
            continue
        if name.endswith("_ascend_ms"):  # a MindSpore rank folder without ASCEND_PROFILER_OUTPUT (is_rank_dir)
            disc.warn(None, _rel(path, disc.root), f"MindSpore profiling folder without {OUTPUT_DIR}: the data was "
                      "not parsed (run MindSpore's offline analysis, mindspore.profiler.profiler.analyse, first)")
            continue
        if name == "cluster_analysis_output":  # not a rank: ingest.cluster.load_cluster_analysis reads it
            continue
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as exc:
            disc.warn(None, _rel(path, disc.root), f"cannot read folder: {exc.strerror}")
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            child = Path(entry.path)
            if entry.is_dir():
                if depth < MAX_DEPTH:
                    stack.append((child, depth + 1))
            elif entry.is_file() and entry.name.endswith(_TRACE_SUFFIXES) and depth <= 2:
                loose.append(child)
            elif entry.is_file() and depth <= 2 and readers.find_loose(child):
                loose.append(child)
            elif entry.is_file() and entry.name.endswith(".db") and not serving.is_serving_file(child):
                disc.warn(None, _rel(child, disc.root), "not loaded: a database of a kind not supported yet")
    rank_dirs.sort()
    own.sort(key=lambda s: s.folder)
    return rank_dirs, sorted(loose), own


def _read_rank_dir(folder: Path, disc: Discovery) -> RankSource:
    src = RankSource(folder=folder)
    for entry in sorted(folder.iterdir()):
        m = _INFO_FILE.match(entry.name)
        if m and entry.is_file():
            src.profiler_info_path = entry
            try:
                src.profiler_info = jsonfile.load(entry)
            except (ValueError, OSError) as exc:
                disc.warn(None, _rel(entry, disc.root), f"invalid JSON, ignored: {exc}")
            if m.group(1) is not None:
                src.rank, src.rank_source = int(m.group(1)), "profiler_info_file"
            elif isinstance(src.profiler_info, dict) and isinstance(src.profiler_info.get("rank_id"), int) \
                    and src.profiler_info["rank_id"] >= 0:
                src.rank, src.rank_source = src.profiler_info["rank_id"], "profiler_info"
        elif entry.name == "profiler_metadata.json" and entry.is_file():
            src.metadata_path = entry
    out = folder / OUTPUT_DIR
    if not out.is_dir():
        if _read_raw_output(folder, src, disc):
            return src
        disc.warn(None, _rel(folder, disc.root), f"no {OUTPUT_DIR} folder: the profiling data was not parsed "
                  "(run torch_npu's offline analysis first)")
        return src
    for entry in sorted(out.iterdir()):
        if readers.claims(entry.name):
            continue  # the reader of that format says below what it takes
        elif entry.name.endswith(".db"):
            disc.warn(None, _rel(entry, disc.root), "not loaded: a database of a kind not supported yet")
        elif entry.name not in _IGNORED_NAMES:
            disc.warn(None, _rel(entry, disc.root), "not loaded: file type not supported yet")
    found = readers.find(out)  # a rank with text-export files is read from those
    src.files.update(found.files)
    for path, note in found.notes:
        disc.warn(None, _rel(path, disc.root), note)
    return src


def _read_raw_output(folder: Path, src: RankSource, disc: Discovery) -> bool:
    """A rank folder without ASCEND_PROFILER_OUTPUT whose one raw ``PROF_*`` folder was exported by msprof: read
    that output for the rank (the CANN lanes, without torch_npu's Python ones)."""
    found = []
    for child in sorted(folder.iterdir()):
        if child.is_dir() and not child.is_symlink():
            found += [f for f in readers.find_ranks(child) or [] if f.files]
    if len(found) != 1:
        return False
    src.files, src.device_id = dict(found[0].files), found[0].device_id
    for path, note in found[0].notes:
        disc.warn(None, _rel(path, disc.root), note)
    disc.warn(None, _rel(folder, disc.root), f"no {OUTPUT_DIR} folder: read the msprof output of "
              f"{_rel(found[0].folder, disc.root)} instead (no Python lanes: run torch_npu's offline analysis for "
              "them)")
    return True


def _assign_ranks(sources: list[RankSource], disc: Discovery) -> list[RankSource]:
    """Give every source a unique rank id; duplicates keep the newest folder (as msprof-analyze does), except the
    folders of an RL job's groups, which are all kept (the module note)."""
    chosen: dict[int, RankSource] = {}
    pending: list[RankSource] = []
    shared: list[RankSource] = []  # RL group folders whose rank id another folder took first
    for src in sources:
        if src.rank is None:
            m = _FOLDER_RANK.search(src.folder.name)
            if m:
                src.rank, src.rank_source = int(m.group(1)), "folder_name"
        if src.rank is None:
            pending.append(src)
            continue
        src.group = roles.group_folder(_rel(src.folder, disc.root))
        if src.group is not None:
            src.own_rank = src.rank
        if src.rank in chosen:
            old = chosen[src.rank]
            if src.group is not None or old.group is not None:
                for one in (src, old):  # a folder beside the role folders (verl's ref group at the root) too
                    if one.group is None:
                        one.group, one.own_rank = _rel(one.folder.parent, disc.root) or ".", one.rank
                shared.append(src)
                continue
            newer, older = (src, old) if _mtime(src) >= _mtime(old) else (old, src)
            chosen[src.rank] = newer
            disc.warn(older.rank, _rel(older.folder, disc.root),
                      f"rank {src.rank} appears twice; kept the newer folder {_rel(newer.folder, disc.root)}")
            continue
        chosen[src.rank] = src
    next_id = 0
    for src in pending:
        while next_id in chosen:
            next_id += 1
        src.rank, src.rank_source = next_id, "fallback"
        chosen[next_id] = src
    for src in chosen.values():
        if src.rank_source in ("folder_name", "fallback"):
            how = "taken from the folder name" if src.rank_source == "folder_name" else "assigned"
            disc.warn(src.rank, _rel(src.folder, disc.root),
                      f"no profiler_info_{{rank}}.json with a rank id: rank {src.rank} {how}")
    if not shared:  # no id reused: the ranks are the run's own ids, nothing to tell apart
        for src in chosen.values():
            src.group = src.own_rank = None
    else:
        _order_sessions([s for s in [*chosen.values(), *shared] if s.group is not None])
        next_id = max(chosen) + 1
        for src in sorted(shared, key=lambda s: (s.group, s.own_rank, s.session or 0, str(s.folder))):
            src.rank = next_id
            chosen[next_id] = src
            next_id += 1
    return [chosen[r] for r in sorted(chosen)]


def _order_sessions(grouped: list[RankSource]) -> None:
    """Number the folders of each (group, own rank) by start time when there are several (verl's discrete mode
    writes one per profiled call: the k-th is the k-th profiled step)."""
    by_key: dict[tuple, list[RankSource]] = {}
    for src in grouped:
        by_key.setdefault((src.group, src.own_rank), []).append(src)
    for same in by_key.values():
        if len(same) > 1:
            for k, src in enumerate(sorted(same, key=lambda s: (_start(s), str(s.folder))), 1):
                src.session = k


_FOLDER_MS = re.compile(r"_(\d{13})_ascend_(?:pt|ms)$")


def _start(src: RankSource) -> float:
    """When the folder's profile started: the milliseconds torch_npu puts in the folder name
    (``{worker}_{ms}_ascend_pt``), else when it ended (:func:`_mtime`)."""
    m = _FOLDER_MS.search(src.folder.name)
    return int(m.group(1)) / 1e3 if m else _mtime(src)


def _mtime(src: RankSource) -> float:
    info = src.profiler_info or {}
    end = (info.get("end_info") or {}).get("collectionTimeEnd") if isinstance(info, dict) else None
    if isinstance(end, (int, float)):
        return float(end) / 1e9
    try:
        return src.folder.stat().st_mtime
    except OSError:
        return 0.0


def _attach_snapshots(disc: Discovery, snapshots: list[Path]) -> None:
    """Memory snapshots found beside rank folders join their rank (``ingest.readers.memsnap.attach``); one that
    matches none is a rank of its own, with a warning."""
    _, unmatched = memsnap.attach(disc.ranks, snapshots, disc.root)
    next_id = max((s.rank for s in disc.ranks), default=-1) + 1
    for path, why in unmatched:
        src = RankSource(folder=path.parent, files={memsnap.KIND: path}, rank=next_id, rank_source="fallback")
        disc.ranks.append(src)
        disc.warn(next_id, _rel(path, disc.root), why)
        next_id += 1


def discover(path: str | os.PathLike) -> Discovery:
    """Find the ranks under ``path`` (a folder or a single trace file; archives are extracted beforehand)."""
    root = Path(path)
    disc = Discovery(root=root if root.is_dir() else root.parent)
    snapshots: list[Path] = []
    if root.is_file():
        if kinds := readers.find_loose(root):
            sources = [RankSource(folder=root.parent, files=kinds)]
        else:
            disc.warn(None, root.name, "not a profiling folder, archive or trace file")
            return disc
    else:
        rank_dirs, loose, own = _walk(root, disc)
        sources = [_read_rank_dir(d, disc) for d in rank_dirs] + own
        snapshots = [f for f in loose if memsnap.KIND in readers.find_loose(f)] if rank_dirs or own else []
        for f in loose if rank_dirs or own else []:
            if f in snapshots:
                continue  # matched with its rank below (ingest.readers.memsnap.attach)
            if f.name == serving.TRACE_FILE and serving.is_serving_dir(f.parent):
                disc.warn(None, _rel(f, disc.root), "not loaded as a rank beside rank folders (its requests and "
                          "batches are in the Serving tab; open its folder alone for its trace on the Timeline)")
            elif not f.name.endswith(_TRACE_SUFFIXES):
                disc.warn(None, _rel(f, disc.root), "not loaded: a profiler database beside rank folders is not "
                          "supported yet (open it on its own)")
        if not rank_dirs and not own:
            for f in loose:
                kinds = readers.find_loose(f)
                if kinds:
                    src = RankSource(folder=f.parent, files=kinds)
                    m = _FOLDER_RANK.search(f.name)
                    if m:
                        src.rank, src.rank_source = int(m.group(1)), "folder_name"
                    sources.append(src)
    sources = [s for s in sources if s.files or s.profiler_info is not None]
    disc.ranks = _assign_ranks(sources, disc)
    if snapshots:
        _attach_snapshots(disc, snapshots)
    for src in disc.ranks:
        if not src.files:
            disc.warn(src.rank, _rel(src.folder, disc.root), "no loadable text-export files in this rank folder")
    return disc
