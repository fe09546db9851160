#!/usr/bin/env bash
# gpu-eta's one-command demo: a simulated 3-node GPU cluster (real exporters on
# simulated nodes), a real Prometheus with backfilled history (~2.8 h), the real
# forecaster, and `top` — all on 127.0.0.1. Installs what it needs first (the Python
# dependencies, then, once the demo has checked its flags, Debian's prometheus and
# prometheus-alertmanager packages: scripts/bootstrap.sh).
#   ./demo.sh                 run until Ctrl-C (stops everything, leaves no process)
#   ./demo.sh --seconds 120   run 2 minutes, print a final `top` snapshot, exit 0
#   ./demo.sh --help          every option (seed, nodes, GPUs, time scale, ports...)
# Run from any directory: a relative --workdir is taken from where it was run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/scripts/bootstrap.sh" --demo-python
# the demo runs `bootstrap.sh --demo [--victoriametrics]` itself once its flags are
# checked (--help and a typo install nothing more)
export GPU_ETA_DEMO_BOOTSTRAP="$here/scripts/bootstrap.sh"
# usage lines and errors name the command as it was run (./demo.sh), not python -m
export GPU_ETA_DEMO_PROG="$0"
exec "${PYTHON:-python3}" -m gpu_eta.demo "$@"
