"""``ascendscope.open(...)`` answers with the views' numbers: every table method equals the rows the view's JSON API
answers for the same run, on the real level1 sample and on the generated twin; the steps and communication also on
the real level2, 4-rank (no trace) and 16-rank communication samples."""

from __future__ import annotations

import pytest

from tests.pyapi.conftest import assert_rows_equal, records

SAMPLES = ["generated", "level1"]


def _run(opened, runs, name):
    if name == "level1" and name not in runs.ids:
        pytest.skip("no level1 sample")
    return opened[name], runs.ids[name]


@pytest.mark.parametrize("name", SAMPLES)
def test_steps_equal_the_summary_breakdown(opened, runs, client, name):
    run, rid = _run(opened, runs, name)
    view = client.get(f"/api/runs/{rid}/summary").json()
    frame = run.steps()
    assert len(frame) > 0
    assert_rows_equal(frame, view["breakdown"])
    for source in ("step_trace", "overlap"):
        rows = client.get(f"/api/runs/{rid}/summary", params={"source": source}).json()["breakdown"]
        assert_rows_equal(run.steps(source=source), rows)


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("group_by", ["type", "name", "name_shapes", "core"])
def test_kernel_groups_equal_the_operator_view(opened, runs, client, name, group_by):
    run, rid = _run(opened, runs, name)
    for rank in run.ranks:
        view = client.get(f"/api/runs/{rid}/operators/groups",
                          params={"rank": rank, "group_by": group_by, "limit": 500}).json()
        frame = run.kernels(rank=rank, group_by=group_by)
        assert len(frame) == view["total"]
        assert_rows_equal(frame.head(500), view["rows"])
    everything = run.kernels(group_by=group_by)
    assert sorted(set(everything["rank"])) == [r for r in run.ranks if len(run.kernels(rank=r, group_by=group_by))]


@pytest.mark.parametrize("name", SAMPLES)
def test_torch_ops_memory_and_communication_equal_their_views(opened, runs, client, name):
    run, rid = _run(opened, runs, name)
    for rank in run.ranks:
        torch = client.get(f"/api/runs/{rid}/operators/torch", params={"rank": rank, "limit": 500}).json()
        assert_rows_equal(run.operators(rank=rank).head(500), torch["rows"])
        memory = client.get(f"/api/runs/{rid}/memory", params={"rank": rank}).json()
        assert_rows_equal(run.memory(rank=rank), memory.get("components", []))
        alloc = client.get(f"/api/runs/{rid}/memory/allocations", params={"rank": rank, "limit": 500}).json()
        assert_rows_equal(run.memory_allocations(rank=rank).head(500), alloc["rows"])
    totals = client.get(f"/api/runs/{rid}/communication/ranks").json()
    assert_rows_equal(run.communication(), totals["rows"])
    ops = client.get(f"/api/runs/{rid}/communication/ops", params={"limit": 500}).json()
    frame = run.communication_ops()
    assert len(frame) == ops["total"]
    assert_rows_equal(frame.head(500), ops["rows"])


@pytest.mark.parametrize("name", SAMPLES)
def test_advice_equals_the_advice_view(opened, runs, client, name):
    run, rid = _run(opened, runs, name)
    every = records(run.advice())
    for rank in run.ranks:
        view = client.get(f"/api/runs/{rid}/advice", params={"rank": rank}).json()["findings"]
        frame = run.advice(rank=rank)
        by_id = {f["id"]: f for f in view}
        got = records(frame)
        assert sorted(f["id"] for f in got) == sorted(by_id)
        for f in got:
            for key in ("severity", "title", "text", "metrics", "instance_count", "rank", "step"):
                assert f[key] == by_id[f["id"]][key], (f["id"], key)
        # all ranks at once: this rank's own findings, and the cross-rank ones once
        assert {f["id"] for f in every if f["rank"] == rank} == {f["id"] for f in view if f["rank"] == rank}
    cross = [f["id"] for f in every if f["rank"] is None]
    assert len(cross) == len(set(cross))


def test_ranks_info_and_arrow(opened):
    run = opened["generated"]
    assert run.ranks == [0, 1]
    info = run.info()
    assert info["rank_count"] == 2 and len(info["ranks"]) == 2
    table = run.kernels(rank=0, arrow=True)
    import pyarrow as pa

    assert isinstance(table, pa.Table)
    assert table.column_names == list(run.kernels(rank=0).columns)
    advice = run.advice(arrow=True)  # nested metrics become JSON text in Arrow
    assert pa.types.is_string(advice.schema.field("metrics").type) or pa.types.is_large_string(
        advice.schema.field("metrics").type)


def test_absolute_times_stay_exact_integers(opened):
    ops = opened["generated"].communication_ops()
    assert str(ops["start_ns"].dtype) in ("Int64", "int64")
    assert int(ops["start_ns"].iloc[0]) > 10 ** 18  # epoch ns, beyond a float's exact integers


def test_unknown_tables_and_filters_are_refused(opened):
    run = opened["generated"]
    with pytest.raises(ValueError, match="no table"):
        run.table("nope")
    with pytest.raises(TypeError, match="no filter"):
        run.table("memory", colour="red")
    from ascendscope.server.queries import QueryError

    with pytest.raises(QueryError, match="group_by"):
        run.kernels(group_by="colour")


@pytest.mark.parametrize("name", ["level2", "st4", "fixtures"])
def test_more_real_samples(view_runs, runs, client, name):
    import ascendscope
    from ascendscope.server.runs import RunStore

    rid = view_runs[name]
    with ascendscope.open(RunStore(runs.data_dir).db_path(rid)) as run:
        assert run.id == rid
        assert_rows_equal(run.steps(), client.get(f"/api/runs/{rid}/summary").json()["breakdown"])
        assert_rows_equal(run.communication(), client.get(f"/api/runs/{rid}/communication/ranks").json()["rows"])
        ops = client.get(f"/api/runs/{rid}/communication/ops", params={"limit": 500}).json()
        frame = run.communication_ops()
        assert len(frame) == ops["total"]
        assert_rows_equal(frame.head(500), ops["rows"])
        for rank in run.ranks[:2]:
            view = client.get(f"/api/runs/{rid}/operators/groups",
                              params={"rank": rank, "limit": 500, "group_by": "name"}).json()
            assert_rows_equal(run.kernels(rank=rank).head(500), view["rows"])
