"""Server settings: one declarative table drives the :class:`Settings` fields and their defaults, the environment
variables and ``--help``.

Each :class:`Setting` names its environment variable (``ASCENDSCOPE_<NAME>``); the CLI overrides what it is given.
Limits carry their unit in the name (``_S``, ``_MB`` = 10**6 bytes) so a handler never guesses what a number means.
Booleans read ``1/true/yes/on`` and ``0/false/no/off`` from the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    name: str
    type: object  # what the value is read as: Path, str, int, float, bool, or str | None
    default: object
    help: str

    @property
    def env(self) -> str:
        return "ASCENDSCOPE_" + self.name.upper()


OPTIONAL_STR = str | None

SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", Path, "~/.ascendscope",
            "where runs are stored: <data_dir>/runs/<id>/{run.json,manifest.json,cluster.duckdb,shards/,index/}"),
    Setting("host", str, "127.0.0.1", "interface to listen on"),
    Setting("port", int, 8000, "TCP port to listen on"),
    Setting("workers", int, 0, "server processes answering requests (0: one, or one per core without query "
                               "processes); they share the port, and one of them runs the ingest queue"),
    Setting("query_processes", int, -1, "processes per server process that answer the timeline's viewport "
                                        "requests, so that no request thread shares the server's GIL with its "
                                        "event loop (-1: one per core; 0: none, on threads of the server process)"),
    Setting("query_timeout_s", float, 10.0, "a request's database work must end this long after it arrived "
                                            "(queueing included), else it is interrupted and answers 504"),
    Setting("query_slots", int, 0, "database queries run at once per server process (0: one per core); the "
                                   "others wait their turn"),
    Setting("query_threads", int, 0, "DuckDB threads of one query (0: the cores divided among the server "
                                     "processes, at least 1)"),
    Setting("heavy_slots", int, 0, "heavy views (System View, Range Stats, search, Advice, Compare) run at once "
                                   "across all server processes (0: half the cores, at least 1); viewport "
                                   "requests never wait for them"),
    Setting("query_cache_mb", int, 64, "MB of recent timeline answers kept to answer other requests (0: none)"),
    Setting("track_cache_mb", int, 256, "MB of whole timeline tracks and flows kept in memory per server "
                                        "process, so a viewport on them is answered without a database query "
                                        "(0: none)"),
    Setting("index_files", bool, True, "write each track and table of flows, once read, to a file in the run's "
                                       "folder that every server process maps, so it is read from the database "
                                       "once per run rather than once per process (off: memory only)"),
    Setting("max_slices_per_track", int, 50_000, "row cap for one track in one slices response"),
    Setting("max_tracks_per_request", int, 400, "track_id values accepted in one slices request"),
    Setting("max_flows", int, 5_000, "row cap for a flows response"),
    Setting("max_counter_points", int, 20_000, "row cap for one counter series in one response"),
    Setting("max_search_hits", int, 500, "largest page a search returns"),
    Setting("max_range_stat_names", int, 1_000, "distinct names a range_stats response lists"),
    Setting("max_children", int, 200, "children listed in a slice detail"),
    Setting("max_open_databases", int, 16, "run databases kept open at once (least recently used are closed)"),
    Setting("max_loaded_ranks", int, 64, "a run of more ranks loads only those a request shows (ranks=17,18)"),
    Setting("no_browser", bool, False, "do not open a browser tab when serving"),
    Setting("read_only", bool, False, "serve the runs as they are: upload, rename and delete answer 403"),
    Setting("token", OPTIONAL_STR, None,
            "require this token on every request (Authorization: Bearer, or ?token= once per browser)"),
    Setting("allowed_hosts", OPTIONAL_STR, None, "host names the dashboard answers to besides localhost and its own "
                                                 "address (comma-separated; * for any); checked only without a token"),
    Setting("tls_cert", OPTIONAL_STR, None, "serve HTTPS only, with this PEM certificate (and its chain); its key "
                                            "in ASCENDSCOPE_TLS_KEY, or in the same file"),
    Setting("tls_key", OPTIONAL_STR, None, "the PEM private key of the TLS certificate"),
    Setting("tls_client_ca", OPTIONAL_STR, None, "with a TLS certificate: refuse every client without a certificate "
                                                 "signed by a CA of this PEM file (mutual TLS)"),
    Setting("ingest_workers", int, 1, "runs ingested at the same time, one worker process each"),
    Setting("ingest_retries", int, 1,
            "times a run whose worker died (killed, crashed) is ingested again before it fails"),
    Setting("max_upload_mb", int, 4000, "largest upload accepted, in MB"),
    Setting("max_archive_members", int, 100_000, "files an uploaded archive may hold"),
    Setting("max_extracted_mb", int, 32_768, "MB an uploaded archive may expand to"),
    Setting("max_compression_ratio", float, 200.0,
            "an archive may expand to at most this many times its size (zip bombs)"),
    Setting("kept_uploads_mb", int, 20_000,
            "MB of uploaded archives kept so that Retry can ingest their runs again (oldest removed first; 0: none)"),
)


def _field(setting: Setting) -> tuple[str, object, object]:
    if setting.type is Path:  # expanded when a Settings is made, not at import
        return setting.name, Path, field(default_factory=lambda: Path(str(setting.default)).expanduser())
    return setting.name, setting.type, field(default=setting.default)


def _from_env(cls, environ: dict[str, str] | None = None, **overrides) -> Settings:
    """Defaults, then ``ASCENDSCOPE_*`` variables, then the non-None ``overrides`` (e.g. CLI flags)."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for s in SETTINGS:
        raw = overrides.get(s.name)
        if raw is None:
            raw = environ.get(s.env, s.default)
        values[s.name] = _coerce(s.type, raw)
    return cls(**values)


# The values in effect: one field per row of SETTINGS (the one table), in its order, with its default.
Settings = make_dataclass("Settings", [_field(s) for s in SETTINGS],
                          namespace={"from_env": classmethod(_from_env), "__module__": __name__,
                                     "__doc__": "The values in effect; one field per row of SETTINGS."})


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _coerce(kind: object, raw: object) -> object:
    if kind is Path:
        return Path(str(raw)).expanduser()
    if kind is int:
        return int(raw)
    if kind is float:
        return float(raw)
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"not a boolean: {raw!r} (use 1/0, true/false, yes/no, on/off)")
    if kind == OPTIONAL_STR:
        return None if raw is None or str(raw) == "" else str(raw)
    return str(raw)


def settings_help() -> str:
    """The settings table as text, for ``ascendscope serve --help``."""
    return "\n".join(f"  {s.env:<38} {s.help} (default: {'not set' if s.default is None else s.default})"
                     for s in SETTINGS)


def cores() -> int:
    """The cores this process may run on (a container's cpuset, where the OS says it)."""
    found = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, found or 1)


def worker_count(settings) -> int:
    """Server processes: ``settings.workers``; 0 meaning one when query processes answer the viewport requests
    (they use the cores), else one per core."""
    if settings.workers > 0:
        return settings.workers
    return 1 if query_process_count(settings) > 0 else cores()


def query_process_count(settings) -> int:
    """Query processes per server process (``server.queryprocs``): ``settings.query_processes``, -1 meaning one
    per core."""
    return cores() if settings.query_processes < 0 else settings.query_processes
