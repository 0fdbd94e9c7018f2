"""cluster_phases at ingest: mstx ranges of the text and db exports become phases with their messages kept and
parsed, roles from folders or names, iterations from ProfilerStep; built per shard, the parts equal the whole."""

from __future__ import annotations

import duckdb
import pytest

from ascendscope.ingest import phases
from ascendscope.ingest.layout import connect
from ascendscope.ingest.pipeline import ingest_path
from ascendscope.ingest.shards import ingest_sharded
from ascendscope.sample_data.phases import write_pp_run, write_rl_job


def test_parse_message_takes_json_and_python_dicts_only():
    assert phases.parse_message('{"name": "forward_step", "current_microbatch": 3}') == \
        {"name": "forward_step", "current_microbatch": 3}
    assert phases.parse_message("{'name': 'backward_step', 'current_microbatch': 0}") == \
        {"name": "backward_step", "current_microbatch": 0}
    for text in ("forward_step", "{__import__('os')}", "{'a': [1, 2}", "[1, 2]", None, "{" + "1" * 5000 + "}"):
        assert phases.parse_message(text) is None
    assert phases.folder_role("job/Actor/rank0_ascend_pt") == "actor"
    assert phases.folder_role("job/reference/x/rank0_ascend_pt") == "ref"
    assert phases.folder_role("actor_rollout/w0_ascend_pt") is None
    assert phases.folder_iteration("save/3/actor/w0_ascend_pt") == 3
    assert phases.folder_iteration("save/step_12/w0_ascend_pt") == 12


@pytest.mark.parametrize("form", ["text", "db"])
def test_pp_ranges_become_phases(tmp_path, form):
    truth = write_pp_run(tmp_path / "pp", stages=3, microbatches=4, form=form)
    ingest_path(tmp_path / "pp", tmp_path / "pp.duckdb")
    con = duckdb.connect(str(tmp_path / "pp.duckdb"), read_only=True)
    rows = con.execute("SELECT rank, source, phase, microbatch, iteration, fields->>'name', start_ns, end_ns "
                       "FROM cluster_phases ORDER BY rank, source, start_ns").fetchall()
    sources = {"text": ("device", "host"), "db": ("host",)}[form]
    assert len(rows) == 3 * 8 * len(sources)
    for rank, ops in enumerate(truth["schedule"]):
        mine = [r for r in rows if r[0] == rank and r[1] == sources[0]]
        names = {"F": "forward_step", "B": "backward_step"}
        assert [(r[2], r[3], r[4], r[5]) for r in mine] == [(names[k], i, 1, names[k]) for k, i, _, _ in ops]
        t0 = truth["t0_ns"]  # the schedule's time 0 (its first forward)
        assert [(r[6] - t0, r[7] - t0) for r in mine] == [(a * 1000, b * 1000) for _, _, a, b in ops]


def test_rl_roles_from_folder_and_names_and_sharded_equals_whole(tmp_path):
    write_rl_job(tmp_path / "rl", workers=2, iterations=2)
    ingest_path(tmp_path / "rl", tmp_path / "rl.duckdb")
    ingest_sharded(tmp_path / "rl", tmp_path / "rl_sharded", workers=1, group_bytes=0)
    whole = duckdb.connect(str(tmp_path / "rl.duckdb"), read_only=True)
    cols = "rank, role, role_source, iteration, phase, message, microbatch, source, start_ns, end_ns"
    want = whole.execute(f"SELECT {cols} FROM cluster_phases ORDER BY ALL").fetchall()
    assert {(r[0], r[1], r[2]) for r in want} == {(0, "rollout", "name"), (0, "actor", "name"), (1, "rollout", "name"),
                                                  (1, "actor", "name"), (2, "ref", "folder"), (3, "ref", "folder")}
    assert {r[3] for r in want} == {1, 2}
    sharded, _ = connect(tmp_path / "rl_sharded", [])  # cluster.duckdb alone: no shard attached
    assert sharded.execute(f"SELECT {cols} FROM cluster_phases ORDER BY ALL").fetchall() == want


def test_msprof_db_mstx_events_are_phases(tmp_path):
    """The msprof db export of msinsight_server_fixtures (or its twin): every MSTX_EVENTS range is a host phase,
    with its message resolved through STRING_IDS."""
    import sqlite3

    from tests.samples import REAL_SAMPLES

    db = REAL_SAMPLES / "msinsight_server_fixtures" / "full_db" / "msprof_0.db"
    src = sqlite3.connect(db)
    want = sorted(src.execute("SELECT m.startNs, m.endNs, s.value FROM MSTX_EVENTS m LEFT JOIN STRING_IDS s "
                              "ON s.id = m.message WHERE m.endNs > m.startNs").fetchall())
    src.close()
    ingest_path(db.parent, tmp_path / "fx.duckdb")
    con = duckdb.connect(str(tmp_path / "fx.duckdb"), read_only=True)
    got = sorted(con.execute("SELECT start_ns, end_ns, message FROM cluster_phases WHERE source = 'host'").fetchall())
    assert got == want and len(got) >= 3


def test_role_folders_that_reuse_rank_ids_are_all_kept(tmp_path):
    """Non-colocated worker groups (actor/, rollout/) and a group at the root each number their ranks from 0:
    every folder is kept, under ids of its own, with its folder and own rank id; a plain duplicate keeps the newer."""
    from ascendscope.ingest.discover import discover
    from ascendscope.sample_data.phases import _write_text

    job = tmp_path / "job"
    for group in ("actor", "rollout"):
        for w in range(2):
            _write_text(job / group / f"node0_{w}_ascend_pt", w, [], [("x", 0, 10)], False, None)
    _write_text(job / "node1_0_ascend_pt", 0, [], [("compute_ref_log_prob", 0, 10)], False, None)
    disc = discover(job)
    got = {(s.group, s.own_rank, s.session) for s in disc.ranks}
    assert got == {("actor", 0, None), ("actor", 1, None), ("rollout", 0, None), ("rollout", 1, None),
                   ("job", 0, None)}
    assert sorted(s.rank for s in disc.ranks) == [0, 1, 2, 3, 4] and not disc.warnings
    plain = tmp_path / "plain"
    for name in ("a", "b"):
        _write_text(plain / name / "r_ascend_pt", 0, [], [("x", 0, 10)], False, None)
    disc = discover(plain)
    assert len(disc.ranks) == 1 and disc.ranks[0].group is None and "appears twice" in disc.warnings[0][2]
