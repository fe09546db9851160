# syntax=docker/dockerfile:1
# One image for both services (the manifests pick the command):
#   gpu-eta-exporter ...      (DaemonSet; runs as uid 0 with every capability dropped)
#   gpu-eta-forecaster ...    (Deployment / CronJob; runs as the image's uid 65532)
# Build and push to a registry your nodes can pull from, then set images: in an
# overlay (docs/deploy.md "The image"; nothing is published as ghcr.io/gpu-eta):
#   docker build -t registry.example.com/ml/gpu-eta:0.1.0 . && docker push registry.example.com/ml/gpu-eta:0.1.0
# (Not built in CI here: these machines have no container engine. tests/ops lints
# this file structurally instead.)

ARG PYTHON_VERSION=3.11

# ---- build: a wheel of the project, then every dependency as wheels --------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY forecaster ./forecaster
COPY demo ./demo
RUN pip wheel --wheel-dir /wheels ".[exporter,forecaster]"

# ---- runtime ---------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm
LABEL org.opencontainers.image.title="gpu-eta" \
      org.opencontainers.image.description="Who holds each GPU on a Kubernetes cluster, whether they use it, and when it will be free." \
      org.opencontainers.image.source="https://github.com/gpu-eta/gpu-eta" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # NVML only: the NVIDIA runtime injects libnvidia-ml, no CUDA needed
    NVIDIA_DRIVER_CAPABILITIES=utility
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels "gpu-eta[exporter,forecaster]" \
    && rm -rf /wheels \
    && groupadd --system --gid 65532 gpueta \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gpueta \
    && install -d -o 65532 -g 65532 /var/lib/gpu-eta
USER 65532:65532
WORKDIR /var/lib/gpu-eta
# exporter metrics, exporter progress, forecaster metrics
EXPOSE 9842 9843 9844
CMD ["gpu-eta-exporter", "--help"]
