"""msprof's summary CSVs and communication files, into the tables the text export fills (FORMATS.md §4.1, §5, §8).

A family of CSVs (``op_summary_*.csv`` and its slices) is read file by file by ``ingest.csvfiles`` and appended,
in name order, into one table: ``op_summary`` -> ``kernels`` with torch_npu's renames for kernel_details.csv (Op
Name -> Name, OP Type -> Type, Task Type -> Accelerator Core, Task Start Time / Task Duration / Task Wait Time ->
Start Time / Duration / Wait Time), ``op_statistic`` and ``api_statistic`` -> their tables as they are. Every
column is kept. ``communication.json`` / ``communication_matrix.json`` are read by ``ingest.commfiles``; when
they are keyed by operator rather than by step (``msprof --analyze`` writes one entry per operator), they are
read as one step named ``step``, split into p2p and collective by name as torch_npu does (FORMATS.md §5).
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from .. import commfiles, csvfiles, jsonfile
from .protocol import Job, Staged

# reader kind -> (file family, the text-export kind whose table it fills)
FAMILIES = {
    "msprof_op_summary": ("op_summary", "kernel_details"),
    "msprof_op_statistic": ("op_statistic", "op_statistic"),
    "msprof_api_statistic": ("api_statistic", "api_statistic"),
}
# op_summary column (after typing) -> kernel_details column, as torch_npu renames them
OP_SUMMARY_RENAMES = {"op_name": "name", "op_type": "type", "task_type": "accelerator_core",
                      "task_start_time_ns": "start_ns", "task_duration_ns": "duration_ns",
                      "task_wait_time_ns": "wait_time_ns"}
P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")


def family_files(folder: Path, kind: str) -> list[Path]:
    family = re.compile(rf"^{FAMILIES[kind][0]}(?:_slice)?(?:_\d+)*\.csv$")
    files = [p for p in folder.iterdir() if family.match(p.name) and p.is_file()]
    return sorted(files, key=lambda p: tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)))


def stage_family(job: Job, kind: str, files: list[Path]) -> Staged:
    csv_kind = FAMILIES[kind][1]
    table = csvfiles.TABLES[csv_kind]
    renames = OP_SUMMARY_RENAMES if kind == "msprof_op_summary" else None
    job.workdir.mkdir(parents=True, exist_ok=True)
    staged = Staged(tables=[table], rows=0)
    parts: list[tuple[str, int]] = []
    for i, path in enumerate(files):
        pre = f"{job.prefix}g{i}_"
        cl = csvfiles.CsvLoad(job.cur, pre, csv_kind, path, job.rank, path.name, job.workdir,
                              out_prefix=job.csv_prefix if len(files) == 1 else pre, renames=renames)
        try:
            n = cl.load()
        except (ValueError, duckdb.Error, OSError, UnicodeError) as exc:
            if len(files) == 1:
                raise
            text = str(exc).strip().splitlines()
            staged.warnings.append(f"{path.name}: not loaded: {(text[0] if text else type(exc).__name__)[:500]}")
            staged.status = "partial"
            continue
        staged.warnings += [f"{path.name}: {w}" for w in cl.warnings]
        if cl.status != "loaded":
            staged.status = "partial"
        parts.append((cl.out, staged.rows))
        staged.rows += n
    if len(files) > 1:
        if not parts:
            raise ValueError(f"none of the {len(files)} files could be read ({staged.warnings[-1]})")
        # src_row counts on across the files, so it stays a row's place in the family
        union = " UNION ALL BY NAME ".join(
            f"SELECT * REPLACE (CAST(src_row + {offset} AS INTEGER) AS src_row) FROM {name}" for name, offset in parts)
        job.cur.execute(f"CREATE OR REPLACE TABLE {job.csv_prefix}{table} AS {union}")
        for name, _ in parts:
            job.cur.execute(f"DROP TABLE IF EXISTS {name}")
    return staged


def stage_communication(job: Job, path: Path) -> Staged:
    data, notes = _by_step(jsonfile.load(path), "Communication Time Info")
    ops, bws, dists = commfiles.communication_rows(data, job.rank)
    return Staged(rows=len(ops), warnings=notes,
                  comm={"comm_ops": ops, "comm_bandwidth": bws, "comm_size_distribution": dists})


def stage_matrix(job: Job, path: Path) -> Staged:
    data, notes = _by_step(jsonfile.load(path), "Transport Type")
    rows = commfiles.matrix_rows(data, job.rank)
    return Staged(rows=len(rows), warnings=notes, comm={"comm_matrix": rows})


def _by_step(data, marker: str) -> tuple[object, list[str]]:
    """``data`` keyed by step (as torch_npu writes it), or an operator-keyed object wrapped so it is."""
    if not isinstance(data, dict) or not data or not all(_per_op(v, marker) for v in data.values()):
        return data, []
    p2p = {k: v for k, v in data.items() if k.lower().startswith(P2P_PREFIXES)}
    collective = {k: v for k, v in data.items() if k not in p2p}
    return {"step": {"p2p": p2p, "collective": collective}}, [
        f"keyed by operator, not by step: {len(data)} operators read as one step 'step' ({len(p2p)} p2p, "
        f"{len(collective)} collective)"]


def _per_op(value, marker: str) -> bool:
    """An operator's entry: its time info (communication.json), or links that name a transport (matrix)."""
    if not isinstance(value, dict):
        return False
    if marker in value:
        return True
    return bool(value) and all(isinstance(v, dict) and marker in v for v in value.values())
