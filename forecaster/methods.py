"""Pure: the ``method`` label values of forecasts made from completed runs' durations.

They are part of the metric contract (``gpu_eta_job_forecast_info``), read by
``planless`` that makes them and by ``top`` that flags them. Kept apart so that a
reader of the metrics imports two strings, not the estimators ``planless`` needs.
"""

from __future__ import annotations

PLANLESS_METHODS = ("durations", "job_durations", "cluster_durations")
"""The ``method`` of a forecast for a run without a planned total, from each level of
``planless.groups``, finest first: the run's configuration, its job (namespace and job
name, any hardware or batch size), the cluster."""
