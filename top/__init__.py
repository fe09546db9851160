"""``gpu-eta-top``: a terminal view of training runs, their ETAs and the GPUs, read from
Prometheus only (docs/top.md). Queries, view model, renderers and the command line
are separate modules; only ``main`` does I/O."""
