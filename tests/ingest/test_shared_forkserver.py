"""One fork server for every ingest worker the server's worker host forks (``executors.share_fork_server`` in the
host, ``adopt_fork_server`` in each worker): a worker's pool starts from the host's fork server instead of a
fork server of its own (~0.4 s of wall a run), and from one of its own when the shared one has died. Run in a
fresh process (a fork in the test process would copy its threads)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing.forkserver
from ascendscope.ingest import executors

kill_first = sys.argv[1] == "kill"
assert executors.share_fork_server()
shared = multiprocessing.forkserver._forkserver._forkserver_pid
if kill_first:
    os.kill(shared, signal.SIGKILL)
    os.waitpid(shared, 0)  # (the host reaps its children)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    executors.adopt_fork_server()
    os.setpgid(0, 0)  # (as an ingest worker leads a group of its own)
    with ProcessPoolExecutor(max_workers=1, mp_context=executors._start_context(),
                             initializer=executors._exit_with_owner, initargs=(os.getpid(),)) as pool:
        parents = [pool.submit(os.getppid).result(timeout=60) for _ in range(2)]
        groups = [pool.submit(os.getpgrp).result(timeout=60) for _ in range(2)]
    own = multiprocessing.forkserver._forkserver._forkserver_pid
    os.write(w, json.dumps({"parents": parents, "own": own, "groups": groups, "group": os.getpgrp(),
                            "child": os.getpid()}).encode())
    os._exit(0)
os.close(w)
_, status = os.waitpid(pid, 0)
got = json.loads(os.read(r, 4096))
print(json.dumps({"shared": shared, "status": status, **got}))
"""


def _run(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_forked_worker_starts_its_pool_from_the_shared_fork_server():
    got = _run("share")
    assert got["status"] == 0 and got["parents"] == [got["shared"]] * 2 and got["own"] == got["shared"]
    # its pool's processes are in the worker's process group, not the fork server's: ending or killing that group
    # (server.worker.end_group) reaches them
    assert got["groups"] == [got["group"]] * 2 and got["group"] == got["child"]


def test_a_worker_whose_shared_fork_server_died_starts_its_own():
    got = _run("kill")
    assert got["status"] == 0 and got["own"] not in (None, got["shared"])
    assert got["parents"] == [got["own"]] * 2
