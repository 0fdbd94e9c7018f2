"""`ascendscope bench insights --table-only` runs end to end on a small synthetic table and finds its late ranks."""

from __future__ import annotations

import json

from ascendscope.bench import insights


def test_table_only(capsys):
    assert insights.main(["--table-only", "--ranks", "12", "--steps", "4", "--repeat", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"] == 48 and out["checks"] == {"late_ranks": True, "totals_ranks": True}
    assert set(out["timings"]) == {"steps", "table (one step)", "totals", "chains (64 ranks, 10 steps)", "instance"}
