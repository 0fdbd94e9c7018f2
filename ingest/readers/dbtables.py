"""The CSV-shaped tables of a db export, with the names and columns the text export's CSVs give (docs/schema.md).

    kernels          COMPUTE_TASK_INFO + TASK (+ TASK_PMU_INFO as columns), then COMMUNICATION_OP as HCCL rows:
                     the rows of kernel_details.csv. ``wait_time_ns`` follows the CSV's Wait Time(us) (FORMATS.md
                     §4.1): start minus the end of the previous kernel in start order over all streams, HCCL rows
                     included, never below 0; 0 for the first. ``step_id`` from STEP_TIME (else the derived
                     steps).
    memory_record    NPU_MEM "app" rows (as component APP), then MEMORY_RECORD; bytes -> MB
    operator_memory  OP_MEMORY; bytes -> KB / MB; a GE block (no stream, no active totals) named ``cann::<op>``
                     as the text export names it
    npu_module_mem   NPU_MODULE_MEM with ENUM_MODULE names; bytes -> MB

``src_row`` numbers a rank's rows in that order (kernels by start time). The staged tables hold the rows of
every rank of a stage (a ``rank`` column), so each table is made for all of them at once, each rank's rows as it
would give them alone. PMU metrics keep their db names (snake_case),
except that ``*_time`` values (ns in the db) become ``*_time_ns`` and the two totals take the CSV's names
(``aic_total_time`` -> ``aicore_time_ns``, ``aiv_total_time`` -> ``aiv_time_ns``).
"""

from __future__ import annotations

from ..csvfiles import snake

MB = 1048576
PMU_RENAMES = {"aic_total_time": "aicore_time", "aiv_total_time": "aiv_time"}

KERNEL_COLUMNS = ("step_id", "model_id", "task_id", "stream_id", "name", "type", "op_state", "accelerator_core",
                  "start_ns", "duration_ns", "wait_time_ns", "block_dim", "mix_block_dim", "hf32_eligible",
                  "input_shapes", "input_data_types", "input_formats", "output_shapes", "output_data_types",
                  "output_formats", "context_id")

KERNELS = """
CREATE OR REPLACE TABLE {out}kernels AS
WITH compute AS (
    SELECT c.rank, t.rowid AS ord, c.global_task_id, t.start_ns, t.end_ns, t.model_id, t.task_id, t.stream_id,
           nullif(t.context_id, 4294967295) AS context_id, n.value AS name, ot.value AS type, os.value AS op_state,
           ct.value AS accelerator_core, c.block_dim, c.mix_block_dim, hf.value AS hf32_eligible,
           ish.value AS input_shapes, idt.value AS input_data_types, ifm.value AS input_formats,
           osh.value AS output_shapes, odt.value AS output_data_types, ofm.value AS output_formats
    FROM {p}d_compute_task_info c JOIN {p}d_task t ON t.rank = c.rank AND t.global_task_id = c.global_task_id
    LEFT JOIN {p}d_string_ids n ON n.rank = c.rank AND n.id = c.name
    LEFT JOIN {p}d_string_ids ot ON ot.rank = c.rank AND ot.id = c.op_type
    LEFT JOIN {p}d_string_ids os ON os.rank = c.rank AND os.id = c.op_state
    LEFT JOIN {p}d_string_ids ct ON ct.rank = c.rank AND ct.id = c.task_type
    LEFT JOIN {p}d_string_ids hf ON hf.rank = c.rank AND hf.id = c.hf32_eligible
    LEFT JOIN {p}d_string_ids ish ON ish.rank = c.rank AND ish.id = c.input_shapes
    LEFT JOIN {p}d_string_ids idt ON idt.rank = c.rank AND idt.id = c.input_data_types
    LEFT JOIN {p}d_string_ids ifm ON ifm.rank = c.rank AND ifm.id = c.input_formats
    LEFT JOIN {p}d_string_ids osh ON osh.rank = c.rank AND osh.id = c.output_shapes
    LEFT JOIN {p}d_string_ids odt ON odt.rank = c.rank AND odt.id = c.output_data_types
    LEFT JOIN {p}d_string_ids ofm ON ofm.rank = c.rank AND ofm.id = c.output_formats
    WHERE t.start_ns IS NOT NULL AND t.end_ns IS NOT NULL),
comm AS (
    SELECT o.rank, o.rowid AS ord, NULL::BIGINT AS global_task_id, o.start_ns, o.end_ns, n.value AS name,
           ot.value AS type, 'HCCL' AS accelerator_core
    FROM {p}d_communication_op o
    LEFT JOIN {p}d_string_ids n ON n.rank = o.rank AND n.id = o.op_name
    LEFT JOIN {p}d_string_ids ot ON ot.rank = o.rank AND ot.id = o.op_type
    WHERE o.start_ns IS NOT NULL AND o.end_ns IS NOT NULL),
u AS (
    SELECT *, 0 AS part FROM compute
    UNION ALL BY NAME
    SELECT *, 1 AS part FROM comm),
k AS (
    SELECT *, greatest(start_ns - coalesce(lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns, part, ord),
                                           start_ns), 0)
               AS wait_time_ns
    FROM u),
steps AS ({steps})
SELECT CAST(k.rank AS INTEGER) AS rank,
       CAST(row_number() OVER (PARTITION BY k.rank ORDER BY k.start_ns, k.part, k.ord) AS INTEGER) AS src_row,
       (SELECT max(s.step) FROM steps s WHERE s.rank = k.rank AND k.start_ns BETWEEN s.start_ns AND s.end_ns)
           AS step_id,
       k.model_id, k.task_id, k.stream_id, k.name, k.type, k.op_state, k.accelerator_core, k.start_ns,
       k.end_ns - k.start_ns AS duration_ns, k.wait_time_ns, k.block_dim, k.mix_block_dim, k.hf32_eligible,
       k.input_shapes, k.input_data_types, k.input_formats, k.output_shapes, k.output_data_types, k.output_formats,
       k.context_id{pmu_columns}
FROM k{pmu_join}
ORDER BY k.rank, k.start_ns, k.part, k.ord
"""

# a rank's steps: the db's STEP_TIME, or those derived from its timeline when it has none ({ranks}: which ranks)
STEPS_FROM_DB = ("SELECT rank, id AS step, start_ns, end_ns FROM {p}d_step_time "
                 "WHERE id IS NOT NULL AND rank IN ({ranks})")
STEPS_DERIVED = ("SELECT rank, step, device_start_ns AS start_ns, device_end_ns AS end_ns FROM {p}steps "
                 "WHERE rank IN ({ranks})")

PMU_NAMES = """
SELECT p.rank, p.name, s.value, min(p.rowid) AS first FROM {p}d_task_pmu_info p
LEFT JOIN {p}d_string_ids s ON s.rank = p.rank AND s.id = p.name
WHERE p.name IS NOT NULL GROUP BY ALL ORDER BY p.rank, first
"""

DEVICE = "CASE WHEN {col} IS NULL THEN NULL WHEN {col} < 0 THEN 'CPU' ELSE 'NPU:' || {col} END"

MEMORY_RECORD = f"""
CREATE OR REPLACE TABLE {{out}}memory_record AS
WITH r AS (
    SELECT n.rank, 0 AS part, n.rowid AS ord, 'APP' AS component, n.timestamp_ns, NULL::DOUBLE AS total_allocated_mb,
           (coalesce(n.ddr, 0) + coalesce(n.hbm, 0)) / {MB} AS total_reserved_mb, NULL::DOUBLE AS total_active_mb,
           NULL::VARCHAR AS stream_ptr, {DEVICE.format(col='n.device_id')} AS device_type
    FROM {{p}}d_npu_mem n JOIN {{p}}d_string_ids s ON s.rank = n.rank AND s.id = n.type WHERE lower(s.value) = 'app'
    UNION ALL
    SELECT m.rank, 1, m.rowid, c.value, m.timestamp, m.total_allocated / {MB}, m.total_reserved / {MB},
           m.total_active / {MB}, m.stream_ptr, {DEVICE.format(col='m.device_id')}
    FROM {{p}}d_memory_record m LEFT JOIN {{p}}d_string_ids c ON c.rank = m.rank AND c.id = m.component)
SELECT CAST(rank AS INTEGER) AS rank,
       CAST(row_number() OVER (PARTITION BY rank ORDER BY part, ord) AS INTEGER) AS src_row,
       component, timestamp_ns, total_allocated_mb, total_reserved_mb, total_active_mb, stream_ptr, device_type
FROM r ORDER BY rank, part, ord
"""

OPERATOR_MEMORY = f"""
CREATE OR REPLACE TABLE {{out}}operator_memory AS
SELECT CAST(o.rank AS INTEGER) AS rank,
       CAST(row_number() OVER (PARTITION BY o.rank ORDER BY o.rowid) AS INTEGER) AS src_row,
       -- a GE (CANN) block: no stream and no active totals; the text export names it "cann::<op>"
       CASE WHEN o.stream_ptr IS NULL AND o.allocation_total_active IS NULL AND NOT starts_with(n.value, 'cann::')
            THEN 'cann::' || n.value ELSE n.value END AS name,
       o.size / 1024 AS size_kb, o.allocation_time AS allocation_time_ns,
       o.release_time AS release_time_ns, o.active_release_time AS active_release_time_ns,
       o.duration AS duration_ns, o.active_duration AS active_duration_ns,
       o.allocation_total_allocated / {MB} AS allocation_total_allocated_mb,
       o.allocation_total_reserved / {MB} AS allocation_total_reserved_mb,
       o.allocation_total_active / {MB} AS allocation_total_active_mb,
       o.release_total_allocated / {MB} AS release_total_allocated_mb,
       o.release_total_reserved / {MB} AS release_total_reserved_mb,
       o.release_total_active / {MB} AS release_total_active_mb,
       o.stream_ptr, {DEVICE.format(col='o.device_id')} AS device_type
FROM {{p}}d_op_memory o LEFT JOIN {{p}}d_string_ids n ON n.rank = o.rank AND n.id = o.name
ORDER BY o.rank, o.rowid
"""

NPU_MODULE_MEM = f"""
CREATE OR REPLACE TABLE {{out}}npu_module_mem AS
SELECT CAST(m.rank AS INTEGER) AS rank,
       CAST(row_number() OVER (PARTITION BY m.rank ORDER BY m.rowid) AS INTEGER) AS src_row,
       coalesce(e.name, CAST(m.module_id AS VARCHAR)) AS component, m.timestamp_ns,
       m.total_reserved / {MB} AS total_reserved_mb, {DEVICE.format(col='m.device_id')} AS device
FROM {{p}}d_npu_module_mem m LEFT JOIN {{p}}d_enum_module e ON e.rank = m.rank AND e.id = m.module_id
ORDER BY m.rank, m.rowid
"""

# table -> (SQL, source tables whose rows it holds)
TABLES = {
    "kernels": (KERNELS, ("COMPUTE_TASK_INFO", "COMMUNICATION_OP")),
    "memory_record": (MEMORY_RECORD, ("MEMORY_RECORD", "NPU_MEM")),
    "operator_memory": (OPERATOR_MEMORY, ("OP_MEMORY",)),
    "npu_module_mem": (NPU_MODULE_MEM, ("NPU_MODULE_MEM",)),
}


def build(cur, p: str, out: str, present: dict[int, set[str]], derived_steps: set[int],
          tables: list[str] | None = None) -> dict[int, list[str]]:
    """Make each table (of ``tables``, default all) whose source tables a rank's db has (at ``{out}<table>``, the
    rows of every rank of the stage); ``present``: each rank's table names, ``derived_steps``: the ranks with a
    timeline (whose steps are derived from it when their db has no STEP_TIME). Returns the names made per rank."""
    made: dict[int, list[str]] = {rank: [] for rank in present}
    for table, (sql, sources) in TABLES.items():
        having = [rank for rank, names in present.items() if any(s in names for s in sources)]
        if not having or (tables is not None and table not in tables):
            continue
        extra = {}
        if table == "kernels":
            with_steps = ranks_with_steps(cur, p)
            derived = [r for r in present if r not in with_steps and r in derived_steps]
            from_db = [r for r in present if r not in derived]
            parts = [steps.format(p=p, ranks=", ".join(str(int(r)) for r in ranks))
                     for steps, ranks in ((STEPS_FROM_DB, from_db), (STEPS_DERIVED, derived)) if ranks]
            extra = {"steps": " UNION ALL ".join(parts), **_pmu(cur, p, having)}
        cur.execute(sql.format(p=p, out=out, **extra))
        for rank in having:
            made[rank].append(table)
    return made


def ranks_with_steps(cur, p: str) -> set[int]:
    """The ranks whose db has STEP_TIME rows (their kernels' steps are those, whatever their timeline)."""
    return {r for (r,) in cur.execute(f"SELECT DISTINCT rank FROM {p}d_step_time").fetchall()}


def need_timeline(present: dict[int, set[str]], with_steps: set[int]) -> list[str]:
    """The tables to make only once the timeline is derived: the kernels, when a rank with kernels has no
    STEP_TIME (its steps may be the timeline's)."""
    sources = TABLES["kernels"][1]
    return ["kernels"] if any(r not in with_steps and any(s in names for s in sources)
                              for r, names in present.items()) else []


def merge(*made: dict[int, list[str]]) -> dict[int, list[str]]:
    """Tables made per rank by several ``build`` calls, in ``TABLES`` order."""
    return {rank: [t for t in TABLES if any(t in m.get(rank, []) for m in made)] for rank in made[0]}


def _pmu(cur, p: str, ranks: list[int]) -> dict[str, str]:
    """The per-kernel PMU metrics (TASK_PMU_INFO, one row per metric) as columns: a rank's metrics in the order
    its db first names them, then the new ones of the next rank (the columns ``UNION ALL BY NAME`` of the ranks'
    tables would have), of ``ranks`` (those with kernels)."""
    rows = [row for row in cur.execute(PMU_NAMES.format(p=p)).fetchall() if row[0] in ranks]
    if not rows:
        return {"pmu_columns": "", "pmu_join": ""}
    columns: dict[str, set[bool]] = {}  # column -> whether a rank's values are whole numbers (ns, cycles)
    whole_in: dict[str, list[int]] = {}  # column -> the ranks whose values are
    mapping = []  # (rank, name id, column number)
    by_rank: dict[int, list] = {}
    for rank, name_id, text, _first in rows:
        by_rank.setdefault(rank, []).append((name_id, text))
    for rank, names in by_rank.items():
        used = set(KERNEL_COLUMNS) | {"rank", "src_row"}
        for name_id, text in names:
            base = snake(text if text is not None else f"pmu_{name_id}")
            base = PMU_RENAMES.get(base, base)
            is_time = base.endswith("_time")
            col = base + "_ns" if is_time else base
            while col in used:
                col += "_pmu"
            used.add(col)
            whole = is_time or base.endswith("_cycles")
            columns.setdefault(col, set()).add(whole)
            if whole:
                whole_in.setdefault(col, []).append(rank)
            mapping.append((rank, name_id, list(columns).index(col)))
    aggs, cols = [], []
    for i, (col, whole) in enumerate(columns.items()):
        aggs.append(f"max(value) FILTER (WHERE c = {i}) AS m{i}")
        rounded = f"CAST(round(pm.m{i}) AS BIGINT)"
        if whole == {True}:
            cols.append(f'{rounded} AS "{col}"')
        elif whole == {False}:
            cols.append(f'pm.m{i} AS "{col}"')
        else:  # whole numbers in some ranks only: as the union of a BIGINT and a DOUBLE column
            ranks = ", ".join(str(int(r)) for r in whole_in[col])
            cols.append(f'CASE WHEN k.rank IN ({ranks}) THEN CAST({rounded} AS DOUBLE) ELSE pm.m{i} END AS "{col}"')
    values = ", ".join(f"({int(r)}, {int(n)}, {c})" for r, n, c in mapping)
    join = (f"\nLEFT JOIN (SELECT x.rank, x.global_task_id, {', '.join(aggs)} FROM {p}d_task_pmu_info x "
            f"JOIN (VALUES {values}) m(rank, name, c) ON m.rank = x.rank AND m.name = x.name "
            "GROUP BY x.rank, x.global_task_id) pm ON pm.rank = k.rank AND pm.global_task_id = k.global_task_id")
    return {"pmu_columns": ", " + ", ".join(cols), "pmu_join": join}
