"""``python -m ascendscope.server.healthcheck``: exit 0 if the server of the ``ASCENDSCOPE_*`` settings answers on
this machine (the Docker image's HEALTHCHECK), over HTTP, HTTPS or mutual TLS alike (``server.tls.probe``)."""

from __future__ import annotations

import sys

from ascendscope.server import tls
from ascendscope.server.settings import Settings

TIMEOUT_S = 4.0
LOCAL = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def main() -> int:
    settings = Settings.from_env()
    return 0 if tls.probe(LOCAL.get(settings.host, settings.host), settings.port, settings, TIMEOUT_S) else 1


if __name__ == "__main__":
    sys.exit(main())
