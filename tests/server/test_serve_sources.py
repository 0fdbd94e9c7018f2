"""``ascendscope serve PATH`` on a folder with no profiling data says so and makes no run (it used to print the
run's URL as if it had worked), and opening a source whose run failed again retries that run instead of adding
another."""

from __future__ import annotations

from tests.conftest import PYTORCH_TEXT
from tests.server.test_cli_serve import start_serve, stop


def test_serving_an_empty_folder_fails_with_the_reason_and_no_run(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("nothing to see")
    proc, _ = start_serve(tmp_path / "data", empty)
    proc.wait(120)
    out = stop(proc)
    assert proc.returncode == 2, out
    assert f"error: no profiling data in {empty}" in out and "ascendscope is serving" not in out
    runs = tmp_path / "data" / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if not p.name.startswith(".")]


def test_opening_a_failed_source_again_reuses_its_run(tmp_path):
    from ascendscope.server.runs import RunStore

    store = RunStore(tmp_path)
    first = store.create_run_from_path(PYTORCH_TEXT / "level0")
    store.set_status(first.id, "failed", error="boom")
    again = store.create_run_from_path(PYTORCH_TEXT / "level0")
    assert again.id == first.id and len(store.list()) == 1
    retried = store.reset_for_retry(again.id)
    assert retried.status == "queued" and retried.error is None
