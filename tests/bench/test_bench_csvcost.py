"""``bench.csvcost`` times a rank's CSVs as a shard loads them (``CsvLoad`` into a database file, then a batch of
ranks with ``csvmany``), and sets the versions side by side per file."""

from __future__ import annotations

from pathlib import Path

from ascendscope.bench import csvcost
from ascendscope.sample_data.generate import generate_run


def test_a_rank_s_csvs_are_timed_file_by_file_and_in_a_batch(tmp_path):
    generate_run(tmp_path / "run", ranks=1, steps=2, ops_per_step=30, seed=5)
    folder = next((tmp_path / "run").glob("*/ASCEND_PROFILER_OUTPUT"))
    got = csvcost.child(folder, 3)
    assert {"kernel_details", "operator_details", "CHECKPOINT (writes them)", "kernel_details ×3",
            "operator_details ×3"} <= set(got)
    assert got["kernel_details ×3"]["rows"] == 3 * got["kernel_details"]["rows"] > 0
    assert got["kernel_details ×3"]["bytes"] == 3 * Path(folder / "kernel_details.csv").stat().st_size
    assert all(v["cpu_s"] >= 0 and v["wall_s"] > 0 for v in got.values())
    table = csvcost.table({"after": [got, got], "before": [got, got]})
    lines = table.split("\n\n")[0].splitlines()
    assert len(lines) == 2 + len(got) + 1  # header, rule, a row per measurement, the total
    assert lines[-1].startswith("| all CSVs (CsvLoad and CHECKPOINT) |") and lines[-1].endswith("| 1.00 |")
    assert "The database file after the checkpoint: after" in table
