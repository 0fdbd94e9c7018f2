"""Server settings: one declarative table drives the defaults, the environment variables and ``--help``.

Each :class:`Setting` names its environment variable (``ASCENDSCOPE_<NAME>``); the CLI overrides what it is given.
Limits carry their unit in the name (``_ROWS``, ``_S``) so a handler never guesses what a number means.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    name: str
    default: object
    help: str

    @property
    def env(self) -> str:
        return "ASCENDSCOPE_" + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", "~/.ascendscope", "where runs are stored: <data_dir>/runs/<id>/{run.json,run.duckdb}"),
    Setting("host", "127.0.0.1", "interface to listen on"),
    Setting("port", 8000, "TCP port to listen on"),
    Setting("query_timeout_s", 10.0, "a database query running longer than this is interrupted"),
    Setting("max_slices_per_track", 50_000, "row cap for one track in one slices response"),
    Setting("max_tracks_per_request", 400, "track_id values accepted in one slices request"),
    Setting("max_flows", 5_000, "row cap for a flows response"),
    Setting("max_counter_points", 20_000, "row cap for one counter series in one response"),
    Setting("max_search_hits", 500, "largest page a search returns"),
    Setting("max_range_stat_names", 1_000, "distinct names a range_stats response lists"),
    Setting("max_children", 200, "children listed in a slice detail"),
    Setting("max_open_databases", 16, "run databases kept open at once (least recently used are closed)"),
)


_DEFAULT = {s.name: s.default for s in SETTINGS}


@dataclass
class Settings:
    """The values in effect; field defaults come from :data:`SETTINGS` (the one table)."""

    data_dir: Path = field(default_factory=lambda: Path(str(_DEFAULT["data_dir"])).expanduser())
    host: str = _DEFAULT["host"]
    port: int = _DEFAULT["port"]
    query_timeout_s: float = _DEFAULT["query_timeout_s"]
    max_slices_per_track: int = _DEFAULT["max_slices_per_track"]
    max_tracks_per_request: int = _DEFAULT["max_tracks_per_request"]
    max_flows: int = _DEFAULT["max_flows"]
    max_counter_points: int = _DEFAULT["max_counter_points"]
    max_search_hits: int = _DEFAULT["max_search_hits"]
    max_range_stat_names: int = _DEFAULT["max_range_stat_names"]
    max_children: int = _DEFAULT["max_children"]
    max_open_databases: int = _DEFAULT["max_open_databases"]

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> "Settings":
        """Defaults, then ``ASCENDSCOPE_*`` variables, then the non-None ``overrides`` (e.g. CLI flags)."""
        environ = os.environ if environ is None else environ
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for s in SETTINGS:
            raw = overrides.get(s.name)
            if raw is None:
                raw = environ.get(s.env, s.default)
            values[s.name] = _coerce(types[s.name], raw)
        return cls(**values)


def _coerce(type_name: str, raw: object) -> object:
    if type_name == "Path":
        return Path(str(raw)).expanduser()
    if type_name == "int":
        return int(raw)
    if type_name == "float":
        return float(raw)
    return str(raw)


def settings_help() -> str:
    """The settings table as text, for ``ascendscope serve --help``."""
    return "\n".join(f"  {s.env:<38} {s.help} (default: {s.default})" for s in SETTINGS)
