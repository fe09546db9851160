"""Helpers shared by the programs (exporter, forecaster, top, demo), so that none of
them imports another program for them: mostly pure (parsing, bounds, PromQL strings;
tests/test_layout.py lists which), and a few at the I/O edge every program needs alike
(``listen_socket``, ``metrics_http``, ``atomic_file``)."""
