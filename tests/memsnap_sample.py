"""Generated memory snapshots with known answers (``sample_data.memsnap``), ingested as the server ingests a run
(sharded, into a run store), and the real ones of ``tests/corpus`` (``REAL``)."""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
# (name, flavour, options): every shape the views meet
CASES = {
    "cuda": ("cuda", {"devices": 2, "max_entries": 1400, "seed": 1}),
    "npu": ("npu", {"devices": 1, "max_entries": 1300, "seed": 2}),
    "npu_notime": ("npu", {"devices": 1, "time_us": False, "seed": 3, "max_entries": 1200}),
    "cuda_expandable": ("cuda", {"devices": 1, "expandable": True, "seed": 4, "max_entries": 1500}),
    "npu_expandable": ("npu", {"devices": 2, "expandable": True, "seed": 5}),
}


def snapshot(name: str, **overrides):
    from ascendscope.sample_data import memsnap

    flavour, options = CASES[name]
    return memsnap.simulate(flavour, **{**options, **overrides})


def write_case(name: str, folder: Path, **overrides):
    """The case's snapshot pickled into ``folder`` (``snapshot_<name>.pickle``); returns (path, truth)."""
    from ascendscope.sample_data import memsnap

    snap = snapshot(name, **overrides)
    path = memsnap.write(Path(folder) / f"snapshot_{name}.pickle", snap)
    return path, snap.truth


def ingest_like_server(store, name: str, source: Path) -> str:
    """A run of ``source`` in ``store``, ingested as the server's worker does (sharded into its folder)."""
    from ascendscope.ingest.shards import ingest_sharded

    run = store.create_run(name, str(source))
    ingest_sharded(source, store.run_dir(run.id), workers=1)
    store.set_status(run.id, "ready")
    return run.id


def memsnap_store(data_dir: Path, work: Path, names=tuple(CASES)) -> tuple[dict[str, str], dict]:
    """A store at ``data_dir`` with a ready run per case: ``({name: run_id}, {name: truth})``."""
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    ids, truths = {}, {}
    for name in names:
        path, truth = write_case(name, work / name)
        ids[name] = ingest_like_server(store, name, path)
        truths[name] = truth
    return ids, truths
