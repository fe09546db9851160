#!/usr/bin/env bash
# Run gpu-eta's whole test suite: installs what it needs first (scripts/bootstrap.sh),
# then lint (ruff) and pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
"${PYTHON:-python3}" -m ruff check .
"${PYTHON:-python3}" -m pytest "$@"
