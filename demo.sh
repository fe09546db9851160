#!/usr/bin/env bash
# gpu-eta's one-command demo: a simulated 3-node GPU cluster (real exporters on
# simulated nodes), a real Prometheus with a day of backfilled history, the real
# forecaster, and `top` — all on 127.0.0.1. Installs what it needs first (Debian's
# prometheus and prometheus-alertmanager packages and the Python dependencies, via
# scripts/bootstrap.sh --demo).
#   ./demo.sh                 run until Ctrl-C (stops everything, leaves no process)
#   ./demo.sh --seconds 120   run 2 minutes, print a final `top` snapshot, exit 0
#   ./demo.sh --help          every option (seed, nodes, GPUs, time scale, ports...)
set -euo pipefail
cd "$(dirname "$0")"
# --tsdb victoriametrics runs VictoriaMetrics and vmalert: only then are they needed
vm=""
for arg in "$@"; do
  [[ "$arg" == victoriametrics || "$arg" == --tsdb=victoriametrics ]] && vm="--victoriametrics"
done
scripts/bootstrap.sh --demo $vm
exec "${PYTHON:-python3}" -m gpu_eta.demo "$@"
