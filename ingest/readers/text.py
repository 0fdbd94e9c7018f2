"""Reader of torch_npu's text export: the files of ``ASCEND_PROFILER_OUTPUT`` (FORMATS.md §3–5).

``trace_view.json`` is read and derived by ``ingest.trace`` (an Overlap Analysis lane is computed by
``ingest.overlap`` when the trace has none), each CSV by ``ingest.csvfiles`` into its typed table, and
``communication.json`` / ``communication_matrix.json`` by ``ingest.commfiles`` into communication rows. A
``trace_view.json`` opened on its own (outside a rank folder) is read the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .. import commfiles, csvfiles, csvmany, overlap, trace, tracefile, tracegroup
from .protocol import Found, Job, Staged

# file kind -> accepted names inside ASCEND_PROFILER_OUTPUT
FILE_KINDS = {
    "trace_view": ("trace_view.json", "trace_view.json.gz"),
    "kernel_details": ("kernel_details.csv",),
    "operator_details": ("operator_details.csv",),
    "op_statistic": ("op_statistic.csv",),
    "api_statistic": ("api_statistic.csv",),
    "step_trace_time": ("step_trace_time.csv",),
    "memory_record": ("memory_record.csv",),
    "operator_memory": ("operator_memory.csv",),
    "npu_module_mem": ("npu_module_mem.csv",),
    "l2_cache": ("l2_cache.csv",),
    "communication": ("communication.json",),
    "communication_matrix": ("communication_matrix.json",),
}
NAME_TO_KIND = {name: kind for kind, names in FILE_KINDS.items() for name in names}


class TextExportReader:
    name = "text export"
    kinds = tuple(FILE_KINDS)
    timeline_kinds = ("trace_view",)
    timeline_only = ("trace_view",)

    def claims(self, filename: str) -> bool:
        return filename in NAME_TO_KIND

    def find(self, out_dir: Path, text_files: Mapping[str, Path]) -> Found:
        found = Found()
        for entry in sorted(out_dir.iterdir()):
            kind = NAME_TO_KIND.get(entry.name)
            if kind and entry.is_file():
                found.files[kind] = entry
        return found

    def find_loose(self, path: Path) -> dict[str, Path]:
        if path.name in FILE_KINDS["trace_view"] and tracefile.looks_like_trace(path):
            return {"trace_view": path}
        return {}

    def find_ranks(self, folder: Path) -> None:
        return None

    def stage_many(self, job: Job, kind: str, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
        return stage_many(job, kind, items)

    def stage(self, job: Job, kind: str, path: Path) -> Staged:
        if kind == "trace_view":
            return _stage_trace(job, path)
        if kind in csvfiles.TABLES:
            job.workdir.mkdir(parents=True, exist_ok=True)
            cl = csvfiles.CsvLoad(job.cur, job.prefix, kind, path, job.rank, job.display, job.workdir,
                                  out_prefix=job.csv_prefix)
            rows = cl.load()
            return Staged(rows=rows, status=cl.status, warnings=cl.warnings, tables=[cl.table])
        if kind == "communication":
            ops, bws, dists = commfiles.communication_rows(path, job.rank)
            return Staged(rows=len(ops), comm={"comm_ops": ops, "comm_bandwidth": bws,
                                               "comm_size_distribution": dists})
        if kind == "communication_matrix":
            rows = commfiles.matrix_rows(path, job.rank)
            return Staged(rows=len(rows), comm={"comm_matrix": rows})
        raise ValueError(f"not a text-export file kind: {kind}")


READER = TextExportReader()


def _stage_trace(job: Job, path: Path) -> Staged:
    tl = trace.TraceLoad(job.cur, job.prefix, path, job.workdir, job.display, on_progress=job.on_progress,
                         on_nested=job.on_nested, split_read=job.split_read, rank=job.rank,
                             on_sliced=job.on_sliced)
    tl.DROP_EVENTS = True  # (nothing below reads them)
    tl.read()
    added = overlap.derive(job.cur, job.prefix, job.rank)
    stats = tl.derive()
    staged = Staged(rows=stats["events"], status=tl.status, warnings=list(tl.warnings), timeline=True,
                    overlap_source="derived" if added else "trace")
    if added:
        staged.warnings.append(f"no Overlap Analysis lane in the trace: derived one from the device tasks "
                               f"({added} slices)")
    return staged


def stage_many(job: Job, kind: str, items: list[tuple[int, Path, str]]) -> dict[int, Staged | Exception]:
    """One file kind of several ranks at once (``items``: rank, path, display name), into the stage's tables
    (``job.prefix``, CSV-shaped tables at ``job.csv_prefix``), every row tagged with its rank; rank -> what its
    file gave, or the error that stopped it (as ``stage`` would raise it). Raises when the whole kind fails."""
    out: dict[int, Staged | Exception] = {}
    if kind == "trace_view":
        group = tracegroup.TraceGroup(job.cur, job.prefix, items, job.workdir, on_progress=job.on_progress,
                                      on_nested=job.on_nested)
        group.read()
        group.derive()
        stats = group.tl.rank_stats()
        for rank, t in group.ranks.items():
            if t.error is not None:
                out[rank] = t.error
                continue
            added = group.added.get(rank, 0)
            staged = Staged(rows=stats.get(rank, {}).get("events", 0), status=t.status, warnings=group.notes(rank),
                            timeline=True, overlap_source="derived" if added else "trace")
            if added:
                staged.warnings.append(f"no Overlap Analysis lane in the trace: derived one from the device tasks "
                                       f"({added} slices)")
            out[rank] = staged
        return out
    if kind in csvfiles.TABLES:
        job.workdir.mkdir(parents=True, exist_ok=True)
        for rank, got in csvmany.load_many(job.cur, job.prefix, kind, items, job.workdir, job.csv_prefix).items():
            out[rank] = got.error if got.error is not None else Staged(
                rows=got.rows, status=got.status, warnings=got.warnings, tables=[csvfiles.TABLES[kind]])
        return out
    for rank, path, _display in items:  # communication files: Python rows, cheap per file
        try:
            out[rank] = READER.stage(Job(cur=job.cur, prefix=job.prefix, csv_prefix=job.csv_prefix, rank=rank,
                                         display=_display, workdir=job.workdir), kind, path)
        except Exception as exc:  # noqa: BLE001 - one rank's bad file is that rank's warning, as in stage()
            out[rank] = exc
    return out
