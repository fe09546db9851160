"""The one-command demo: a simulated GPU cluster with a real Prometheus."""
