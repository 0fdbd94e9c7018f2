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

``src_row`` numbers the rows in that order (kernels by start time). PMU metrics keep their db names (snake_case),
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
    SELECT t.rowid AS ord, c.global_task_id, t.start_ns, t.end_ns, t.model_id, t.task_id, t.stream_id,
           nullif(t.context_id, 4294967295) AS context_id, n.value AS name, ot.value AS type, os.value AS op_state,
           ct.value AS accelerator_core, c.block_dim, c.mix_block_dim, hf.value AS hf32_eligible,
           ish.value AS input_shapes, idt.value AS input_data_types, ifm.value AS input_formats,
           osh.value AS output_shapes, odt.value AS output_data_types, ofm.value AS output_formats
    FROM {p}d_compute_task_info c JOIN {p}d_task t USING (global_task_id)
    LEFT JOIN {p}d_string_ids n ON n.id = c.name LEFT JOIN {p}d_string_ids ot ON ot.id = c.op_type
    LEFT JOIN {p}d_string_ids os ON os.id = c.op_state LEFT JOIN {p}d_string_ids ct ON ct.id = c.task_type
    LEFT JOIN {p}d_string_ids hf ON hf.id = c.hf32_eligible
    LEFT JOIN {p}d_string_ids ish ON ish.id = c.input_shapes
    LEFT JOIN {p}d_string_ids idt ON idt.id = c.input_data_types
    LEFT JOIN {p}d_string_ids ifm ON ifm.id = c.input_formats
    LEFT JOIN {p}d_string_ids osh ON osh.id = c.output_shapes
    LEFT JOIN {p}d_string_ids odt ON odt.id = c.output_data_types
    LEFT JOIN {p}d_string_ids ofm ON ofm.id = c.output_formats
    WHERE t.start_ns IS NOT NULL AND t.end_ns IS NOT NULL),
comm AS (
    SELECT o.rowid AS ord, NULL::BIGINT AS global_task_id, o.start_ns, o.end_ns, n.value AS name, ot.value AS type,
           'HCCL' AS accelerator_core
    FROM {p}d_communication_op o
    LEFT JOIN {p}d_string_ids n ON n.id = o.op_name LEFT JOIN {p}d_string_ids ot ON ot.id = o.op_type
    WHERE o.start_ns IS NOT NULL AND o.end_ns IS NOT NULL),
u AS (
    SELECT *, 0 AS part FROM compute
    UNION ALL BY NAME
    SELECT *, 1 AS part FROM comm),
k AS (
    SELECT *, greatest(start_ns - coalesce(lag(end_ns) OVER (ORDER BY start_ns, part, ord), start_ns), 0)
               AS wait_time_ns
    FROM u),
steps AS ({steps})
SELECT CAST({rank} AS INTEGER) AS rank,
       CAST(row_number() OVER (ORDER BY k.start_ns, k.part, k.ord) AS INTEGER) AS src_row,
       (SELECT max(s.step) FROM steps s WHERE k.start_ns BETWEEN s.start_ns AND s.end_ns) AS step_id,
       k.model_id, k.task_id, k.stream_id, k.name, k.type, k.op_state, k.accelerator_core, k.start_ns,
       k.end_ns - k.start_ns AS duration_ns, k.wait_time_ns, k.block_dim, k.mix_block_dim, k.hf32_eligible,
       k.input_shapes, k.input_data_types, k.input_formats, k.output_shapes, k.output_data_types, k.output_formats,
       k.context_id{pmu_columns}
FROM k{pmu_join}
ORDER BY k.start_ns, k.part, k.ord
"""

STEPS_FROM_DB = "SELECT id AS step, start_ns, end_ns FROM {p}d_step_time WHERE id IS NOT NULL"
STEPS_DERIVED = "SELECT step, device_start_ns AS start_ns, device_end_ns AS end_ns FROM {p}steps"

PMU_NAMES = """
SELECT p.name, s.value, min(p.rowid) AS first FROM {p}d_task_pmu_info p LEFT JOIN {p}d_string_ids s ON s.id = p.name
WHERE p.name IS NOT NULL GROUP BY ALL ORDER BY first
"""

DEVICE = "CASE WHEN {col} IS NULL THEN NULL WHEN {col} < 0 THEN 'CPU' ELSE 'NPU:' || {col} END"

MEMORY_RECORD = f"""
CREATE OR REPLACE TABLE {{out}}memory_record AS
WITH r AS (
    SELECT 0 AS part, n.rowid AS ord, 'APP' AS component, n.timestamp_ns, NULL::DOUBLE AS total_allocated_mb,
           (coalesce(n.ddr, 0) + coalesce(n.hbm, 0)) / {MB} AS total_reserved_mb, NULL::DOUBLE AS total_active_mb,
           NULL::VARCHAR AS stream_ptr, {DEVICE.format(col='n.device_id')} AS device_type
    FROM {{p}}d_npu_mem n JOIN {{p}}d_string_ids s ON s.id = n.type WHERE lower(s.value) = 'app'
    UNION ALL
    SELECT 1, m.rowid, c.value, m.timestamp, m.total_allocated / {MB}, m.total_reserved / {MB},
           m.total_active / {MB}, m.stream_ptr, {DEVICE.format(col='m.device_id')}
    FROM {{p}}d_memory_record m LEFT JOIN {{p}}d_string_ids c ON c.id = m.component)
SELECT CAST({{rank}} AS INTEGER) AS rank, CAST(row_number() OVER (ORDER BY part, ord) AS INTEGER) AS src_row,
       component, timestamp_ns, total_allocated_mb, total_reserved_mb, total_active_mb, stream_ptr, device_type
FROM r ORDER BY part, ord
"""

OPERATOR_MEMORY = f"""
CREATE OR REPLACE TABLE {{out}}operator_memory AS
SELECT CAST({{rank}} AS INTEGER) AS rank, CAST(row_number() OVER (ORDER BY o.rowid) AS INTEGER) AS src_row,
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
FROM {{p}}d_op_memory o LEFT JOIN {{p}}d_string_ids n ON n.id = o.name
ORDER BY o.rowid
"""

NPU_MODULE_MEM = f"""
CREATE OR REPLACE TABLE {{out}}npu_module_mem AS
SELECT CAST({{rank}} AS INTEGER) AS rank, CAST(row_number() OVER (ORDER BY m.rowid) AS INTEGER) AS src_row,
       coalesce(e.name, CAST(m.module_id AS VARCHAR)) AS component, m.timestamp_ns,
       m.total_reserved / {MB} AS total_reserved_mb, {DEVICE.format(col='m.device_id')} AS device
FROM {{p}}d_npu_module_mem m LEFT JOIN {{p}}d_enum_module e ON e.id = m.module_id
ORDER BY m.rowid
"""

# table -> (SQL, source tables whose rows it holds)
TABLES = {
    "kernels": (KERNELS, ("COMPUTE_TASK_INFO", "COMMUNICATION_OP")),
    "memory_record": (MEMORY_RECORD, ("MEMORY_RECORD", "NPU_MEM")),
    "operator_memory": (OPERATOR_MEMORY, ("OP_MEMORY",)),
    "npu_module_mem": (NPU_MODULE_MEM, ("NPU_MODULE_MEM",)),
}


def build(cur, p: str, out: str, rank: int, present: set[str], have_derived_steps: bool) -> list[str]:
    """Make each table whose source tables the db has (at ``{out}<table>``); return the names made."""
    made = []
    for table, (sql, sources) in TABLES.items():
        if not any(s in present for s in sources):
            continue
        extra = {}
        if table == "kernels":
            has_step_time = cur.execute(f"SELECT count(*) FROM {p}d_step_time").fetchone()[0] > 0
            steps = STEPS_FROM_DB if has_step_time or not have_derived_steps else STEPS_DERIVED
            extra = {"steps": steps.format(p=p), **_pmu(cur, p)}
        cur.execute(sql.format(p=p, out=out, rank=rank, **extra))
        made.append(table)
    return made


def _pmu(cur, p: str) -> dict[str, str]:
    """The per-kernel PMU metrics (TASK_PMU_INFO, one row per metric) as columns."""
    names = cur.execute(PMU_NAMES.format(p=p)).fetchall()
    if not names:
        return {"pmu_columns": "", "pmu_join": ""}
    used = set(KERNEL_COLUMNS) | {"rank", "src_row"}
    aggs, cols = [], []
    for i, (name_id, text, _first) in enumerate(names):
        base = snake(text if text is not None else f"pmu_{name_id}")
        base = PMU_RENAMES.get(base, base)
        is_time = base.endswith("_time")
        col = base + "_ns" if is_time else base
        while col in used:
            col += "_pmu"
        used.add(col)
        aggs.append(f"max(value) FILTER (WHERE name = {int(name_id)}) AS m{i}")
        cols.append(f'CAST(round(pm.m{i}) AS BIGINT) AS "{col}"' if is_time or base.endswith("_cycles")
                    else f'pm.m{i} AS "{col}"')
    join = (f"\nLEFT JOIN (SELECT global_task_id, {', '.join(aggs)} FROM {p}d_task_pmu_info GROUP BY global_task_id)"
            " pm ON pm.global_task_id = k.global_task_id")
    return {"pmu_columns": ", " + ", ".join(cols), "pmu_join": join}
