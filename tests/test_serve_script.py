"""``scripts/serve.sh`` says how many processes ``serve`` starts with its defaults, and says it right (it once said
one server process per core and started one)."""

from __future__ import annotations

from pathlib import Path

from ascendscope.server.settings import SETTINGS, Settings, query_process_count, worker_count

ROOT = Path(__file__).resolve().parents[1]
WORDS = {0: "no", 1: "one"}


def test_serve_sh_says_what_serve_starts():
    text = (ROOT / "scripts" / "serve.sh").read_text(encoding="utf-8")
    comment = " ".join(line.lstrip("#").strip() for line in text.splitlines()
                       if line.startswith("#") and not line.startswith("#!"))
    defaults = Settings.from_env(environ={})
    servers = worker_count(defaults)
    assert f"starts {WORDS.get(servers, servers)} server process" in comment, comment
    queries = {s.name: s.default for s in SETTINGS}["query_processes"]
    if queries < 0:  # one per core, whatever the machine
        assert query_process_count(defaults) >= 1 and "query processes (one per core)" in comment, comment
    else:
        assert f"{WORDS.get(queries, queries)} query process" in comment, comment
