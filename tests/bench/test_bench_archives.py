"""``ascendscope bench archives`` uploads a hostile and an honest zip to a live server and reports each answer
with the web process's time and memory."""

from __future__ import annotations

import json

from ascendscope.bench import archives


def test_the_benchmark_reports_each_upload(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert archives.main(["--entries", "250000", "--repeat", "1", "--out", str(tmp_path / "zips"),
                          "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {r["case"]: r for r in result["uploads"]}
    assert (rows["hostile"]["status"], rows["hostile"]["code"]) == (413, "archive_too_large")
    assert "lists 250000 entries: more than 100000 members" in rows["hostile"]["message"]
    assert rows["honest"]["status"] == 202
    for row in rows.values():
        assert row["version"] == "after" and 0 < row["web_rss_before_mb"] <= row["web_rss_peak_mb"]
        assert row["wall_s"] > 0 and row["web_cpu_s"] >= 0
    assert "hostile" in capsys.readouterr().out
