"""The ``mem_*`` tables of a memory snapshot (the contract in docs/schema.md, "Memory snapshot tables").

Every run database has them (empty without a snapshot), so queries never fail on a missing table. Sizes are
bytes, times ``*_ts_ns`` epoch ns (a snapshot's ``time_us`` × 1000; NULL without it), ``*_idx`` the entry's
position in its device's trace (0-based). A block or segment life that began before the trace has a NULL start;
one still live at the dump a NULL end.
"""

DDL = {
    "mem_snapshots": """rank INTEGER, file VARCHAR, size_bytes BIGINT, flavour VARCHAR, devices INTEGER,
        entries BIGINT, segments INTEGER, frames BIGINT, stacks BIGINT, annotations BIGINT, settings JSON,
        seconds DOUBLE""",
    "mem_devices": """rank INTEGER, device INTEGER, entries BIGINT, has_time BOOLEAN, first_ts_ns BIGINT,
        last_ts_ns BIGINT, segments_at_dump INTEGER, reserved_at_dump BIGINT, allocated_at_dump BIGINT,
        active_at_dump BIGINT, requested_at_dump BIGINT, active_requested_at_dump BIGINT, active_base BIGINT,
        allocated_base BIGINT, reserved_base BIGINT, peak_active BIGINT, peak_idx BIGINT, peak_ts_ns BIGINT,
        min_active BIGINT, min_allocated BIGINT, min_reserved BIGINT, blocks BIGINT, blocks_before_trace BIGINT,
        blocks_live_at_dump BIGINT, workspace_bytes BIGINT, ooms BIGINT, anomalies JSON""",
    "mem_events": """rank INTEGER, device INTEGER, idx BIGINT, action VARCHAR, addr BIGINT, size BIGINT,
        stream BIGINT, ts_ns BIGINT, stack_id INTEGER, block_id BIGINT, device_free BIGINT, synthetic BOOLEAN,
        active_rel BIGINT, allocated_rel BIGINT, reserved_rel BIGINT""",
    "mem_event_extra": "rank INTEGER, device INTEGER, idx BIGINT, key VARCHAR, value VARCHAR",
    "mem_blocks": """rank INTEGER, device INTEGER, block_id BIGINT, addr BIGINT, size BIGINT, requested_size BIGINT,
        stream BIGINT, stack_id INTEGER, alloc_idx BIGINT, alloc_ts_ns BIGINT, free_requested_idx BIGINT,
        free_requested_ts_ns BIGINT, free_idx BIGINT, free_ts_ns BIGINT, free_stack_id INTEGER,
        state_at_dump VARCHAR, segment_address BIGINT""",
    "mem_segments": """rank INTEGER, device INTEGER, piece_id INTEGER, address BIGINT, size BIGINT, stream BIGINT,
        segment_type VARCHAR, pool_id VARCHAR, is_expandable BOOLEAN, is_workspace BOOLEAN, stack_id INTEGER,
        start_idx BIGINT, start_ts_ns BIGINT, end_idx BIGINT, end_ts_ns BIGINT, dump_address BIGINT,
        dump_total_size BIGINT, dump_allocated_size BIGINT, dump_active_size BIGINT, dump_requested_size BIGINT,
        dump_blocks INTEGER""",
    "mem_frames": "rank INTEGER, stack_id INTEGER, depth INTEGER, name VARCHAR, filename VARCHAR, line BIGINT",
    "mem_curve_lod": """rank INTEGER, device INTEGER, level INTEGER, bucket BIGINT, first_idx BIGINT,
        last_idx BIGINT, first_ts_ns BIGINT, last_ts_ns BIGINT, active_min BIGINT, active_max BIGINT,
        allocated_min BIGINT, allocated_max BIGINT, reserved_min BIGINT, reserved_max BIGINT, active_last BIGINT,
        allocated_last BIGINT, reserved_last BIGINT""",
    "mem_annotations": "rank INTEGER, device INTEGER, ts_ns BIGINT, name VARCHAR, stage VARCHAR, meta JSON",
}
TABLES = tuple(DDL)
DDL_STATEMENTS = [f"CREATE TABLE {name} ({columns})" for name, columns in DDL.items()]
# counted in an ingest's summary (a run of a snapshot alone has rows to show)
COUNTED = ("mem_events", "mem_blocks", "mem_segments")
