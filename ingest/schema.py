"""DDL of the run database (the contract in docs/schema.md).

Tables filled from CSVs take their columns from the files (unknown columns are kept), so only their base
columns are declared here, for the case where no rank had the file: queries never fail on a missing table. The
memory snapshot's ``mem_*`` tables are declared in ``ingest.memsnap.schema``.
"""

from .memsnap.schema import DDL_STATEMENTS as MEMSNAP_DDL

CORE_DDL = [
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE ranks (rank INTEGER, device_id INTEGER, folder VARCHAR, rank_source VARCHAR,
        profiler_level VARCHAR, torch_npu_version VARCHAR, cann_version VARCHAR, has_trace BOOLEAN,
        overlap_source VARCHAR, start_ns BIGINT, end_ns BIGINT, profiler_info JSON, profiler_metadata JSON,
        group_folder VARCHAR, own_rank INTEGER, session INTEGER)""",
    """CREATE TABLE files (rank INTEGER, file VARCHAR, kind VARCHAR, size_bytes BIGINT, rows BIGINT,
        status VARCHAR, seconds DOUBLE)""",
    "CREATE TABLE warnings (rank INTEGER, file VARCHAR, message VARCHAR)",
    """CREATE TABLE tracks (track_id INTEGER, rank INTEGER, pid BIGINT, tid BIGINT, process_name VARCHAR,
        thread_name VARCHAR, kind VARCHAR, label VARCHAR, process_sort_index INTEGER, thread_sort_index INTEGER,
        sort_index INTEGER, counter_name VARCHAR, slice_count BIGINT, max_depth INTEGER, max_dur_ns BIGINT,
        min_ts_ns BIGINT, max_end_ns BIGINT, derived BOOLEAN)""",
    """CREATE TABLE slices (slice_id BIGINT, track_id INTEGER, rank INTEGER, ts_ns BIGINT, dur_ns BIGINT,
        depth INTEGER, parent_id BIGINT, name VARCHAR, cat VARCHAR, ph VARCHAR, args JSON USING COMPRESSION zstd)""",
    """CREATE TABLE flows (flow_id BIGINT, rank INTEGER, cat VARCHAR, name VARCHAR, flow_key VARCHAR,
        src_track_id INTEGER, src_ts_ns BIGINT, src_slice_id BIGINT, dst_track_id INTEGER, dst_ts_ns BIGINT,
        dst_slice_id BIGINT)""",
    """CREATE TABLE counters (track_id INTEGER, rank INTEGER, name VARCHAR, series VARCHAR, ts_ns BIGINT,
        value DOUBLE)""",
    """CREATE TABLE steps (rank INTEGER, step BIGINT, name VARCHAR, slice_id BIGINT, host_start_ns BIGINT,
        host_end_ns BIGINT, device_start_ns BIGINT, device_end_ns BIGINT)""",
    *MEMSNAP_DDL,
]

_BASE = "rank INTEGER, src_row INTEGER"
EMPTY_TABLES = {
    "kernels": f"""CREATE TABLE kernels ({_BASE}, step_id BIGINT, name VARCHAR, type VARCHAR,
        accelerator_core VARCHAR, start_ns BIGINT, duration_ns BIGINT, wait_time_ns BIGINT, block_dim BIGINT,
        stream_id BIGINT, task_id BIGINT, input_shapes VARCHAR)""",
    "operators": f"""CREATE TABLE operators ({_BASE}, name VARCHAR, input_shapes VARCHAR, call_stack VARCHAR,
        host_self_duration_ns BIGINT, host_total_duration_ns BIGINT, device_self_duration_ns BIGINT,
        device_total_duration_ns BIGINT, device_self_duration_with_aicore_ns BIGINT,
        device_total_duration_with_aicore_ns BIGINT)""",
    "op_statistic": f"""CREATE TABLE op_statistic ({_BASE}, op_type VARCHAR, core_type VARCHAR, count BIGINT,
        total_time_ns BIGINT, min_time_ns BIGINT, avg_time_ns BIGINT, max_time_ns BIGINT, ratio_pct DOUBLE)""",
    "api_statistic": f"""CREATE TABLE api_statistic ({_BASE}, level VARCHAR, api_name VARCHAR, time_ns BIGINT,
        count BIGINT, avg_ns BIGINT, min_ns BIGINT, max_ns BIGINT, variance DOUBLE)""",
    "step_trace": f"""CREATE TABLE step_trace ({_BASE}, device_id BIGINT, step BIGINT, computing_ns BIGINT,
        communication_not_overlapped_ns BIGINT, overlapped_ns BIGINT, communication_ns BIGINT, free_ns BIGINT,
        stage_ns BIGINT, bubble_ns BIGINT, communication_not_overlapped_and_exclude_receive_ns BIGINT,
        preparing_ns BIGINT)""",
    "memory_record": f"""CREATE TABLE memory_record ({_BASE}, component VARCHAR, timestamp_ns BIGINT,
        total_allocated_mb DOUBLE, total_reserved_mb DOUBLE, total_active_mb DOUBLE, stream_ptr VARCHAR,
        device_type VARCHAR)""",
    "operator_memory": f"""CREATE TABLE operator_memory ({_BASE}, name VARCHAR, size_kb DOUBLE,
        allocation_time_ns BIGINT, release_time_ns BIGINT, active_release_time_ns BIGINT, duration_ns BIGINT,
        active_duration_ns BIGINT, allocation_total_allocated_mb DOUBLE, allocation_total_reserved_mb DOUBLE,
        allocation_total_active_mb DOUBLE, release_total_allocated_mb DOUBLE, release_total_reserved_mb DOUBLE,
        release_total_active_mb DOUBLE, stream_ptr VARCHAR, device_type VARCHAR)""",
    "npu_module_mem": f"""CREATE TABLE npu_module_mem ({_BASE}, component VARCHAR, timestamp_ns BIGINT,
        total_reserved_mb DOUBLE, device VARCHAR)""",
    "l2_cache": f"""CREATE TABLE l2_cache ({_BASE}, stream_id BIGINT, task_id BIGINT, hit_rate DOUBLE,
        victim_rate DOUBLE, op_name VARCHAR)""",
}
