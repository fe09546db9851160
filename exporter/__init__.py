"""gpu-eta node exporter.

Kept empty on purpose: ``exporter.report`` (the progress client that runs inside
users' training processes) must import with the standard library alone.
"""
