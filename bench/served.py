"""A dashboard server in child processes for the load benchmarks: this version, or an older checkout ("before")
served by the same interpreter through a path shim, with the CPU seconds and RSS of its whole process tree.

An older checkout (``git worktree add /tmp/before <commit>``) is imported instead of the installed package by
putting a folder first on ``PYTHONPATH`` whose ``ascendscope/`` links to the checkout's top-level folders, which is
how the project installs them (``pyproject.toml`` ``package-dir``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

PACKAGES = ("server", "ingest", "frontend", "sample_data", "bench")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shim_for(checkout: Path) -> Path:
    """A folder whose ``ascendscope/`` is the checkout's package (``pyapi/``'s files, when it has one) with
    ``<pkg>`` linked to ``checkout/<pkg>``, and a ``sitecustomize`` that takes this environment's editable-install
    finder off ``sys.meta_path`` (it would answer, from the working tree, any module the checkout lacks). Made once
    per checkout."""
    digest = hashlib.sha1(str(checkout.resolve()).encode()).hexdigest()[:12]
    shim = Path(tempfile.gettempdir()) / f"ascendscope-shim2-{digest}"
    (shim / "ascendscope").mkdir(parents=True, exist_ok=True)
    top = checkout.resolve() / "pyapi"
    links = [(shim / "ascendscope" / name, checkout.resolve() / name) for name in PACKAGES]
    if top.is_dir():
        links += [(shim / "ascendscope" / entry.name, entry) for entry in top.iterdir() if entry.name != "__pycache__"]
    for link, target in links:
        if not link.exists() and target.exists():
            link.symlink_to(target, target_is_directory=target.is_dir())
    (shim / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n")
    return shim


class Server:
    """``ascendscope serve`` (read-only, unless told otherwise) over ``data_dir`` on a free port; ``checkout``: serve
    that checkout's code instead of this one; ``workers``: None leaves the server's default."""

    def __init__(self, data_dir: Path, *, checkout: Path | None = None, workers: int | None = None,
                 extra_env: dict | None = None, read_only: bool = True):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENDSCOPE_")}
        env.update(extra_env or {})
        if checkout is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(shim_for(checkout)), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        cmd = [sys.executable, "-m", "ascendscope.server.cli", "serve", "--data-dir", str(data_dir), "--host",
               "127.0.0.1", "--port", str(self.port), "--no-browser", "--log-level", "warning"]
        if read_only:
            cmd.append("--read-only")
        if workers is not None:
            cmd += ["--workers", str(workers)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.root = psutil.Process(self.proc.pid)

    def get_json(self, path: str, timeout_s: float = 60) -> dict:
        with urllib.request.urlopen(self.base + path, timeout=timeout_s) as resp:
            return json.loads(resp.read())

    def wait_ready(self, path: str, timeout_s: float = 180) -> dict:
        """``path``'s answer once the server gives it (each worker process then has started)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: {self.proc.stderr.read().strip()[-2000:]}")
            try:
                return self.get_json(path)
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start in time") from None
                time.sleep(0.2)

    def wait_query_processes(self, timeout_s: float = 120, answers: int = 8) -> None:
        """Until ``answers`` health answers in a row say every query process of their server process is ready
        (so that none starts during a measurement); at once for a version without them."""
        deadline = time.monotonic() + timeout_s
        in_a_row = 0
        while in_a_row < answers:
            qp = self.get_json("/api/health").get("query_processes")
            if qp is None:
                return
            in_a_row = in_a_row + 1 if qp["ready"] >= qp["wanted"] else 0
            if time.monotonic() > deadline:
                raise SystemExit(f"the query processes did not start in time: {qp}")
            time.sleep(0.05)

    def processes(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_s(self) -> float:
        """CPU seconds (user + system) of every process of the server right now."""
        total = 0.0
        for p in self.processes():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def rss_mb(self) -> dict[int, float]:
        """pid → RSS in MB of each process of the server."""
        out = {}
        for p in self.processes():
            try:
                out[p.pid] = round(p.memory_info().rss / 1e6, 1)
            except psutil.NoSuchProcess:
                pass
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 2)  # SIGINT to the group: what Ctrl+C does
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
