"""Serving runs (``sample_data.serving``) ingested into a run store: the truth of each and its run id."""

from __future__ import annotations

import math
from pathlib import Path

from ascendscope.sample_data.serving import burst, simulate, write_serving
from ascendscope.sample_data.serving_more import write_more

FLAVOURS = ("ms", "us", "db")


def nearest_rank(values: list[int], q: float) -> int:
    """The ⌈q·n⌉-th smallest value (the percentile the serving view reports)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def calm() -> dict:
    """Requests far apart: nobody queues, the KV cache stays mostly free, decode batches hold one request."""
    return simulate([i * 1000 for i in range(6)], [128] * 6, [5] * 6)


def ingest_serving(src: Path, out: Path) -> Path:
    from ascendscope.ingest.pipeline import ingest_path

    ingest_path(src, out)
    return out


def serving_store(data_dir: Path, work: Path, names: tuple[str, ...] | None = None
                  ) -> tuple[dict[str, str], dict[str, dict]]:
    """A store at ``data_dir`` with the ready runs ``burst`` (ms CSVs + profiler.db), ``burst_us``, ``burst_db``,
    ``calm``, ``tiny_kv`` (a cache of 40 blocks: it runs out) ``csv_only`` (the CSVs alone: no rank) and
    ``preempted`` (req-2 preempted once), ``pd`` (``burst`` with every other file of the output:
    forward passes, queue sizes, PD disaggregation, the coordinator; its truth's ``more`` holds what they say), or
    only those of ``names``; ``({name: run_id}, {name: truth})``."""
    from ascendscope.server.runs import RunStore

    store = RunStore(data_dir)
    truths = {"burst": burst(), "calm": calm(), "tiny_kv": burst(total_blocks=40), "preempted": burst(preempt_at_ms=60)}
    plan = {"burst": ("burst", "ms"), "burst_us": ("burst", "us"), "burst_db": ("burst", "db"),
            "calm": ("calm", "ms"), "tiny_kv": ("tiny_kv", "ms"), "csv_only": ("burst", "ms"),
            "preempted": ("preempted", "ms"), "pd": ("burst", "ms")}
    ids = {}
    for name, (truth, flavour) in plan.items():
        if names is not None and name not in names:
            continue
        src = work / name
        write_serving(src, truths[truth], flavour)
        if name == "pd":
            more = write_more(src, truths[truth])
        if name == "csv_only":  # no trace beside: a run of no ranks
            (src / "chrome_tracing.json").unlink()
        run = store.create_run(name, str(src))
        ingest_serving(src, store.db_path(run.id))
        store.set_status(run.id, "ready")
        ids[name] = run.id
    truths["burst_us"] = truths["burst_db"] = truths["csv_only"] = truths["burst"]
    if "pd" in ids:
        truths["pd"] = {**truths["burst"], "more": more}
    return ids, truths
