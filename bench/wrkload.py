"""Load from ``wrk`` (a C client: the load itself costs little CPU) with the Lua walks of ``bench/wrk/``.

:func:`walk_config` turns a run's track list into the config of ``walk.lua``; :func:`run_wrk` runs wrk with one
thread per connection (so each connection walks its own path) and returns the JSON line the script prints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

WRK_DIR = Path(__file__).resolve().parent / "wrk"
COLUMNS_ACCEPT = "application/vnd.ascendscope.columns"


def wrk_path() -> str:
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not installed (apt-get install wrk; scripts/test.sh installs it)")
    return found


def walk_config(meta: dict, run_id: str, *, visible: int, per_request: int = 4, width_px: int = 1600,
                mix: tuple[float, float, float] = (1.0, 0.0, 0.0), seed: int = 0, binary: bool = False,
                counters: int = 16) -> dict:
    """The config of walk.lua for a run whose ``/timeline/tracks`` answer is ``meta``: the page's visible slice
    tracks, ``counters`` counter tracks, the request mix (slices, counters, flows) and a view every
    visible/per_request slice requests (one screen's worth)."""
    origin = int(meta["origin_ns"])
    slice_tracks = [t["track_id"] for t in meta["tracks"] if t["kind"] != "counter" and t["slice_count"]]
    counter_tracks = [t["track_id"] for t in meta["tracks"] if t["kind"] == "counter"][:counters]
    per_view = max(1, round(min(visible, len(slice_tracks)) / per_request / max(mix[0], 0.05)))
    # flows of one ticked category, the largest (as a user who ticks async_npu on the page)
    cats = sorted(meta.get("flow_categories") or [], key=lambda c: -c["count"])[:1]
    return {"run": run_id, "origin_hi": origin // 10**9, "origin_lo": origin % 10**9,
            "span": int(meta["end_ns"]) - origin, "slice_tracks": slice_tracks, "counter_tracks": counter_tracks,
            "visible": min(visible, len(slice_tracks)), "per_request": per_request, "width_px": width_px,
            "slices_per_px": meta.get("slices_per_px", 2), "per_view": per_view,
            "mix": {"slices": mix[0], "counters": mix[1], "flows": mix[2]}, "seed": seed,
            "flow_query": "".join(f"&cat={c['cat']}" for c in cats),
            "headers": {"Accept": COLUMNS_ACCEPT if binary else "application/json"}}


def lua_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid Lua string literal for our ASCII ids
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{json.dumps(k)}] = {lua_value(v)}" for k, v in value.items()) + "}"
    return "{" + ", ".join(lua_value(v) for v in value) + "}"


def run_wrk(base_url: str, script: str, clients: int, seconds: float, config: dict | None = None,
            timeout_s: float = 10.0, path: str = "") -> dict:
    """wrk with ``clients`` connections on ``clients`` threads for ``seconds`` on ``base_url + path``; the
    script's JSON summary with ``req_per_s`` added. ``config`` (for walk.lua) is written to a temporary Lua
    file."""
    env = dict(os.environ, ASCENDSCOPE_WRK_DIR=str(WRK_DIR))
    with tempfile.TemporaryDirectory(prefix="ascendscope-wrk-") as tmp:
        if config is not None:
            config_file = Path(tmp) / "config.lua"
            config_file.write_text("return " + lua_value(config) + "\n")
            env["ASCENDSCOPE_WRK_CONFIG"] = str(config_file)
        cmd = [wrk_path(), "-t", str(clients), "-c", str(clients), "-d", f"{seconds:g}s",
               "--timeout", f"{timeout_s:g}s", "-s", str(WRK_DIR / script), base_url + path]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 120)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"wrk printed no summary: {done.stdout.strip()[-500:]}")
    out = json.loads(lines[-1])
    if out.get("request_ms") is None:  # summary.lua could not pair answers with requests (see there)
        raise RuntimeError(f"wrk's threads had several connections ({out.get('overlapped')} overlaps): "
                           "each request's latency is unknown")
    out["req_per_s"] = round(out["requests"] / max(out["duration_us"] / 1e6, 1e-9), 1)
    return out
