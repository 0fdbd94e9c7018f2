"""Run one command as a child and measure it: wall time, peak RSS of its largest process, peak RSS of its whole
process tree.

``run_measured(cmd, timeout_s=...)`` starts ``cmd`` in a new session (so a timeout ends the whole tree it
started, and nothing else), samples the summed RSS of the command and all its descendants every ``interval_s``,
and takes the kernel's ``ru_maxrss`` of the command (which covers it and every descendant it waited for, exact
however short the peak). The tree sum is sampled, so a peak shorter than the interval can be missed; it is the
figure for tools that fan out into many processes at once.

Linux keeps, in a process's ``ru_maxrss``, the peak of the memory it had *before* its exec: a child forked (or
vforked) from a big process starts with the parent's peak, so the pytest process or a bench that holds data
would show up as the command's. The command is therefore started by a small launcher (``LAUNCHER``: Python
without ``site``, a few MB), which spawns it, waits for it and reports its rusage; only the launcher carries
our peak.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

# argv: the file to write "<ru_maxrss KiB> <exit code>" to, then the command (looked up on PATH)
LAUNCHER = """
import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)  # (an interrupted wait is retried by Python itself, PEP 475)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
sys.exit(0)
"""


def _tree_rss(launcher: psutil.Process, cpu: dict[int, float]) -> tuple[int, int]:
    """(sum, largest) RSS over the launcher's descendants (the command and what it started) now; ``cpu`` gets
    each one's CPU seconds so far."""
    total = largest = 0
    try:
        procs = launcher.children(recursive=True)
    except psutil.Error:
        return 0, 0
    for p in procs:
        try:
            with p.oneshot():
                rss = p.memory_info().rss
                t = p.cpu_times()
        except psutil.Error:  # exited between listing and reading
            continue
        total += rss
        largest = max(largest, rss)
        cpu[p.pid] = t.user + t.system  # a process's own time (children_* would count reaped ones twice)
    return total, largest


def run_measured(cmd: list[str], *, timeout_s: float, env: dict | None = None, cwd: str | None = None,
                 interval_s: float = 0.05) -> dict:
    """``{"rc", "wall_s", "cpu_s", "peak_rss_mb", "tree_rss_mb", "timed_out", "stdout", "stderr"}`` (output
    tails)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rusage") as report:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, report.name, *cmd], stdout=out, stderr=err,
                                env=env, cwd=cwd, start_new_session=True)
        launcher = psutil.Process(proc.pid)
        peak_tree, peak_one = [0], [0]
        cpu: dict[int, float] = {}
        done = threading.Event()
        timed_out = [False]

        def sample() -> None:
            while not done.wait(interval_s):
                total, largest = _tree_rss(launcher, cpu)
                peak_tree[0], peak_one[0] = max(peak_tree[0], total), max(peak_one[0], largest)
                if time.perf_counter() - t0 > timeout_s and not timed_out[0]:
                    timed_out[0] = True
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)  # the session this command started, nothing else
                    except ProcessLookupError:
                        pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        if not timed_out[0]:  # a daemon the command left behind in its session is ended too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:  # the command's own figures, as the launcher saw them
            maxrss_kib, rc = (int(v) for v in report.read().split())
        except ValueError:  # the launcher was killed (a timeout) or could not start the command
            maxrss_kib, rc = 0, proc.returncode
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    return {
        "rc": rc, "wall_s": wall, "timed_out": timed_out[0],
        # Linux reports KiB. A pool's workers forked by a forkserver are not the command's to reap, so the kernel's
        # figure can miss them: the sampled largest process covers those.
        "peak_rss_mb": max(maxrss_kib * 1024, peak_one[0]) / 2**20,
        "tree_rss_mb": max(peak_tree[0], maxrss_kib * 1024) / 2**20,
        # CPU seconds of the whole tree: the kernel's count for the child and what it reaped, or the sampled sum
        # per process (which also sees a forkserver's workers, less their last interval), whichever is larger
        "cpu_s": max(usage.ru_utime + usage.ru_stime, sum(cpu.values())),
        "stdout": stdout[-20_000:], "stderr": stderr[-4_000:],
    }
