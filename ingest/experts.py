"""MoE expert load: MindIE / vLLM-Ascend expert dumps into run-level tables, and the MoE kernels of each rank.

Contract:

* :func:`load_experts` ``(con, root) -> list[str]`` finds, under the run's root (up to :data:`MAX_DEPTH` levels, not
  inside torch_npu rank folders), the expert *hotspot* dumps — ``{prefill|decode}_{rank}.csv`` beside a
  ``model_gen_config.json`` — and the expert *deployment* files — ``{prefill|decode}_global_deployment.json`` —
  and (re)creates, always (empty without dumps):

  - ``expert_hotspot``: one row per (source, phase, rank, layer, slot): ``tokens``, the visits the dump counted for
    the expert in local slot ``slot`` of ``rank`` at MoE layer ``layer``. A hotspot CSV is headerless: a row per
    MoE layer, a column per local expert slot; the dump appends a block of ``num_moe_layers`` rows per
    collection, so the last ``num_moe_layers`` rows are the latest (as MindStudio Insight reads it);
  - ``expert_deployment``: one row per (source, phase, layer, rank, slot): the logical ``expert`` the deployment
    puts in that slot (``layer_list[].device_list[].device_expert``; an expert in several slots is replicated);
  - ``expert_files``: one row per file seen (``source``, ``file``, ``kind``: hotspot, deployment or config,
    ``rows``, ``status``: loaded, partial, failed), plus the config's ``num_moe_layers``, ``num_experts``,
    ``num_selected_experts`` where it is the config.

  Returns its warnings as ``"file: message"`` texts (ingest.cluster.load_cluster_analysis's way). A single-file
  run keeps the tables in its file, a sharded run in ``cluster.duckdb``.
* :func:`build_moe_kernels` builds ``cluster_moe_kernels`` (``ingest.cluster.build_cluster_tables``): per rank the
  device kernels of the MoE layers — GroupedMatmul (the experts' matmuls) and the token dispatch / combine kernels
  — with their step, ``family`` and ``call`` (the k-th of its family in the rank's step, by start), duration and
  ``tokens``: the first dimension of the kernel's first input (the tokens routed to the rank's experts).
"""

from __future__ import annotations

import collections
import csv
import io
import os
import re
from pathlib import Path

from . import jsonfile

MAX_DEPTH = 5
MAX_FILE_BYTES = 256 << 20  # a hotspot dump grows by a block per collection: read up to this much of its end
MAX_WARNINGS_PER_FILE = 10
HOTSPOT_FILE = re.compile(r"^(prefill|decode)_(\d{1,5})\.csv$")
DEPLOYMENT_FILE = re.compile(r"^(prefill|decode)_global_deployment\.json$")
CONFIG_FILE = "model_gen_config.json"
DDL = {
    "expert_hotspot": "source VARCHAR, phase VARCHAR, rank INTEGER, layer INTEGER, slot INTEGER, tokens BIGINT",
    "expert_deployment": "source VARCHAR, phase VARCHAR, layer INTEGER, rank INTEGER, slot INTEGER, expert INTEGER",
    "expert_files": "source VARCHAR, file VARCHAR, kind VARCHAR, rows BIGINT, status VARCHAR, "
                    "num_moe_layers INTEGER, num_experts INTEGER, num_selected_experts INTEGER",
}
TABLES = tuple(DDL)
# kernel_details' Name / Type of the MoE layers' device work: the experts' grouped matmuls, and the token
# dispatch / combine (MoeDistributeDispatch/Combine, the routing and permutation kernels)
MOE_FAMILY_SQL = r"""CASE
  WHEN regexp_matches(coalesce(type, '') || ' ' || name, 'GroupedMatmul', 'i') THEN 'grouped_matmul'
  WHEN regexp_matches(coalesce(type, '') || ' ' || name, 'MoeDistributeDispatch|MoeInitRouting|MoeTokenPermute',
                      'i') THEN 'dispatch'
  WHEN regexp_matches(coalesce(type, '') || ' ' || name, 'MoeDistributeCombine|MoeFinalizeRouting|MoeTokenUnpermute',
                      'i') THEN 'combine'
END"""
# (kernels takes its columns from the files' headers: {columns} names the optional ones or a typed NULL)
MOE_KERNELS_SQL = rf"""
CREATE OR REPLACE TABLE cluster_moe_kernels AS
WITH k AS (
  SELECT rank, src_row, {{columns}}, name, start_ns, duration_ns, {MOE_FAMILY_SQL} AS family
  FROM (SELECT rank, src_row, {{columns}}, name, start_ns, duration_ns FROM kernels) WHERE start_ns IS NOT NULL
)
SELECT rank, step_id AS step, family,
       (row_number() OVER (PARTITION BY rank, step_id, family ORDER BY start_ns, src_row) - 1)::INTEGER AS call,
       name, type, start_ns, duration_ns AS dur_ns,
       TRY_CAST(regexp_extract(input_shapes, '^[\s"]*(\d+)', 1) AS BIGINT) AS tokens
FROM k WHERE family IS NOT NULL
ORDER BY rank, step, family, call
"""


MOE_KERNELS_EMPTY_DDL = ("CREATE OR REPLACE TABLE cluster_moe_kernels (rank INTEGER, step BIGINT, family VARCHAR, "
                         "call INTEGER, name VARCHAR, type VARCHAR, start_ns BIGINT, dur_ns BIGINT, tokens BIGINT)")
OPTIONAL_KERNEL_COLUMNS = {"step_id": "BIGINT", "type": "VARCHAR", "input_shapes": "VARCHAR"}
KERNEL_COLUMNS_SQL = ("SELECT column_name FROM duckdb_columns() WHERE table_name = 'kernels' "
                      "AND database_name = current_database() AND schema_name = current_schema()")


def build_moe_kernels(con) -> None:
    """``cluster_moe_kernels`` from the ``kernels`` of ``con`` (its optional columns, when a header lacks them,
    read as NULL)."""
    have = {c for (c,) in con.execute(KERNEL_COLUMNS_SQL).fetchall()}
    if not {"rank", "src_row", "name", "start_ns", "duration_ns"} <= have:  # no kernel rows to speak of
        con.execute(MOE_KERNELS_EMPTY_DDL)
        return
    columns = ", ".join(c if c in have else f"NULL::{t} AS {c}" for c, t in OPTIONAL_KERNEL_COLUMNS.items())
    con.execute(MOE_KERNELS_SQL.format(columns=columns))


def find(root: Path) -> list[Path]:
    """The folders under ``root`` (itself included) holding a hotspot or deployment file, in path order."""
    root = Path(root)
    if not root.is_dir():
        return []
    found, stack = [], [(root, 0)]
    while stack:
        path, depth = stack.pop()
        if path.name.endswith("_ascend_pt") or path.name == "ASCEND_PROFILER_OUTPUT":
            continue
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        if any(e.is_file() and (HOTSPOT_FILE.match(e.name) or DEPLOYMENT_FILE.match(e.name)) for e in entries):
            found.append(path)
        if depth < MAX_DEPTH:
            stack.extend((Path(e.path), depth + 1) for e in entries if e.is_dir(follow_symlinks=False))
    return sorted(found)


class _Problems:
    def __init__(self, label: str):
        self.label, self.items, self.more = label, [], 0

    def add(self, text: str) -> None:
        if len(self.items) < MAX_WARNINGS_PER_FILE:
            self.items.append(f"{self.label}: {text}")
        else:
            self.more += 1

    def out(self) -> list[str]:
        return self.items + ([f"{self.label}: {self.more} more problems like the above"] if self.more else [])


def _count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def read_config(path: Path, p: _Problems) -> dict | None:
    try:
        data = jsonfile.load(path)
    except (OSError, ValueError) as exc:
        p.add(f"not read: {exc}")
        return None
    if not isinstance(data, dict):
        p.add("not a JSON object: not read")
        return None
    layers = _count(data.get("num_moe_layers"))
    if layers is None or layers == 0:
        p.add("no num_moe_layers (a positive integer): the hotspot files beside it cannot be read")
        return None
    return {"num_moe_layers": layers, "num_experts": _count(data.get("num_of_experts")),
            "num_selected_experts": _count(data.get("num_of_selected_experts"))}


def _tail_lines(path: Path, keep: int) -> list[str]:
    """The last ``keep`` non-empty lines of a file (only its last MAX_FILE_BYTES read)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size > MAX_FILE_BYTES:
            fh.seek(size - MAX_FILE_BYTES)
            fh.readline()  # a partial line
        text = fh.read().decode("utf-8-sig", errors="replace")
    lines: collections.deque[str] = collections.deque(maxlen=keep)
    for line in text.splitlines():
        if line.strip():
            lines.append(line)
    return list(lines)


def read_hotspot(path: Path, layers: int, p: _Problems) -> list[tuple[int, int, int]]:
    """``(layer, slot, tokens)`` of a hotspot CSV: its last ``layers`` rows, layer 0 first."""
    rows = []
    width = None
    for layer, line in enumerate(_tail_lines(path, layers)):
        cells = next(csv.reader(io.StringIO(line)))
        if width is None:
            width = len(cells)
        elif len(cells) != width:
            p.add(f"layer {layer}: {len(cells)} values, the first layer has {width}; kept as they are")
        for slot, cell in enumerate(cells):
            text = cell.strip()
            if not text.isdigit():
                p.add(f"layer {layer} slot {slot}: {text!r} is not a count, skipped")
                continue
            rows.append((layer, slot, int(text)))
    return rows


def read_deployment(path: Path, p: _Problems) -> list[tuple[int, int, int, int]] | None:
    """``(layer, rank, slot, expert)`` of a deployment file (None: not read)."""
    data = jsonfile.load(path)
    if not isinstance(data, dict) or not isinstance(data.get("layer_list"), list):
        p.add("no layer_list: not read")
        return None
    rows = []
    for i, layer in enumerate(data["layer_list"]):
        lid = _count(layer.get("layer_id")) if isinstance(layer, dict) else None
        devices = layer.get("device_list") if isinstance(layer, dict) else None
        if lid is None or not isinstance(devices, list):
            p.add(f"layer_list[{i}]: no layer_id and device_list, skipped")
            continue
        for dev in devices:
            rank = _count(dev.get("device_id")) if isinstance(dev, dict) else None
            experts = dev.get("device_expert") if isinstance(dev, dict) else None
            if rank is None or not isinstance(experts, list) or any(_count(e) is None for e in experts):
                p.add(f"layer {lid}: a device without device_id and device_expert ids, skipped")
                continue
            rows.extend((lid, rank, slot, e) for slot, e in enumerate(experts))
    count = _count(data.get("moe_layer_count"))
    if count is not None and count != len({r[0] for r in rows}):
        p.add(f"moe_layer_count {count}, but {len({r[0] for r in rows})} layers listed")
    return rows


def load_experts(con, root: Path) -> list[str]:
    """The expert tables from the dumps under ``root``; the warnings."""
    for table, ddl in DDL.items():
        con.execute(f"CREATE OR REPLACE TABLE {table} ({ddl})")
    root = Path(root)
    warnings: list[str] = []
    hot, dep, files = [], [], []
    for folder in find(root):
        source = folder.relative_to(root).as_posix() if folder != root else "."
        names = sorted(e.name for e in os.scandir(folder) if e.is_file())
        config = None
        if CONFIG_FILE in names:
            p = _Problems(f"{source}/{CONFIG_FILE}".removeprefix("./"))
            config = read_config(folder / CONFIG_FILE, p)
            c = config or {}
            files.append((source, CONFIG_FILE, "config", 1 if config else 0, "loaded" if config else "failed",
                          c.get("num_moe_layers"), c.get("num_experts"), c.get("num_selected_experts")))
            warnings.extend(p.out())
        for name in names:
            label = f"{source}/{name}".removeprefix("./")
            p = _Problems(label)
            if m := HOTSPOT_FILE.match(name):
                if config is None:
                    p.add(f"no readable {CONFIG_FILE} beside it (its num_moe_layers says which rows are the "
                          "latest): not read")
                    files.append((source, name, "hotspot", 0, "failed", None, None, None))
                else:
                    try:
                        got = read_hotspot(folder / name, config["num_moe_layers"], p)
                    except (OSError, csv.Error) as exc:
                        p.add(f"not read: {exc}")
                        got = None
                    if got is not None:
                        hot.extend((source, m.group(1), int(m.group(2)), *r) for r in got)
                    files.append((source, name, "hotspot", len(got or []),
                                  "failed" if got is None else "partial" if p.items else "loaded", None, None, None))
            elif m := DEPLOYMENT_FILE.match(name):
                try:
                    got = read_deployment(folder / name, p)
                except (OSError, ValueError) as exc:
                    p.add(f"not read: {exc}")
                    got = None
                if got is not None:
                    dep.extend((source, m.group(1), *r) for r in got)
                files.append((source, name, "deployment", len(got or []),
                              "failed" if got is None else "partial" if p.items else "loaded", None, None, None))
            warnings.extend(p.out())
    for table, rows in (("expert_hotspot", hot), ("expert_deployment", dep), ("expert_files", files)):
        if rows:
            cols = [list(c) for c in zip(*rows)]
            con.execute(f"INSERT INTO {table} SELECT " + ", ".join("unnest(?)" for _ in cols), cols)
    return warnings

