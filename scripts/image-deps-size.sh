#!/usr/bin/env bash
# Print the installed size of each image's Python dependency set: pip installs the
# project with one extra into an empty target directory (what the image's final
# `pip install` adds on top of the python base) and measures it, largest packages
# first. Needs the package index (a few minutes on a cold cache).
#   scripts/image-deps-size.sh            exporter and forecaster
#   scripts/image-deps-size.sh exporter   one extra
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
extras=("$@")
((${#extras[@]})) || extras=(exporter forecaster)
for extra in "${extras[@]}"; do
  "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir \
    --target "$work/$extra" ".[$extra]" >/dev/null
  total=$(du -sm "$work/$extra" | cut -f1)
  echo "gpu-eta[$extra]: ${total} MB installed"
  du -sm "$work/$extra"/* | sort -rn | head -5 | sed "s#$work/$extra/#    #"
  for heavy in numpy scipy pandas statsmodels sklearn; do
    [[ -e "$work/$extra/$heavy" ]] && echo "    includes $heavy"
  done
done
