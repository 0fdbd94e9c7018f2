"""Each setting is declared once (its row of ``server.settings.SETTINGS``), and what users see of the settings —
``ascendscope serve --help``, the ``ASCENDSCOPE_*`` names, the defaults and how the environment is read — stays as
``settings_golden.txt`` recorded it (rewrite that file from :func:`visible_settings` only for a change meant to be
seen)."""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
from pathlib import Path

from ascendscope.ingest import layout
from ascendscope.server import indexfiles
from ascendscope.server import settings as settings_module
from ascendscope.server.cli import build_parser
from ascendscope.server.runs import RUN_FILE
from ascendscope.server.settings import SETTINGS, Settings

GOLDEN = Path(__file__).with_name("settings_golden.txt")
ENVIRON = {"ASCENDSCOPE_PORT": "9001", "ASCENDSCOPE_QUERY_TIMEOUT_S": "2.5", "ASCENDSCOPE_NO_BROWSER": "yes",
           "ASCENDSCOPE_READ_ONLY": "off", "ASCENDSCOPE_TOKEN": "", "ASCENDSCOPE_ALLOWED_HOSTS": "a.test,b.test",
           "ASCENDSCOPE_DATA_DIR": "~/runs", "ASCENDSCOPE_MAX_COMPRESSION_RATIO": "7"}


def visible_settings(monkeypatch) -> str:
    """--help at a fixed width, then each field's default and its value read from :data:`ENVIRON`, then the
    variable names."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("HOME", "/home/golden")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    defaults, from_env = Settings.from_env(environ={}), Settings.from_env(environ=ENVIRON)
    lines = [out.getvalue(), "--- field, default, from the environment ---"]
    lines += [f"{f.name} {getattr(defaults, f.name)!r} {getattr(from_env, f.name)!r}"
              for f in dataclasses.fields(Settings)]
    lines.append(" ".join(s.env for s in SETTINGS))
    return "\n".join(lines) + "\n"


def test_help_env_names_and_defaults_are_unchanged(monkeypatch):
    assert visible_settings(monkeypatch) == GOLDEN.read_text()


def test_the_fields_are_the_table():
    assert [f.name for f in dataclasses.fields(Settings)] == [s.name for s in SETTINGS]


def test_each_setting_is_named_once_in_its_module():
    """A setting's name appears once in settings.py (its table row), not again as a hand-written field."""
    tree = ast.parse(Path(settings_module.__file__).read_text())
    names = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    names += [n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    twice = sorted(s.name for s in SETTINGS if names.count(s.name) > 1)
    assert not twice, f"declared more than once: {twice}"



def test_the_data_dir_help_names_what_a_run_folder_holds():
    """A run folder as the store writes it: run.json and the sharded layout (server.runs, ingest.layout)."""
    (data_dir,) = [s for s in SETTINGS if s.name == "data_dir"]
    for name in (RUN_FILE, layout.MANIFEST, layout.CLUSTER_DB, f"{layout.SHARDS_DIR}/", f"{indexfiles.FOLDER}/"):
        assert name in data_dir.help, name
