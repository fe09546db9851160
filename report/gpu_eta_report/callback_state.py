"""State every framework callback keeps, free of any framework import.

``keras.py`` and ``lightning.py`` each subclass their own framework's ``Callback``;
mixing this in first gives both the same constructor (where to report, the batch
size, extra ``start()`` options, no reporter until training starts) and the same
finish (end the run once, then forget the reporter), while each module still imports
only its own framework.
"""

from __future__ import annotations

from typing import Any

from gpu_eta_report.client import ProgressReporter


class ReportingCallbackState:
    """Constructor and ``_finish`` shared by the Keras and Lightning callbacks."""

    def __init__(self, url: str | None = None, batch_size: int | None = None, **options: Any):
        super().__init__()  # the framework's Callback, next in the MRO
        self.url = url
        self.batch_size = batch_size
        self.options = options
        self.reporter: ProgressReporter | None = None

    def _finish(self, **fields: Any) -> None:
        """End the run (at most once) with the last ``fields`` and drop the reporter."""
        if self.reporter is not None:
            self.reporter.end(**fields)
            self.reporter = None
