"""Server settings: one declarative table drives the defaults, the environment variables and ``--help``.

Each :class:`Setting` names its environment variable (``ASCENDSCOPE_<NAME>``); the CLI overrides what it is given.
Limits carry their unit in the name (``_S``, ``_MB`` = 10**6 bytes) so a handler never guesses what a number means.
Booleans read ``1/true/yes/on`` and ``0/false/no/off`` from the environment.
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
    Setting("query_slots", 0, "database queries run at once (0: one per core); the others wait their turn"),
    Setting("query_cache_mb", 64, "MB of recent timeline answers kept to answer other requests (0: none)"),
    Setting("max_slices_per_track", 50_000, "row cap for one track in one slices response"),
    Setting("max_tracks_per_request", 400, "track_id values accepted in one slices request"),
    Setting("max_flows", 5_000, "row cap for a flows response"),
    Setting("max_counter_points", 20_000, "row cap for one counter series in one response"),
    Setting("max_search_hits", 500, "largest page a search returns"),
    Setting("max_range_stat_names", 1_000, "distinct names a range_stats response lists"),
    Setting("max_children", 200, "children listed in a slice detail"),
    Setting("max_open_databases", 16, "run databases kept open at once (least recently used are closed)"),
    Setting("no_browser", False, "do not open a browser tab when serving"),
    Setting("read_only", False, "serve the runs as they are: upload, rename and delete answer 403"),
    Setting("token", None, "require this token on every request (Authorization: Bearer, or ?token= once per browser)"),
    Setting("allowed_hosts", None, "host names the dashboard answers to besides localhost and its own address "
                                   "(comma-separated; * for any); checked only without a token"),
    Setting("ingest_workers", 1, "runs ingested at the same time, one worker process each"),
    Setting("ingest_retries", 1, "times a run whose worker died (killed, crashed) is ingested again before it fails"),
    Setting("max_upload_mb", 4000, "largest upload accepted, in MB"),
    Setting("max_archive_members", 100_000, "files an uploaded archive may hold"),
    Setting("max_extracted_mb", 32_768, "MB an uploaded archive may expand to"),
    Setting("max_compression_ratio", 200.0, "an archive may expand to at most this many times its size (zip bombs)"),
)


_DEFAULT = {s.name: s.default for s in SETTINGS}


@dataclass
class Settings:
    """The values in effect; field defaults come from :data:`SETTINGS` (the one table)."""

    data_dir: Path = field(default_factory=lambda: Path(str(_DEFAULT["data_dir"])).expanduser())
    host: str = _DEFAULT["host"]
    port: int = _DEFAULT["port"]
    query_timeout_s: float = _DEFAULT["query_timeout_s"]
    query_slots: int = _DEFAULT["query_slots"]
    query_cache_mb: int = _DEFAULT["query_cache_mb"]
    max_slices_per_track: int = _DEFAULT["max_slices_per_track"]
    max_tracks_per_request: int = _DEFAULT["max_tracks_per_request"]
    max_flows: int = _DEFAULT["max_flows"]
    max_counter_points: int = _DEFAULT["max_counter_points"]
    max_search_hits: int = _DEFAULT["max_search_hits"]
    max_range_stat_names: int = _DEFAULT["max_range_stat_names"]
    max_children: int = _DEFAULT["max_children"]
    max_open_databases: int = _DEFAULT["max_open_databases"]
    no_browser: bool = _DEFAULT["no_browser"]
    read_only: bool = _DEFAULT["read_only"]
    token: str | None = _DEFAULT["token"]
    allowed_hosts: str | None = _DEFAULT["allowed_hosts"]
    ingest_workers: int = _DEFAULT["ingest_workers"]
    ingest_retries: int = _DEFAULT["ingest_retries"]
    max_upload_mb: int = _DEFAULT["max_upload_mb"]
    max_archive_members: int = _DEFAULT["max_archive_members"]
    max_extracted_mb: int = _DEFAULT["max_extracted_mb"]
    max_compression_ratio: float = _DEFAULT["max_compression_ratio"]

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> Settings:
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


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _coerce(type_name: str, raw: object) -> object:
    if type_name == "Path":
        return Path(str(raw)).expanduser()
    if type_name == "int":
        return int(raw)
    if type_name == "float":
        return float(raw)
    if type_name == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"not a boolean: {raw!r} (use 1/0, true/false, yes/no, on/off)")
    if type_name == "str | None":
        return None if raw is None or str(raw) == "" else str(raw)
    return str(raw)


def settings_help() -> str:
    """The settings table as text, for ``ascendscope serve --help``."""
    return "\n".join(f"  {s.env:<38} {s.help} (default: {'not set' if s.default is None else s.default})"
                     for s in SETTINGS)
