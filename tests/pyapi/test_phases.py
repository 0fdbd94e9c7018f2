"""``Run.phases()`` and ``Run.phases_summary()`` answer what /api/runs/{id}/phases does, on a sharded generated
pipeline run and a one-file RL job (``sample_data.phases``)."""

from __future__ import annotations

import pytest

import ascendscope
from tests.pyapi.conftest import assert_rows_equal


@pytest.mark.parametrize("name", ["pp_db", "rl_db"])
def test_phases_match_the_api(client, runs, phase_runs, name):
    from ascendscope.server.runs import RunStore

    run_id = phase_runs.ids[name]
    store = RunStore(runs.data_dir)
    path = store.run_dir(run_id) if (store.run_dir(run_id) / "manifest.json").exists() else store.db_path(run_id)
    with ascendscope.open(path) as run:
        frame = run.phases()
        api = client.get(f"/api/runs/{run_id}/phases", params={"limit": 20000}).json()
        assert len(frame) == api["total"] > 0
        assert_rows_equal(frame, api["rows"], [c for c in frame.columns if c != "timeline"])
        assert run.phases(rank=1)["rank"].unique().tolist() == [1]
        with pytest.raises(TypeError, match="no filter"):
            run.phases(stage=1)
        summary = run.phases_summary()
        assert summary["iterations"] == client.get(f"/api/runs/{run_id}/phases/summary").json()["iterations"]
