"""The ``progress`` collector: the HTTP endpoint training code posts its progress to
(``gpu_eta.exporter.progress_http``, on ``--progress.listen-address``); as a collector
it reports whether the endpoint serves and what it counted."""

from __future__ import annotations

from typing import Any

from gpu_eta.exporter.collectors import StartupError
from gpu_eta.exporter.collectors.registry import BuildContext, Collector, register
from gpu_eta.exporter.progress_http import ProgressListener


def build(ctx: BuildContext) -> Any:
    """Listen now (a taken port is a one-line start-up error); reports are matched to
    pods by their sender's IP (the pod source's lookup)."""
    cfg = ctx.cfg
    addr = cfg.progress_listen_address
    listener = ProgressListener(
        addr.host,
        addr.port,
        ctx.store,
        pod_by_ip=ctx.pod_by_ip,
        pods=ctx.pods_now,
        allow_host_network=cfg.progress_allow_host_network,
    )
    try:
        listener.start()
    except OSError as err:
        raise StartupError(
            f"cannot listen on --progress.listen-address {addr}: {err.strerror or err}"
        ) from err
    ctx.stop_first.append(listener.stop)
    return listener


register(
    Collector(
        "progress",
        "HTTP endpoint that training code posts progress to",
        kind="progress",
        build=build,
        order=60,
        needs_progress_store=True,
    )
)
