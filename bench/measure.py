"""Run one command as a child and measure it: wall time, peak RSS of its largest process, peak RSS of its whole
process tree.

``run_measured(cmd, timeout_s=...)`` starts ``cmd`` in a new session (so a timeout ends the whole tree it
started, and nothing else), samples the summed RSS of the child and all its descendants every ``interval_s``,
and reaps it with ``os.wait4``: the kernel's ``ru_maxrss`` of that one child, which covers the child and every
descendant it waited for, exact however short the peak. The tree sum is sampled, so a peak shorter than the
interval can be missed; it is the figure for tools that fan out into many processes at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time

import psutil


def _tree_rss(root: psutil.Process, cpu: dict[int, float]) -> tuple[int, int]:
    """(sum, largest) RSS over the process and its descendants now; ``cpu`` gets each one's CPU seconds so far."""
    total = largest = 0
    try:
        procs = [root, *root.children(recursive=True)]
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
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
        root = psutil.Process(proc.pid)
        peak_tree, peak_one = [0], [0]
        cpu: dict[int, float] = {}
        done = threading.Event()
        timed_out = [False]

        def sample() -> None:
            while not done.wait(interval_s):
                total, largest = _tree_rss(root, cpu)
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
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    return {
        "rc": proc.returncode, "wall_s": wall, "timed_out": timed_out[0],
        # Linux reports KiB. A pool's workers forked by a forkserver are not the command's to reap, so the kernel's
        # figure can miss them: the sampled largest process covers those.
        "peak_rss_mb": max(usage.ru_maxrss * 1024, peak_one[0]) / 2**20,
        "tree_rss_mb": max(peak_tree[0], usage.ru_maxrss * 1024) / 2**20,
        # CPU seconds of the whole tree: the kernel's count for the child and what it reaped, or the sampled sum
        # per process (which also sees a forkserver's workers, less their last interval), whichever is larger
        "cpu_s": max(usage.ru_utime + usage.ru_stime, sum(cpu.values())),
        "stdout": stdout[-20_000:], "stderr": stderr[-4_000:],
    }
