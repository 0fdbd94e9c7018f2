"""A throwaway PKI made at test time with the ``openssl`` command line: a CA, a server certificate for 127.0.0.1
and localhost, a client certificate signed by that CA, and a client certificate of another CA (one the server does
not trust). EC P-256 keys, valid for two days."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not installed")
KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
DAYS = "2"


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate of another CA
    stranger_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _ca(folder: Path, name: str) -> None:
    _openssl("req", "-x509", *KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", DAYS,
             "-subj", f"/CN=ascendscope test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)


def _leaf(folder: Path, name: str, ca: str, extensions: str) -> None:
    _openssl("req", *KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=ascendscope {name}",
             cwd=folder)
    (folder / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", DAYS, "-extfile", f"{name}.ext", cwd=folder)


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    _leaf(folder, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _leaf(folder, "client", "ca", "extendedKeyUsage=clientAuth\n")
    _leaf(folder, "stranger", "other-ca", "extendedKeyUsage=clientAuth\n")
    return Pki(*(folder / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key",
                                      "stranger.pem", "stranger.key")))
