"""The largest progress value gpu-eta takes, end to end: one bound for every reader.

Why one module: the exporter refuses a report above it (``exporter.progress``, the log
bars of ``exporter.logformats``) and the forecaster reads runs up to it
(``forecaster.runs``: Prometheus series and a runs CSV); two copies could drift, and a
run the exporter accepts would then never be forecast. The progress client
(``gpu_eta_report.client``) installs alone in training images and keeps its own copy,
which tests/report/test_client.py holds equal to this one.
"""

from __future__ import annotations

# An epoch, a step, a planned total or a free-form number. Why 1e15: progress may count
# samples (MLPerf bert: ~1.2e9) or tokens (a language model's pretraining: 1.5e13 for
# 15 trillion tokens, Llama 3's scale), and every whole count up to 1e15 stays exact in
# a float (2**53 ≈ 9e15); larger counts are not training progress, refused rather than
# rounded.
MAX_PROGRESS = 1e15
