"""`ascendscope bench console-abuse --quick` runs end to end through the CLI: a real server, the prober, the
hostile clients from their own loopback addresses, and the figures of each measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_quick_run(tmp_path):
    env = dict(os.environ, ASCENDSCOPE_BENCH_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    # 1 s per measurement (3 s by default): the prober reads each path every 0.5 s, so every row still has probes
    done = subprocess.run([sys.executable, "-m", "ascendscope.server.cli", "bench", "console-abuse", "--quick",
                           "--seconds", "1", "--json", str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["seconds"] == 1  # (--quick keeps an explicit --seconds)
    rows = {(r["query"], r["clients"]): r for r in result["rows"] if r["clients"]}
    assert set(rows) == {(q, c) for q in ("600-term sum", "glob the spill folder") for c in (1, 4)}
    for (query, _), row in rows.items():
        expected = "200" if query == "600-term sum" else "400"
        assert set(row["answers"]) == {expected}, row
        assert row["probe_errors"] == 0 and row["probe_count"] > 0 and row["web_query_peak_mb"] > 0
        assert all(limit for _, limit in row["console_peak_mb"].values())  # each worker's address-space limit
    alone = [r for r in result["rows"] if not r["clients"]]
    assert len(alone) == 2 and all(r["probe_count"] > 0 and not r["answers"] for r in alone)
    assert "| 600-term sum | 4 |" in done.stdout
