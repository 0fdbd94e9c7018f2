"""``ascendscope ingest --memory-limit``: what each layout gets when it is given and when it is not."""

from __future__ import annotations

import inspect

import pytest

from ascendscope.ingest import cli, pipeline, shards

SHARDED, SINGLE = shards.ingest_sharded, pipeline.ingest_path  # (the real ones: the fixture replaces them)


class Seen(Exception):
    pass


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def record(kind):
        def fake(*args, **kwargs):
            seen.append((kind, kwargs.get("memory_limit")))
            raise Seen

        return fake

    monkeypatch.setattr(shards, "ingest_sharded", record("sharded"))
    monkeypatch.setattr(cli, "ingest_path", record("single"))
    return seen


def _default(fn) -> str:
    return inspect.signature(fn).parameters["memory_limit"].default


@pytest.mark.parametrize("out, kind", [("run", "sharded"), ("run.duckdb", "single")])
def test_without_the_option_each_layout_keeps_its_own_default(tmp_path, calls, out, kind):
    with pytest.raises(Seen):
        cli.main([str(tmp_path), "--out", str(tmp_path / out), "--quiet"])
    assert calls == [(kind, None)]  # not passed: the function's own default applies
    # a run folder gets what the server's worker gets; a single file, the pipeline's
    assert _default(SHARDED) == shards.SHARD_MEMORY_LIMIT == "800MB"
    assert _default(SINGLE) == "1GB"


@pytest.mark.parametrize("out, kind", [("run", "sharded"), ("run.duckdb", "single")])
def test_the_option_reaches_either_layout(tmp_path, calls, out, kind):
    with pytest.raises(Seen):
        cli.main([str(tmp_path), "--out", str(tmp_path / out), "--quiet", "--memory-limit", "2GB"])
    assert calls == [(kind, "2GB")]
