#!/bin/sh
# Regenerate the pod-resources Python stubs from api.proto (needs grpcio-tools).
# Run from anywhere; the stubs import each other as gpu_eta.exporter._proto.api_pb2, so the
# proto is compiled with the repository root as include path.
set -eu
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. exporter/_proto/api.proto
