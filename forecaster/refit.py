"""How the cycle's model is fitted: in a forked child, with the garbage collector
paused around the cycle, learning the runs finished since the last fit.

Why a module: ``Cycle`` (``cycle.py``) decides *when* to refit (the history changed
and ``refit_seconds`` passed) and installs the result; the mechanics of fitting without
holding the cycle up (a process whose fitted model comes back pickled, the collector
switched on only for the fit, the runs appended since) are this module's, and can be
tested without Prometheus or a history store.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import Run


class ModelError(ForecasterError):
    """The model could not be built or fitted."""


class Model(Protocol):
    """The face of ``gpu_eta.forecaster.estimators.eta_model.EtaModel`` the cycle uses."""

    quality_: Mapping[float, tuple[float, float]]
    n_history_: int

    def fit(self, history: Sequence[Run]) -> Model: ...

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast: ...


def default_model_factory() -> Model:
    """``EtaModel(random_state=0)``, imported late so a missing module is a clear error."""
    try:
        from gpu_eta.forecaster.estimators.eta_model import EtaModel
    except ImportError as err:
        raise ModelError(
            f"gpu_eta.forecaster.estimators.eta_model is not available: {err}"
        ) from None
    return EtaModel(random_state=0)


def appended_since(learnt: Sequence[Run], history: Sequence[Run]) -> list[Run]:
    """The runs of ``history`` (the store's finished list, oldest first) after the last
    run of ``learnt`` (what the model has seen): the runs finished since.

    Why not ``history[len(learnt):]``: once the store holds ``fit_runs`` runs (or
    ``fit_points`` points) its list keeps its length as runs finish, the oldest making
    room, and a new run's place is no longer past the end of what the model saw. When
    the model's last run is no longer in the list (as many runs finished since as the
    list holds) every run of it is newer.
    """
    if not learnt:
        return list(history)
    last = learnt[-1]
    for i in range(len(history) - 1, -1, -1):
        if history[i] is last or history[i] == last:
            return list(history[i + 1 :])
    return list(history)


@contextlib.contextmanager
def gc_switched(enabled: bool) -> Iterator[None]:
    """Python's cyclic garbage collector on (``enabled``) or off for the block, then
    as it was.

    Why off around a cycle: at 10,000 running jobs it builds a few million
    short-lived, acyclic objects (parsed answers, runs, forecasts): reference counting
    frees them, but their numbers trigger full collections that walk the whole heap
    again and again (3.8 s of a 22 s cycle, measured with ``gc.callbacks``). Nothing
    cyclic is lost: it is collected after the block. Why on again for a fit inside
    it: a fit builds large arrays that reference cycles can keep alive (model and
    results objects pointing at each other); collected as usual, they do not add to
    the cycle's peak memory.
    """
    was_enabled = gc.isenabled()
    if enabled:
        gc.enable()
    else:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()


@contextlib.contextmanager
def gc_frozen() -> Iterator[None]:
    """Every object tracked by the cyclic collector moved to its permanent generation
    for the block (``gc.freeze``), then back (``gc.unfreeze``).

    Why around forking the refit child: the child turns the collector on for its fit,
    and a full collection walks, and so writes to, every object it inherited (each
    object's collector header), which copies the pages holding them: about 30 % of
    the parent's heap was copied per refit (``bench``: 20,000 runs beside a
    1-million-object ballast, the child's private dirty memory, Python 3.11). Frozen
    objects are never walked; the child's own objects are collected as usual. The
    parent unfreezes right after the fork: its objects are collected as before.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def fit_in_child(
    factory: Callable[[], Model], history: Sequence[Run], timeout_seconds: float
) -> Model:
    """``factory().fit(history)`` in a forked child; the fitted model comes back pickled.

    Why a process: fitting on tens of thousands of runs holds the GIL for seconds,
    which would stretch every cycle it overlaps. Fork inherits ``history`` without
    copying or pickling it; only the fitted model (about 1 MB for 50,000 runs)
    crosses the pipe. Where fork is unavailable the fit runs in this process. A
    child that fails, dies or exceeds ``timeout_seconds`` raises ``ModelError``.
    """
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:  # no fork on this platform
        return factory().fit(history)
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_fit, args=(factory, history, sender), daemon=True)
    with gc_frozen():
        child.start()
    sender.close()
    try:
        if not receiver.poll(timeout_seconds):
            raise ModelError(f"refit in a child process took longer than {timeout_seconds:g}s")
        try:
            status, payload = pickle.loads(receiver.recv_bytes())
        except (EOFError, OSError, pickle.UnpicklingError) as err:
            raise ModelError(f"refit child died (exit code {child.exitcode}): {err}") from None
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join(10)
    if status != "ok":
        raise ModelError(f"model refit failed on {len(history)} runs: {payload}")
    return payload


def _child_fit(factory: Callable[[], Model], history: Sequence[Run], conn) -> None:
    """Child side of ``fit_in_child``: fit, send ("ok", model) or ("error", text)."""
    gc.enable()  # forked inside a cycle, where the parent pauses it
    try:
        model = factory().fit(history)
        data = pickle.dumps(("ok", model), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as err:  # everything goes back to the parent as text
        data = pickle.dumps(("error", f"{type(err).__name__}: {err}"))
    conn.send_bytes(data)
    conn.close()
