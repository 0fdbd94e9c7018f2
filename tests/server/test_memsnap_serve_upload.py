"""The real torch_npu memory snapshots of tests/corpus the ways users open them: ``ascendscope serve PATH`` and a
zip uploaded to a running server. The state the Memory view shows at the dump equals each device's segments'
totals; a zipped pickle that would run code fails its run with the reason, and runs nothing."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import httpx
import pytest

from tests import corpus_figures as cf
from tests.conftest import ingesting_server
from tests.server.test_cli_serve import ONE_PROCESS, start_serve, stop, wait_for

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
PLAIN = CORPUS / "torch_npu_2026_memsnap_plain"
TWO = CORPUS / "torch_npu_2026_memsnap_two_devices"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def check_dump_state(base: str, run_id: str, folder: Path) -> None:
    totals = cf.snapshot_totals(cf.snapshot_dict(folder))
    for device, want in totals.items():
        state = httpx.get(f"{base}/api/runs/{run_id}/memory/snapshot/state", params={"device": device},
                          timeout=30).json()
        t = state["totals"]
        assert (t["reserved"], t["allocated"], t["active"]) == want, (device, t, want)
    page = httpx.get(f"{base}/runs/{run_id}/memory", timeout=30)
    assert page.status_code == 200 and 'id="mem-snapshot"' in page.text


def test_serve_a_snapshot_file(tmp_path):
    (src,) = PLAIN.glob("*.pkl")
    proc, base = start_serve(tmp_path, src, flags=ONE_PROCESS)
    try:
        runs = wait_for(lambda: [r for r in httpx.get(f"{base}/api/runs", timeout=5).json()["runs"]
                                 if r["status"] in ("ready", "failed")], timeout_s=600, proc=proc)
        (run,) = runs
        assert run["status"] == "ready", run
        check_dump_state(base, run["id"], PLAIN)
    finally:
        stop(proc)


class RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def zipped(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_upload_zipped_snapshots(tmp_path):
    marker = tmp_path / "ran"
    evil = pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "frames": [RunsCode(marker)]}]]})
    uploads = {"two": ("two.zip", zipped({f"job/{p.name}": p.read_bytes() for p in TWO.glob("*.pkl")})),
               "evil": ("evil.zip", zipped({"job/snapshot.pickle": evil}))}
    with ingesting_server(tmp_path / "data") as (base, _, _):
        ids = {}
        for name, (filename, data) in uploads.items():
            resp = httpx.post(f"{base}/api/runs", files={"file": (filename, data, "application/zip")}, timeout=60)
            assert resp.status_code == 202, resp.text
            ids[name] = resp.json()["id"]
        # the list, not /api/runs/{id}: that one opens a failing run's database and may answer 409 run_damaged
        done = {name: wait_for(lambda i=i: next((r for r in httpx.get(f"{base}/api/runs", timeout=5).json()["runs"]
                                                 if r["id"] == i and r["status"] in ("ready", "failed")), None),
                               timeout_s=600) for name, i in ids.items()}
        assert done["two"]["status"] == "ready", done["two"]
        check_dump_state(base, ids["two"], TWO)
        assert done["evil"]["status"] == "failed"
        assert "refused" in done["evil"]["error"] and "snapshot.pickle" in done["evil"]["error"], done["evil"]
    assert not marker.exists()
