"""Hostile and honest uploads against a live server: what refusing (or taking) an archive costs the web process.

    ascendscope bench archives --before /tmp/before          # the table of docs/benchmarks.md
    ascendscope bench archives --entries 100000 --repeat 1   # a quick look, this version only

Builds a zip whose central directory lists ``--entries`` headers that all point at one 1-byte member
(``sample_data.hostile.many_entries_zip``: 4,000,000 entries make 219 MB), and a zip of the bundled sample run.
Each is uploaded (``POST /api/runs``, streamed from the file) to a fresh ``ascendscope serve`` with the default
limits: this checkout ("after") and, with ``--before``, an older checkout served by the same interpreter
(``bench.served``), the versions alternating ``--repeat`` times. Per upload: the answer (status, error code),
the wall time until it came, the CPU seconds of the web process and of the server's whole process tree, and the
RSS of the web process before the upload and at its peak, sampled every 20 ms while the upload runs, beside the
peak of the process that extracts the archive (this version: ``ingest.unpackproc``; before, the web process did).
Prints one JSON object and a table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import psutil

SAMPLE_S = 0.02
UNPACKER = "ascendscope.ingest.unpackproc"
MB = 1e6


def bundled_zip(path: Path) -> Path:
    """The bundled sample run zipped (an honest upload of a few MB)."""
    from ascendscope.server.cli import bundled_sample_path

    src = bundled_sample_path()
    if src is None:
        raise SystemExit("no bundled sample in this installation")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(src.rglob("*")):
            if file.is_file():
                zf.write(file, f"bundled/{file.relative_to(src).as_posix()}")
    path.write_bytes(buf.getvalue())
    return path


class Peaks:
    """The web process's RSS and that of the process extracting an upload (``ingest.unpackproc``), at their
    peaks, sampled on a thread."""

    def __init__(self, web: psutil.Process):
        self.web, self.web_peak, self.other_peak = web, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.web_peak = max(self.web_peak, self.web.memory_info().rss)
                for child in self.web.children(recursive=True):
                    try:
                        if UNPACKER in " ".join(child.cmdline()):
                            self.other_peak = max(self.other_peak, child.memory_info().rss)
                    except psutil.NoSuchProcess:
                        pass
            except psutil.NoSuchProcess:
                return
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def upload(version: str, checkout: Path | None, case: str, archive: Path, timeout_s: float) -> dict:
    """One upload of ``archive`` to a fresh server of ``version``."""
    import httpx

    from ascendscope.bench.served import Server

    with tempfile.TemporaryDirectory(prefix="bench-archives-") as data, \
            Server(Path(data), checkout=checkout, read_only=False) as srv:
        srv.wait_ready("/api/health")
        srv.wait_query_processes()
        web = srv.root
        rss_before = web.memory_info().rss
        web_cpu, tree_cpu, load = cpu_s(web), srv.cpu_s(), os.getloadavg()[0]
        with Peaks(web) as peaks, open(archive, "rb") as fh:
            t0 = time.perf_counter()
            try:
                resp = httpx.post(f"{srv.base}/api/runs", files={"file": (archive.name, fh)}, timeout=timeout_s)
                status, body = resp.status_code, resp.json()
            except httpx.HTTPError as exc:
                status, body = None, {"error": {"code": type(exc).__name__, "message": str(exc)}}
            wall = time.perf_counter() - t0
        error = body.get("error") or {}
        return {"version": version, "case": case, "archive_mb": round(archive.stat().st_size / MB, 1),
                "status": status, "code": error.get("code"), "message": (error.get("message") or "")[:160],
                "wall_s": round(wall, 3), "web_cpu_s": round(cpu_s(web) - web_cpu, 3),
                "server_cpu_s": round(srv.cpu_s() - tree_cpu, 3), "web_rss_before_mb": round(rss_before / MB),
                "web_rss_peak_mb": round(peaks.web_peak / MB), "unpack_rss_peak_mb": round(peaks.other_peak / MB),
                "load_avg": round(load, 2)}


def table(rows: list[dict]) -> str:
    head = (f"{'version':<7} {'case':<8} {'MB':>6} {'answer':<24} {'wall s':>8} {'web CPU s':>9} "
            f"{'web RSS MB':>14} {'unpack MB':>9} {'load':>5}")
    lines = [head]
    for r in rows:
        answer = f"{r['status']} {r['code'] or ''}".strip()
        lines.append(f"{r['version']:<7} {r['case']:<8} {r['archive_mb']:>6} {answer:<24} {r['wall_s']:>8} "
                     f"{r['web_cpu_s']:>9} {str(r['web_rss_before_mb']) + ' → ' + str(r['web_rss_peak_mb']):>14} "
                     f"{r['unpack_rss_peak_mb']:>9} {r['load_avg']:>5}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ascendscope bench archives", description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=4_000_000, help="central directory entries of the hostile zip")
    ap.add_argument("--before", type=Path, default=None, help="a checkout of the version to compare with")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds an upload may take")
    ap.add_argument("--out", type=Path, default=None, help="folder for the archives (default: a temp folder)")
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args(argv)
    from ascendscope.sample_data.hostile import many_entries_zip

    with tempfile.TemporaryDirectory(prefix="bench-archives-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        cases = {"hostile": many_entries_zip(out / f"entries-{args.entries}.zip", args.entries),
                 "honest": bundled_zip(out / "bundled.zip")}
        built_s = round(time.perf_counter() - t0, 1)
        versions = [("after", None)] + ([("before", args.before)] if args.before else [])
        rows = []
        for rep in range(args.repeat):
            for version, checkout in (versions if rep % 2 == 0 else versions[::-1]):
                for case, archive in cases.items():
                    rows.append(upload(version, checkout, case, archive, args.timeout))
                    print(table(rows[-1:]).splitlines()[1], flush=True)
    result = {"entries": args.entries, "build_s": built_s, "cores": os.cpu_count(), "uploads": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
