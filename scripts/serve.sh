#!/usr/bin/env bash
# Install ascendscope into ./.venv (once) and serve it. Extra arguments go to `ascendscope serve`,
# e.g. `bash scripts/serve.sh /path/to/profiling_dir --port 8080`. With none, the bundled sample run is shown.
# With the defaults it starts one server process, whose query processes (one per core) answer the timeline's
# requests; --workers N and --query-processes N change them (docs/sharing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/ascendscope ] || [ pyproject.toml -nt .venv/.installed ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e .
    touch .venv/.installed
fi
exec .venv/bin/ascendscope serve "$@"
