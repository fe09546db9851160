#!/usr/bin/env bash
# Run gpu-eta's whole test suite: installs what it needs first (scripts/bootstrap.sh),
# then lint (ruff) and pytest. Extra arguments go to pytest (they come after the
# defaults, so `-n 0` runs in one process).
# pytest-xdist runs the suite in GPU_ETA_TEST_WORKERS processes (5 by default), a test
# file's tests in one of them (--dist loadfile: a module's real Prometheus is started
# once). Why more workers than the 2 cores CI has: much of the suite's time is spent
# waiting for real servers (a Prometheus scrapes its first target ~5 s after it starts),
# not computing (the suite of 2026-12-07: 1,345 s of CPU in a 978-s run on 2 cores).
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
# Bytecode is cached: where the environment sets PYTHONDONTWRITEBYTECODE (these machines
# do), every Python the suite starts (hundreds of exporters, forecasters and trainings)
# compiled the repository's sources again, and a second run's workers rewrote every test
# module again (collection: 30 s of CPU a worker uncached, 16 s with pytest's cache).
unset PYTHONDONTWRITEBYTECODE
"${PYTHON:-python3}" -m compileall -q -j 0 -x '/[.]git/' .
"${PYTHON:-python3}" -m ruff check .
# --no-loadscope-reorder: the files are handed out slowest first (tests/conftest.py)
"${PYTHON:-python3}" -m pytest -n "${GPU_ETA_TEST_WORKERS:-5}" --dist loadfile --no-loadscope-reorder "$@"
