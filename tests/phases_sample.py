"""Runs for the Phases tests (issue #38): ``sample_data.phases`` runs whose stages, microbatches, bubbles, roles,
idle gaps and deciding chains are known by construction, ingested into the store of ``runs`` (so ``client`` and
``live_server`` serve them). The ``phase_runs`` fixture (tests/conftest.py) calls :func:`add_phase_runs`."""

from __future__ import annotations

from pathlib import Path

from ascendscope.sample_data.phases import write_pp_run, write_rl_discrete, write_rl_job
from ascendscope.sample_data.phases_dualpipe import write_dualpipev_run
from tests.insight_sample import add_ready

PP = {"stages": 4, "microbatches": 8, "fwd_us": 100, "bwd_us": 200}
PP_SLOW = {**PP, "slow_stage": 2, "slow_extra_us": 50}
RL = {"workers": 4, "iterations": 2}
RL_DISCRETE = {"workers": 3, "iterations": 2}
DUALPIPEV = {"stages": 4, "microbatches": 8}


class PhaseRuns:
    """The runs by name, each written and ingested the first time a test asks for it (``ids[name]`` or
    ``truth[name]``), so a module that opens two of them does not pay for nine."""

    def __init__(self, data_dir: Path, work: Path):
        from ascendscope.server.runs import RunStore

        self.store, self.work = RunStore(data_dir), work
        self.ids: dict[str, str] = _OnDemand(self._add)
        self.truth: dict[str, dict] = _OnDemand(lambda name: self._add(name, truth=True))
        self._truth: dict[str, dict] = {}

    def _add(self, name: str, truth: bool = False):
        if name not in self._truth:
            writer, kwargs, form, sharded = PLANS[name]
            src = self.work / name
            self._truth[name] = writer(src, form=form, **kwargs)
            # sharded: ranks packed up to half the input a shard, so answers still gather across shard files (2-3
            # of them) without a task and a file per rank (the 24 ranks of rl_discrete took 20 s that way, 7 s so)
            half = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) // 2
            dict.__setitem__(self.ids, name, add_ready(self.store, name, src, sharded=sharded, group_bytes=half))
        return self._truth[name] if truth else dict.__getitem__(self.ids, name)


class _OnDemand(dict):
    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, name: str):
        return self._make(name)


PLANS = {  # name: (writer, kwargs, form, sharded)
    "pp_text": (write_pp_run, PP, "text", False),
    "pp_db": (write_pp_run, PP, "db", True),
    "pp_slow": (write_pp_run, PP_SLOW, "text", True),
    "rl_text": (write_rl_job, RL, "text", True),
    "rl_db": (write_rl_job, RL, "db", False),
    "rl_discrete": (write_rl_discrete, RL_DISCRETE, "text", True),
    "rl_discrete_db": (write_rl_discrete, RL_DISCRETE, "db", False),
    "dualpipev_text": (write_dualpipev_run, DUALPIPEV, "text", True),
    "dualpipev_db": (write_dualpipev_run, DUALPIPEV, "db", False),
}


def add_phase_runs(data_dir: Path, work: Path) -> PhaseRuns:
    return PhaseRuns(data_dir, work)
