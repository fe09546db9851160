#!/usr/bin/env bash
# Run gpu-eta's whole test suite: installs what it needs first (scripts/bootstrap.sh),
# then lint (ruff) and pytest. Extra arguments go to pytest (they come after the
# defaults, so `-n 0` runs in one process).
# pytest-xdist runs the suite in GPU_ETA_TEST_WORKERS processes (4 by default), a test
# file's tests in one of them (--dist loadfile: a module's real Prometheus is started
# once). Why more workers than the 2 cores CI has: most of the suite's time is spent
# waiting for real servers (a Prometheus scrapes its first target ~5 s after it starts),
# not computing: 15 min in one process, 7 in three (the suite of 2026-12-06: 13 min in
# three workers on 2 cores using about one core's time).
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
"${PYTHON:-python3}" -m ruff check .
# --no-loadscope-reorder: the files are handed out slowest first (tests/conftest.py)
"${PYTHON:-python3}" -m pytest -n "${GPU_ETA_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder "$@"
