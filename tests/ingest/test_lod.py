"""The level-of-detail table equals its naive SQL (the one stated in ingest/lod.py) on real data."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from ascendscope.ingest import duckmem, lod, lodcalc
from tests.ingest_helpers import REAL
from tests.samples import HAVE_REAL
from tests.shared_runs import single_file

NAIVE = """
SELECT track_id, depth, ts_ns // ? AS bucket, count(*) AS slice_count,
       arg_max(slice_id, (dur_ns, -slice_id)) AS slice_id,
       min(ts_ns) AS min_ts_ns, max(ts_ns + dur_ns) AS max_end_ns, sum(dur_ns) AS total_dur_ns
FROM slices GROUP BY track_id, depth, bucket
"""


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/real_samples is not beside the checkout")
def test_lod_equals_naive_sql(tmp_path, level1_db):
    out = tmp_path / "l1.duckdb"
    shutil.copy(level1_db, out)  # the session's ingest of PYTORCH_TEXT / "level1" (tests/conftest.py), rebuilt below
    con = duckdb.connect(str(out))
    assert con.execute("SELECT count(*) FROM lod_levels").fetchone()[0] >= 1
    lod.build(con, base_ns=1024)  # many levels, to check each one and the chaining between them
    # one row per (rank, level), each rank's with the same widths and counts in a single-file run
    levels = con.execute("SELECT DISTINCT level, bucket_ns, row_count FROM lod_levels ORDER BY level").fetchall()
    assert len(levels) >= (6 if HAVE_REAL else 3)  # the real run is longer than its generated twin
    assert all(b == a * 4 for (_, a, _), (_, b, _) in zip(levels, levels[1:]))
    for level, width, rows in levels:
        naive = con.execute(f"SELECT * FROM ({NAIVE}) ORDER BY ALL", [width]).fetchall()
        stored = con.execute("""SELECT track_id, depth, bucket, slice_count, slice_id, min_ts_ns, max_end_ns,
                                       total_dur_ns FROM slice_lod WHERE level = ? ORDER BY ALL""", [level]).fetchall()
        assert stored == naive, f"level {level}"
        assert rows == len(naive)
    # the carried columns are those of the chosen slice
    bad = con.execute("""SELECT count(*) FROM slice_lod l JOIN slices s USING (slice_id)
                         WHERE l.ts_ns <> s.ts_ns OR l.dur_ns <> s.dur_ns OR l.name <> s.name""").fetchone()[0]
    assert bad == 0
    # coarser levels really are smaller
    assert levels[-1][2] < levels[0][2]
    con.close()


def test_base_width_terminates_and_saves_rows():
    # few slices in many rows: no width can halve the rows, so the search stops at the widest extent
    assert lod.base_bucket_ns([(1, 10_000), (1, 5_000)], 2) <= 4 * 10_000
    # one dense row: 1M slices over 1 s want ~2 µs buckets or coarser
    width = lod.base_bucket_ns([(1_000_000, 10**9)], 1_000_000)
    assert 10**9 // width + 1 <= 500_000 and 10**9 // (width // 4) + 1 > 500_000


BUNDLED = Path(__file__).resolve().parents[2] / "sample_data" / "bundled"


def test_numpy_batches_and_sql_for_big_tracks_store_the_same_rows_in_the_same_order(tmp_path, tmp_path_factory,
                                                                                    monkeypatch):
    """Whole tracks are summarised in numpy a batch at a time, a track bigger than a batch in pieces (whole depths,
    a big depth cut in time), or in SQL alone when its durations might not sum in an int64: all give the naive
    SQL's rows, stored in (level, track, depth, bucket) order."""
    out = tmp_path / "b.duckdb"
    shutil.copy(single_file(tmp_path_factory, BUNDLED)[0], out)  # (shared: tests/shared_runs.py), rebuilt below
    con = duckdb.connect(str(out))
    lod.build(con, base_ns=1024)
    numpy_rows = con.execute("SELECT * FROM slice_lod").fetchall()
    biggest = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM slices GROUP BY track_id)").fetchone()[0]
    pieces, made = lod._pieces, []
    monkeypatch.setattr(lod, "_pieces", lambda *args: made.append(pieces(*args)) or made[-1])
    monkeypatch.setattr(lod, "BATCH_SLICES", biggest - 1)  # the biggest track (only) in pieces
    lod.build(con, base_ns=1024)
    assert made and all(len(piece) > 1 for piece in made)  # (the biggest tracks: two of 300 here)
    assert con.execute("SELECT * FROM slice_lod").fetchall() == numpy_rows
    made.clear()
    monkeypatch.setattr(lod, "BATCH_SLICES", 5)  # every track of more: depths cut in time, a span over 5 alone
    lod.build(con, base_ns=1024)
    assert any(sql.startswith("depth = ? AND ts_ns >= ? AND ts_ns <") for piece in made for sql, _ in piece)
    assert any(sql.startswith("depth BETWEEN") for piece in made for sql, _ in piece)
    assert con.execute("SELECT * FROM slice_lod").fetchall() == numpy_rows
    monkeypatch.setattr(lod, "BATCH_SLICES", biggest - 1)
    monkeypatch.setattr(lodcalc, "SUM_LIMIT", 1.0)  # sums that might not fit: the biggest track by SQL, alone
    lod.build(con, base_ns=1024)
    assert made[-1] is None
    assert con.execute("SELECT * FROM slice_lod").fetchall() == numpy_rows
    monkeypatch.undo()
    monkeypatch.setattr(lod, "BATCH_SLICES", max(1, biggest // 3))  # many batches, their rows in files
    monkeypatch.setattr(lod, "HELD_BYTES", 0)
    assert [lv[2] for lv in lod.build(con, base_ns=1024)] == [n for (n,) in con.execute(
        "SELECT count(*) FROM slice_lod GROUP BY level ORDER BY level").fetchall()]
    assert con.execute("SELECT * FROM slice_lod").fetchall() == numpy_rows
    assert not con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '\\_lod%' ESCAPE '\\'"
                           ).fetchall()
    assert numpy_rows == sorted(numpy_rows, key=lambda r: (r[0], r[2], r[3], r[4]))
    for level, width in con.execute("SELECT DISTINCT level, bucket_ns FROM slice_lod ORDER BY level").fetchall():
        naive = con.execute(f"SELECT * FROM ({NAIVE}) ORDER BY ALL", [width]).fetchall()
        assert con.execute("""SELECT track_id, depth, bucket, slice_count, slice_id, min_ts_ns, max_end_ns,
                                     total_dur_ns FROM slice_lod WHERE level = ? ORDER BY ALL""",
                           [level]).fetchall() == naive
    con.close()


def test_a_bucket_whose_total_duration_may_not_fit_is_left_to_sql():
    """``lodcalc`` raises SumTooLarge when a bucket's summed duration nears int64's range (SQL then sums it), and
    only then."""
    import pyarrow as pa

    from ascendscope.ingest import lodcalc

    def batch(durs):
        n = len(durs)
        return pa.table({"slice_id": list(range(n)), "track_id": [1] * n, "depth": [0] * n,
                         "ts_ns": [10 * i for i in range(n)], "dur_ns": durs, "name": ["k"] * n})

    big = 3 << 60  # two of them sum past 2**62
    with pytest.raises(lodcalc.SumTooLarge):
        lodcalc.levels(batch([big, big]), [1 << 20], 4)
    made = lodcalc.levels(batch([big, 5]), [1 << 20], 4)
    assert made[0].column("total_dur_ns").to_pylist() == [big + 5]


def test_the_build_lends_what_it_holds_from_duckdbs_limit_and_gives_it_back(tmp_path, tmp_path_factory, monkeypatch):
    """The batches and the level rows held are numpy and Arrow memory beside DuckDB's: its limit is lowered by
    them while the levels are made, then restored."""
    out = tmp_path / "b.duckdb"
    shutil.copy(single_file(tmp_path_factory, BUNDLED)[0], out)
    con = duckdb.connect(str(out))
    con.execute("SET memory_limit = '1GiB'")
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    monkeypatch.setattr(lod, "SLICE_BYTES", 1 << 20)  # (the bundled run's few slices, made to weigh)
    levels, seen = lodcalc.levels, []

    def spy(*args):
        seen.append(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        return levels(*args)

    monkeypatch.setattr(lodcalc, "levels", spy)
    lod.build(con)
    assert seen and all(duckmem.mib(s) < duckmem.mib(limit) - 64 for s in seen)  # (at least LENT_MIN lent)
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == limit
    con.close()
