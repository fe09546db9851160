"""gpu-eta node exporter.

Kept empty on purpose: ``gpu_eta_report`` (the progress client that runs inside
users' training processes) must import with the standard library alone.
"""
