"""``ascendscope bench memsnap`` end to end on a small size: the snapshot is written, ingested as the server does
and checked against its figures, beside a capped ``pickle.load``; the JSON says so."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_memsnap_reports_checked_figures(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ascendscope.server.cli", "bench", "memsnap", "--sizes", "1",
                           "--out", str(tmp_path / "out"), "--pickle-cap-gb", "4"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    (row,) = result["sizes"]
    assert row["ours"]["rc"] == 0 and row["ours"]["figures_equal"], row
    assert row["ours"]["peak_rss_mb"] > 0 and row["ours"]["cpu_s"] > 0 and row["ours"]["mb_per_s"] > 0
    assert row["pickle_load"]["ok"] and row["pickle_load"]["entries"] == row["entries"]
    assert not list((tmp_path / "out").glob("*.pickle"))  # not kept without --keep
