"""Which tables and columns of the db export are read (FORMATS.md §7), and under which staged names.

Each source table is staged as ``{prefix}d_<name>`` with the columns below, in snake_case; a table lists every
name it has had (``CANN_API|API``: the first one present is read) and a column every source name it has had
(2024/2025 samples and the msprof HEAD schema). Name-like integer columns stay ids into
``STRING_IDS`` (or an ``ENUM_*`` table) and are resolved in SQL.
"""

from __future__ import annotations

from .sqlitedb import Col


def _cols(*specs: str) -> tuple[Col, ...]:
    """``"name TYPE srcA|srcB"`` -> Col; the source defaults to the camelCase of the name, then the name. A name
    ending in ``?`` is a column that only some versions write."""
    out = []
    for spec in specs:
        name, typ, *src = spec.split()
        optional = name.endswith("?")
        name = name.rstrip("?")
        sources = tuple(src[0].split("|")) if src else (_camel(name), name)
        out.append(Col(name, typ, sources, optional))
    return tuple(out)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


B, D, V = "BIGINT", "DOUBLE", "VARCHAR"

# ascend_pytorch_profiler[_N].db / msprof_N.db
TABLES: dict[str, tuple[str, tuple[Col, ...]]] = {
    "string_ids": ("STRING_IDS", _cols(f"id {B}", f"value {V}")),
    "enum_api_type": ("ENUM_API_TYPE|ENUM_API_LEVEL", _cols(f"id {B}", f"name {V}")),
    "enum_data_type": ("ENUM_HCCL_DATA_TYPE", _cols(f"id {B}", f"name {V}")),
    "enum_link_type": ("ENUM_HCCL_LINK_TYPE", _cols(f"id {B}", f"name {V}")),
    "enum_transport_type": ("ENUM_HCCL_TRANSPORT_TYPE", _cols(f"id {B}", f"name {V}")),
    "enum_rdma_type": ("ENUM_HCCL_RDMA_TYPE", _cols(f"id {B}", f"name {V}")),
    "enum_module": ("ENUM_MODULE", _cols(f"id {B}", f"name {V}")),
    "enum_mstx_event_type": ("ENUM_MSTX_EVENT_TYPE", _cols(f"id {B}", f"name {V}")),
    # startNs/endNs are declared TEXT by torch_npu: staged as text, converted where used
    "pytorch_api": ("PYTORCH_API", _cols(
        f"start_t {V} startNs", f"end_t {V} endNs", f"global_tid {B}", f"connection_id {B}", f"name {B}",
        f"sequence_number {B}", f"fwd_thread_id {B}", f"input_dtypes {B}", f"input_shapes {B}",
        f"callchain_id {B}", f"type {B}")),
    "connection_ids": ("CONNECTION_IDS", _cols(f"id {B}", f"connection_id {B}")),
    "pytorch_callchains": ("PYTORCH_CALLCHAINS", _cols(f"id {B}", f"stack {B}", f"stack_depth {B}")),
    "gc_record": ("GC_RECORD", _cols(f"start_ns {B}", f"end_ns {B}", f"global_tid {B}")),
    "cann_api": ("CANN_API|API", _cols(f"start_ns {B}", f"end_ns {B}", f"type {B}", f"global_tid {B}",
                                   f"connection_id {B}", f"name {B}")),
    "task": ("TASK", _cols(f"start_ns {B}", f"end_ns {B}", f"device_id {B}", f"connection_id {B}",
                           f"global_task_id {B}", f"global_pid {B}", f"task_type {B}", f"context_id {B}",
                           f"stream_id {B}", f"task_id {B}", f"model_id {B}")),
    "compute_task_info": ("COMPUTE_TASK_INFO", _cols(
        f"name {B}", f"global_task_id {B}", f"block_dim {B} blockDim|blockNum|block_dim",
        f"mix_block_dim {B} mixBlockDim|mixBlockNum", f"task_type {B}", f"op_type {B}", f"input_formats {B}",
        f"input_data_types {B}", f"input_shapes {B}", f"output_formats {B}", f"output_data_types {B}",
        f"output_shapes {B}", f"attr_info? {B}", f"op_state? {B}", f"hf32_eligible? {B}")),
    "task_pmu_info": ("TASK_PMU_INFO", _cols(f"global_task_id {B}", f"name {B}", f"value {D}")),
    "communication_op": ("COMMUNICATION_OP", _cols(
        f"op_name {B}", f"start_ns {B}", f"end_ns {B}", f"connection_id {B}", f"group_name {B}", f"op_id {B}",
        f"relay? {B}", f"retry? {B}", f"data_type? {B}", f"alg_type? {B}", f"count? {D}", f"op_type? {B}",
        f"device_id? {B}")),
    "communication_task_info": ("COMMUNICATION_TASK_INFO", _cols(
        f"name {B}", f"global_task_id {B}", f"task_type {B}", f"plane_id {B}", f"group_name {B}",
        f"notify_id {V}", f"rdma_type {B}", f"src_rank {B}", f"dst_rank {B}", f"transport_type {B}",
        f"size {D}", f"data_type {B}", f"link_type {B}", f"op_id {B}", f"bandwidth? {D}")),
    "overlap_analysis": ("OVERLAP_ANALYSIS", _cols(f"device_id {B}", f"start_ns {B}", f"end_ns {B}",
                                                   f"type {B}")),
    "step_time": ("STEP_TIME", _cols(f"id {B}", f"start_ns {B}", f"end_ns {B}")),
    "mstx_events": ("MSTX_EVENTS", _cols(f"start_ns {B}", f"end_ns {B}", f"event_type {B}", f"range_id {B}",
                                         f"category {B}", f"message {B}", f"global_tid {B}", f"domain_id {B}",
                                         f"connection_id {B}")),
    "rank_device_map": ("RANK_DEVICE_MAP", _cols(f"rank_id {B}", f"device_id {B}")),
    # memory (sizes in bytes)
    "memory_record": ("MEMORY_RECORD", _cols(
        f"component {B}", f"timestamp {B}", f"total_allocated {D}", f"total_reserved {D}", f"total_active {D}",
        f"stream_ptr {V}", f"device_id {B}")),
    "op_memory": ("OP_MEMORY", _cols(
        f"name {B}", f"size {D}", f"allocation_time {B}", f"release_time {B}", f"active_release_time {B}",
        f"duration {B}", f"active_duration {B}", f"allocation_total_allocated {D}",
        f"allocation_total_reserved {D}", f"allocation_total_active {D}", f"release_total_allocated {D}",
        f"release_total_reserved {D}", f"release_total_active {D}", f"stream_ptr {V}", f"device_id {B}")),
    "npu_mem": ("NPU_MEM", _cols(f"type {B}", f"ddr {D}", f"hbm {D}", f"timestamp_ns {B}", f"device_id {B}")),
    "npu_module_mem": ("NPU_MODULE_MEM", _cols(f"module_id {B}", f"timestamp_ns {B}", f"total_reserved {D}",
                                               f"device_id {B}")),
    # counters
    "hbm": ("HBM", _cols(f"device_id {B}", f"timestamp_ns {B}", f"bandwidth {D}", f"hbm_id {B}", f"type {B}")),
    "llc": ("LLC", _cols(f"device_id {B}", f"llc_id {B}", f"timestamp_ns {B}", f"hit_rate {D}", f"throughput {D}",
                         f"mode {B}")),
    "acc_pmu": ("ACC_PMU", _cols(f"acc_id {B}", f"read_bw_level {D}", f"write_bw_level {D}", f"read_ost_level {D}",
                                 f"write_ost_level {D}", f"timestamp_ns {B}", f"device_id {B}")),
    "soc_bandwidth_level": ("SOC_BANDWIDTH_LEVEL", _cols(f"l2_buffer_bw_level {D}", f"mata_bw_level {D}",
                                                         f"timestamp_ns {B}", f"device_id {B}")),
    "aicore_freq": ("AICORE_FREQ", _cols(f"device_id {B}", f"timestamp_ns {B}", f"freq {D}")),
}

# tables that carry no profile data of their own (lookups, bookkeeping, or what MindStudio Insight adds when it
# opens a file): never reported as "not loaded"
BOOKKEEPING = {"META_DATA", "HOST_INFO", "SESSION_TIME_INFO", "NPU_INFO", "SQLITE_SEQUENCE", "STATUS_INFO",
               "CONNECTIONCATS", "TARGET_INFO_SESSION_TIME", "TARGET_INFO_NPU"}

# analysis.db (µs / ms values, as in the JSON and CSV files): small, read as Python values (exact decimals)
ANALYSIS_TABLES: dict[str, tuple[str, tuple[Col, ...]]] = {
    "step_trace_time": ("StepTraceTime", _cols(
        f"device_id? {B}", f"step {V}", f"computing {D}", f"communication_not_overlapped {D}", f"overlapped {D}",
        f"communication {D}", f"free {D}", f"stage {D}", f"bubble {D}",
        f"communication_not_overlapped_and_exclude_receive {D}", f"preparing {D}")),
    "comm_time": ("CommAnalyzerTime", _cols(
        f"hccl_op_name {V}", f"group_name {V}", f"start_timestamp {D}", f"elapse_time {D}", f"transit_time {D}",
        f"wait_time {D}", f"synchronization_time {D}", f"idle_time {D}", f"step {V}", f"type {V}")),
    "comm_bandwidth": ("CommAnalyzerBandwidth", _cols(
        f"hccl_op_name {V}", f"group_name {V}", f"transport_type {V}", f"transit_size {D}", f"transit_time {D}",
        f"bandwidth {D}", f"large_packet_ratio {D}", f"package_size {D}", f"count {D}", f"total_duration {D}",
        f"step {V}", f"type {V}")),
    "comm_matrix": ("CommAnalyzerMatrix", _cols(
        f"hccl_op_name {V}", f"group_name {V}", f"src_rank {V}", f"dst_rank {V}", f"transport_type {V}",
        f"transit_size {D}", f"transit_time {D}", f"bandwidth {D}", f"step {V}", f"type {V}", f"op_name {V}")),
}


def source_table(names: str, present) -> str:
    """The name of ``names`` (``"CANN_API|API"``) the database has (upper-case keys in ``present``), else the
    first."""
    options = names.split("|")
    return next((t for t in options if t.upper() in present), options[0])


def all_names(tables) -> set[str]:
    """Every upper-case table name the specs ``tables`` may read."""
    return {t.upper() for names, _ in tables.values() for t in names.split("|")}
