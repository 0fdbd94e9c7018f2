#!/usr/bin/env bash
# Install everything the tests need (Debian's chromium for the browser tests, wrk for the load benchmark's smoke
# test, the project with its dev, ray and jupyter extras: the JupyterLab proxy is tested behind a real Jupyter
# server) and run every test. This is exactly what CI runs (.ci/run). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

if [ ! -x /usr/bin/chromium ] || ! command -v wrk >/dev/null; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium wrk >/dev/null
fi

if [ ! -x .venv/bin/pytest ] || [ pyproject.toml -nt .venv/.installed-dev ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[dev,ray,jupyter]"
    touch .venv/.installed-dev
fi

# one process per core and at least two, each taking a whole test file at a time (its module fixtures are built
# once): the suite waits on browsers and servers often enough that two keep two cores busier (0.73 x one process's
# time; three were slower there)
cores=$(nproc 2>/dev/null || echo 2)
exec .venv/bin/python -m pytest -q -n "${ASCENDSCOPE_TEST_PROCESSES:-$(( cores > 2 ? cores : 2 ))}" --dist loadfile "$@"
