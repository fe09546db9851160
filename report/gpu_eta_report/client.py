"""The progress client: runs inside training processes, standard library only.

Design goal: reporting must never hurt training. Every public method returns at
once and never raises (but ``start()`` given a keyword it does not take: a
``TypeError`` at the call, before any training, as from any Python function); reports go through a small bounded queue to one daemon
thread that POSTs them with short timeouts over one kept-alive connection; the thread
ends once no report came for twice the reporter's longest recent gap between reports,
at least ``SENDER_IDLE_SECONDS`` and at most ``MAX_SENDER_IDLE_SECONDS``
(``sender_idle_seconds``), and the next report starts it again, so a reporter left
open (a notebook cell interrupted before ``end()``) costs no thread for long, a steady
slow one keeps its thread and connection, and reporters open side by side (a sweep's
and its trials') all report. Each
report carries the whole state (run id, epoch, step, plan), so dropping one under
pressure loses nothing but freshness: the queue drops its oldest entry when full,
step reports are thinned to one per ``min_interval_seconds``, and after failures
the sender backs off (0.5 s doubling to 30 s), dropping and counting the step reports
that come meanwhile; the start, epoch ends and the end are always tried. Failing
reports are warned of once (URL and cause), then at most every 10 minutes, and an
exporter reached again is said once at INFO (``FailureWarnings``). When the
exporter answers 429 (or 503) with ``Retry-After``, the sender holds its reports that
long, at most ``MAX_RETRY_AFTER_SECONDS``, then sends the newest of them (the older
ones are superseded: counted dropped), or the refused report again when nothing newer
came meanwhile: it is still the whole current state (``end()``'s final report). While
``end()`` or ``close()`` waits, a backlog that would not be sent in time gives way to
the newest report likewise.

Which process reports: in a job of several processes, the first of each pod (its
node-local rank 0: ``LOCAL_RANK``, or MPI's and SLURM's local rank; with ``RANK`` set
but no local rank, a ``torch.multiprocessing.spawn`` worker's index, as in a Kubeflow
PyTorchJob pod spawning its workers (``other_rank``); ``RANK`` only when neither is
known); the others get a disabled reporter (one INFO line), unless
``any_rank=True`` or ``GPU_ETA_ANY_RANK=1`` (each process then reports a run of its
own). With no such variable set, an initialized ``torch.distributed`` group's rank
decides (``torch.multiprocessing.spawn`` passes ranks as arguments): read at each
report until the group is up, so a reporter started before ``init_process_group``
reports until then, and another rank's stops at its first report after it.

A ``spawn`` or ``forkserver`` child running its parent's script again (to find its
function: a DataLoader worker, a Pool's) never reports (``rerunning_parents_script``).

Where the exporter is: ``url`` argument, else ``GPU_ETA_URL`` (e.g.
``http://10.0.0.5:9843/progress``; an ``http://`` URL without a port means port 80,
a ``GPU_ETA_URL`` without a scheme, ``10.0.0.5``, port 9843), else the node IP from
the downward API in ``GPU_ETA_HOST_IP``, ``HOST_IP`` or ``NODE_IP``
(``status.hostIP``) with port ``GPU_ETA_PORT`` (default 9843). With none of them the
reporter is disabled (a warning once, no error).

How long one send may take, connect, send and answer together (``DeadlineSocket``):
``timeout_seconds`` argument, else
``GPU_ETA_TIMEOUT_SECONDS``, else 2 s (a value that is not a number in (0, 60] is
replaced by the default, with one warning); ``end()`` waits that long for the
final report.

The exporter's rules are applied before sending, so no report is refused for what
the client could have known: a progress value (``epoch``, ``step``, a planned total)
that is not a finite number in [0, ``MAX_NUMBER``] (at least 1 for a total) is left
out (counted ``ignored``, once logged as a warning), numpy and torch scalars are sent
as plain numbers; free-form numbers that are not finite or beyond
``MAX_NUMBER``, or whose names stay invalid, are left out (once logged at INFO), and
a name already sent whose value turns unusable is sent as ``null`` (no current
value); a run holds at most ``MAX_METRICS`` names, the first taken (in sorted order
within a call), as the exporter freezes them; an invalid ``run_id`` or ``container`` is corrected with one warning at
construction. An ``epoch`` or ``step`` beyond its planned total is sent as the total
(the exporter refuses more), with one warning a reporter: the run reads as finished.
A refusal the exporter still answers is logged once per distinct reason. An
environment variable that reads like one of these settings misspelt (``GPU_ETA_TIMEOUT``,
``GPU_ETA_ULR``) is named once per process with the one meant (``misspelt_settings``).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import difflib
import email.utils
import functools
import hashlib
import http.client
import inspect
import json
import logging
import math
import multiprocessing
import os
import re
import secrets
import socket
import sys
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("gpu_eta.report")

DEFAULT_PORT = 9843
DEFAULT_TIMEOUT_SECONDS = 2.0
DEFAULT_MIN_INTERVAL_SECONDS = 1.0
QUEUE_SIZE = 32  # reports waiting for the sender; a full queue drops its oldest (counted)
MAX_TIMEOUT_SECONDS = 60.0  # longer would only hold queued reports back from fresher ones
# Copies of the exporter's wire rules (gpu_eta.exporter.progress: MAX_METRICS,
# MAX_PROGRESS as MAX_NUMBER, _METRIC_NAME, _RUN_ID, _CONTAINER, _KNOWN): this package installs alone in
# training images and cannot import the exporter. tests/report/test_client.py asserts
# that they stay equal.
MAX_METRICS = 16
# Mirrors gpu_eta.common.progress_bound.MAX_PROGRESS (the exporter's and the
# forecaster's one bound): a run counting tokens (15 trillion, 1.5e13, at Llama 3's
# scale) fits, and every whole count stays exact in a float
MAX_NUMBER = 1e15
# the least planned total the exporter takes (common.progress_bound.MIN_PLANNED, copied:
# this file runs alone; a test holds the two equal)
MIN_PLANNED = 1
_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_CONTAINER = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_RESERVED = frozenset(
    {
        "epoch",
        "epochs",
        "step",
        "steps",
        "batch_size",
        "run_id",
        "run_start",
        "container",
        "event",
        "metrics",
    }
)
# distinct refusal reasons logged per reporter; past this one line says the rest are not
MAX_LOGGED_REFUSALS = 16
# The longest a ``Retry-After`` holds the reports back. Why 30 s: the longest wait the
# exporter asks for (a run over its container's cap: one run every 30 s); a longer one
# (a proxy's, a clock-skewed date) would only leave the job's progress stale for longer,
# and waiting less than asked only costs one more refused report.
MAX_RETRY_AFTER_SECONDS = 30.0
# An exporter answer is one line; a longer one (another server's page) is read this far
# for its reason, and its connection is not reused (the rest is unread).
MAX_ANSWER_BYTES = 64 * 1024
_NUMBERS = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# While reports fail (the exporter unreachable), a warning at most this often: the first
# failure is said at once, the ones after it counted into the next line.
FAILURE_WARNING_INTERVAL_SECONDS = 600.0


def exporter_url(env: Mapping[str, str] | None = None) -> str | None:
    """The exporter's ``/progress`` URL from the environment, or None if unknown.

    ``GPU_ETA_URL`` may leave out the scheme (``host``, ``host:port``, ``host/path``):
    such a form names the exporter, so its port is the exporter's ``DEFAULT_PORT``
    unless given. With a scheme it is a URL like any other (``exporter_target``).
    """
    env = os.environ if env is None else env
    url = env.get("GPU_ETA_URL", "").strip()
    if url:
        bare = "://" not in url
        try:
            parsed = urllib.parse.urlsplit(f"http://{url}" if bare else url)
            netloc = parsed.netloc
            if bare and parsed.port is None:
                netloc = f"{netloc.rstrip(':')}:{DEFAULT_PORT}"
        except ValueError:  # "http://[::1": the reporter says it is unusable, disabled
            return url
        path = parsed.path if parsed.path not in ("", "/") else "/progress"
        return urllib.parse.urlunsplit((parsed.scheme, netloc, path, "", ""))
    for name in ("GPU_ETA_HOST_IP", "HOST_IP", "NODE_IP"):
        host = env.get(name, "").strip()
        if host:
            port = env.get("GPU_ETA_PORT", "").strip() or str(DEFAULT_PORT)
            if ":" in host and not host.startswith("["):
                host = f"[{host}]"  # IPv6 node address
            return f"http://{host}:{port}/progress"
    return None


def exporter_target(url: str) -> tuple[str, int, str]:
    """(host, port, path) to POST ``url``'s reports to; ValueError if it is unusable.

    An ``http://`` URL without a port means port 80, as it does to curl, requests and
    browsers: the same URL must not reach one server from a shell and another from
    the client. Only the scheme-less ``GPU_ETA_URL`` forms (``exporter_url``) are given
    the exporter's port. There is no TLS here (the exporter serves plain HTTP), so
    ``https://`` is refused rather than sent in clear text to port 443.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("only http:// URLs")
    if "@" in parts.netloc:  # never sent: the exporter takes no credentials
        raise ValueError("a user or password, which the exporter takes none of")
    parts.hostname.encode("idna")  # what connecting does: "a..b" never resolves
    port = http.client.HTTP_PORT if parts.port is None else parts.port
    if port == 0:
        raise ValueError("port 0")
    return parts.hostname, port, parts.path or "/progress"


def timeout_setting(value: object = None, env: Mapping[str, str] | None = None) -> float:
    """The send timeout in seconds: ``value``, else ``GPU_ETA_TIMEOUT_SECONDS``, else 2.

    Never raises: a value that is not a number in (0, ``MAX_TIMEOUT_SECONDS``] (a
    typo in a pod spec, ``"2s"``, a negative number) gives the default and one warning
    naming it, since a bad knob must not stop a training job.
    """
    env = os.environ if env is None else env
    source = "timeout_seconds"
    if value is None:
        value = env.get("GPU_ETA_TIMEOUT_SECONDS", "").strip() or None
        source = "GPU_ETA_TIMEOUT_SECONDS"
        if value is None:
            return DEFAULT_TIMEOUT_SECONDS
    return _seconds_setting(
        value,
        source,
        DEFAULT_TIMEOUT_SECONDS,
        lambda seconds: 0 < seconds <= MAX_TIMEOUT_SECONDS,
        f" in (0, {MAX_TIMEOUT_SECONDS:g}]",
    )


def _seconds_setting(
    value: object, source: str, default: float, accepts: Callable[[float], bool], bounds: str = ""
) -> float:
    """``value`` as a number of seconds if ``accepts`` it, else ``default`` and one
    warning naming ``source`` (and the ``bounds`` accepted). The one parse of every
    seconds knob, so that each says what was wrong alike and none can raise: a bad
    knob must not stop a training job. A bool is no number here, NaN never accepted.
    """
    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        seconds = math.nan
    if math.isnan(seconds) or not accepts(seconds):
        log.warning(
            "gpu-eta: %s=%r is not a number of seconds%s; using %g", source, value, bounds, default
        )
        return default
    return seconds


LOCAL_RANK_VARIABLES = (
    "LOCAL_RANK",  # torchrun, DeepSpeed, accelerate, Lightning
    "OMPI_COMM_WORLD_LOCAL_RANK",  # Open MPI
    "MPI_LOCALRANKID",  # MPICH, Intel MPI
    "SLURM_LOCALID",  # srun
    "HOROVOD_LOCAL_RANK",  # horovodrun
)


# RANK as this process had it when it imported the module: a multiprocessing child
# inherits its parent's environment, so a value still the same was not set for it.
# A ``spawn`` child imports the module again, after its parent set its RANK, so each
# importer also leaves ``<its pid>:<its RANK>`` in the environment for its children;
# a child trusts it only when that pid is its own multiprocessing parent's (an
# unrelated program a wrapper started inherits it too, with a RANK of its own).
RANK_AT_IMPORT_VARIABLE = "GPU_ETA_REPORT_RANK_AT_IMPORT"
_IMPORT_PID = os.getpid()
_RANK_AT_IMPORT = os.environ.get("RANK", "").strip()
_INHERITED_RANK_AT_IMPORT = os.environ.get(RANK_AT_IMPORT_VARIABLE, "")
os.environ[RANK_AT_IMPORT_VARIABLE] = f"{_IMPORT_PID}:{_RANK_AT_IMPORT}"


def _rank_before_start(parent_pid: int) -> str:
    """RANK as this multiprocessing child's parent (``parent_pid``) had it when it
    imported the module, else as this process had it at its own import.

    Why each case: a forked child runs the parent's module, imported in the parent
    (``_IMPORT_PID``); a spawned child imported the module itself and reads what its
    parent left in the environment, if that parent was the one that left it.
    """
    if os.getpid() != _IMPORT_PID:
        return _RANK_AT_IMPORT  # forked: the module (and its value) is an ancestor's
    pid, sep, rank = _INHERITED_RANK_AT_IMPORT.partition(":")
    return rank if sep and pid == str(parent_pid) else _RANK_AT_IMPORT


# what ``other_rank`` names a ``torch.multiprocessing.spawn`` worker's index by
SPAWN_INDEX = "torch.multiprocessing.spawn index"


def spawn_index() -> int | None:
    """This process's index among the workers ``torch.multiprocessing.spawn`` (or
    ``start_processes``) started, the first argument each is called with; None in any
    other process. Never raises.

    Why read it: torch sets no variable for it, and a spawned worker inherits its
    parent's ``RANK``, which in a Kubeflow PyTorchJob is the pod's, the same in every
    worker of the pod. The index is read where ``multiprocessing`` keeps it in the
    worker, the process object it was started from: its target is torch's ``_wrap``,
    called with ``(fn, index, args, ...)`` (``torch/multiprocessing/spawn.py``).
    """
    try:
        if multiprocessing.parent_process() is None:
            return None
        process = multiprocessing.current_process()
        target = getattr(process, "_target", None)
        if (getattr(target, "__module__", None), getattr(target, "__name__", None)) != (
            "torch.multiprocessing.spawn",
            "_wrap",
        ):
            return None
        index = process._args[1]  # type: ignore[attr-defined]
        return index if type(index) is int and index >= 0 else None
    except Exception:  # another torch's layout: not known, as elsewhere
        return None


def rerunning_parents_script() -> bool:
    """Whether this process is a ``spawn`` or ``forkserver`` child still preparing:
    running its parent's main script again (as ``__mp_main__``) to find the function
    it was started for, before running it. Never raises.

    Why: a script that starts its reporter at its top, outside a main guard, started
    one in every such child (a DataLoader's workers, a Pool's), each announcing a run
    of its own, never ended, from the same container, every time a DataLoader spawned
    its workers: the exporter's current run was a phantom at 0 epochs while the real
    one trained. ``multiprocessing`` itself marks the preparation (``_inheriting``,
    which it reads to refuse starting a process from there)."""
    try:
        return bool(getattr(multiprocessing.current_process(), "_inheriting", False))
    except Exception:  # another multiprocessing's layout: a process like any other
        return False


def other_rank(
    env: Mapping[str, str] | None = None, index: int | None = None
) -> tuple[str, str] | None:
    """The launcher's variable saying this process is not its pod's first, as (name,
    value): the first of ``LOCAL_RANK_VARIABLES`` that is set, when it is a whole
    number above 0. None for the first process, or when none is set. Where none is set
    but ``RANK`` is, a ``torch.multiprocessing.spawn`` worker's index (``index``, else
    ``spawn_index()``) is its rank in the pod: (``SPAWN_INDEX``, index) above 0.

    Why the local rank: a pod is a node's share of the job (its GPUs, its exporter), and
    each pod's first process reports the pod's run, so every pod of a multi-node job
    has its GPUs forecast; two reporting ranks in one pod would instead be two runs in
    turn, each report starting the other anew. Why not the global ``RANK``: a
    launcher that starts several processes in a pod says which is the pod's first
    (every one above does), while ``RANK`` alone is how Kubeflow's PyTorchJob starts
    one process per pod (its pods are ranks 0…N-1): read as a pod's ranks, it kept
    every pod but the master silent, their GPUs without a forecast. ``RANK`` is read
    only in a child of a Python ``multiprocessing`` parent that set it after this
    module was imported (scripts numbering their ``multiprocessing`` workers: the ranks of
    one pod); one it inherited unchanged is the pod's own (a PyTorchJob worker
    training in a child process is still its pod's only trainer).

    Why the spawn index before ``RANK``: a PyTorchJob pod whose script spawns a worker
    per GPU gives each the pod's ``RANK``, and the script makes the global rank
    ``RANK × workers + index`` itself; a script that sets ``RANK`` to that global
    rank makes the first worker of a second pod rank 2 or more. Either way the index,
    not ``RANK``, says which worker is the pod's first.
    """
    env = os.environ if env is None else env
    names = [n for n in LOCAL_RANK_VARIABLES if env.get(n, "").strip()]
    if not names and env.get("RANK", "").strip():
        index = spawn_index() if index is None else index
        if index is not None:
            return (SPAWN_INDEX, str(index)) if index > 0 else None
    parent = multiprocessing.parent_process()
    if (
        not names
        and parent is not None
        and parent.pid is not None
        and env.get("RANK", "").strip() != _rank_before_start(parent.pid)
    ):
        names = ["RANK"]
    if not names:
        return None
    value = env.get(names[0], "").strip()
    if value.isascii() and value.isdigit() and int(value) > 0:
        return names[0], value
    return None


def torch_rank() -> int | None:
    """The rank of ``torch.distributed``'s default process group, when the training
    script has imported ``torch.distributed`` (never imported here: this module is
    standard library only) and initialized it; else None. Never raises."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return int(dist.get_rank())
    except Exception:  # a torch without these, a group torn down meanwhile
        return None


def names_a_rank(env: Mapping[str, str] | None = None) -> bool:
    """Whether a launcher variable (``RANK`` or one of ``LOCAL_RANK_VARIABLES``) is set:
    then it decides which process reports (``other_rank``), never the process group."""
    env = os.environ if env is None else env
    return any(env.get(n, "").strip() for n in ("RANK", *LOCAL_RANK_VARIABLES))


# The environment variables this client reads (``RANK_AT_IMPORT_VARIABLE`` is its own
# bookkeeping, the launchers' rank variables are not its to check)
SETTINGS_VARIABLES = (
    "GPU_ETA_URL",
    "GPU_ETA_HOST_IP",
    "GPU_ETA_PORT",
    "GPU_ETA_TIMEOUT_SECONDS",
    "GPU_ETA_CONTAINER",
    "GPU_ETA_SOURCE_ADDRESS",
    "GPU_ETA_ANY_RANK",
)
# How like one of them a name must be (``_likeness``) to be taken for its misspelling:
# GPU_ETA_TIMEOUT is 0.79 like GPU_ETA_TIMEOUT_SECONDS; other tools' GPU_ETA_* names
# (GPU_ETA_PROGRESS, GPU_ETA_RUN_ID, the repository's test switches) are at most 0.72
MISSPELT_CUTOFF = 0.75
_WARNED_SETTINGS: set[str] = set()  # misspelt names already warned of in this process


def misspelt_settings(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(name, the setting meant) for each name in ``env`` that is not one of
    ``SETTINGS_VARIABLES`` but reads like one (another case, a letter swapped or
    missing, a suffix left out). Pure. Why: a misspelt setting in a pod spec is never
    read, and nothing said so: ``GPU_ETA_TIMEOUT=30`` left the 2 s timeout, and
    ``GPU_ETA_ULR`` left only "no exporter address"."""
    out = []
    for name in env:
        upper = name.upper()
        if name in SETTINGS_VARIABLES or not upper.startswith("GPU"):
            continue
        score, meant = max((_likeness(upper, known), known) for known in SETTINGS_VARIABLES)
        if score >= MISSPELT_CUTOFF:
            out.append((name, meant))
    return sorted(out)


def _likeness(a: str, b: str) -> float:
    """difflib's ratio of ``a`` and ``b`` taken both ways, the lower: it depends on
    the order (GPU_ETA_PROGRESS is 0.71 like GPU_ETA_PORT one way, 0.79 the other)."""
    return min(
        difflib.SequenceMatcher(None, a, b).ratio(), difflib.SequenceMatcher(None, b, a).ratio()
    )


def _warn_misspelt_settings() -> None:
    """One warning per misspelt setting (``misspelt_settings``) and process: a sweep's
    every trial would say it again. Names only: a value may be a token."""
    for name, meant in misspelt_settings(os.environ):
        if name not in _WARNED_SETTINGS:
            _WARNED_SETTINGS.add(name)
            log.warning(
                "gpu-eta: environment variable %s is not read; did you mean %s?", name, meant
            )


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def interval_setting(value: object) -> float:
    """``min_interval_seconds``: a number of seconds, at least 0; anything else (NaN, a
    string) gives the default 1 s and one warning naming it, rather than no step
    report at all."""
    return _seconds_setting(
        value,
        "min_interval_seconds",
        DEFAULT_MIN_INTERVAL_SECONDS,
        lambda seconds: 0 <= seconds < math.inf,
    )


def _as_float(value: object) -> float:
    """``float(value)``, a tensor that requires grad (a loss just backpropagated)
    detached first: ``float()`` of one makes torch print a UserWarning into the user's
    training output. Duck-typed: the client imports no torch. Raises as ``float``."""
    if getattr(value, "requires_grad", False) is True:
        value = value.detach()  # type: ignore[attr-defined]
    return float(value)  # type: ignore[arg-type]


def _count(value: object, minimum: float) -> int | float | None:
    """``value`` as the exporter takes a progress field: a finite number in [``minimum``,
    ``MAX_NUMBER``], not a bool; numpy and torch scalars included, an int when whole
    (so it always goes into JSON). None when the exporter would refuse it."""
    if isinstance(value, bool):
        return None
    try:
        number = _as_float(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None
    if not minimum <= number <= MAX_NUMBER:  # also false for NaN
        return None
    return int(number) if number.is_integer() else number


def _metric_name(name: object) -> str | None:
    """The wire name of a metric (``eval/loss`` → ``eval_loss``), None if unusable.

    Progress fields (``epoch``, ``step``...) are no metrics: None for them too.
    """
    if not isinstance(name, str):
        return None
    key = name if _METRIC_NAME.match(name) else re.sub(r"[^A-Za-z0-9_]", "_", name)[:64]
    if not _METRIC_NAME.match(key) or key in _RESERVED:
        return None
    return key


def _metric_value(value: object) -> tuple[float | None, str]:
    """The number to send for ``value`` (tensors with ``__float__`` included), or
    None and why not: the exporter's rule (finite, at most ``MAX_NUMBER``)."""
    if isinstance(value, bool):
        return None, "not a number"
    try:
        number = _as_float(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None, "not a number"
    if not math.isfinite(number):
        return None, "not finite"
    if abs(number) > MAX_NUMBER:
        return None, f"beyond {MAX_NUMBER:g}"
    return number, ""


def merge_metrics(
    current: Mapping[str, float | None], values: Mapping[str, Any]
) -> tuple[dict[str, float | None], list[tuple[str, str]]]:
    """``current`` updated with ``values`` as the exporter will take them, and what was
    left out as (name, why). None is a name held without a current value: sent as
    ``null``, which the exporter reads as "remove this name".

    Why here and not only in the exporter: what the client keeps it sends in every
    later report, so one number the exporter refuses (HF's ``total_flos``, 1e17 and more
    for a large model) must
    never enter. A held name whose new value is unusable (NaN) becomes None, not kept
    with its old value: the exporter reads a name left out as unchanged, so a stale
    loss would be reported as the current one. The name set is frozen at
    ``MAX_METRICS`` names, as the exporter freezes a run's: a new name beyond them is
    left out, and a name with None keeps its place. New names are taken in sorted
    order while there is room, the exporter's own choice, so which series exist does
    not depend on the order a call's metrics are written in.
    """
    out = dict(current)
    skipped: list[tuple[str, str]] = []
    new: dict[str, float] = {}
    for name, value in values.items():
        key = _metric_name(name)
        if key is None:
            if isinstance(name, str) and name not in _RESERVED:
                skipped.append((name[:64], "bad name"))
            continue
        number, why = _metric_value(value)
        if number is None:
            if key in out:
                out[key] = None
            new.pop(key, None)
            skipped.append((key, why))
        elif key in out:
            out[key] = number
        else:
            new[key] = number
    for key in sorted(new):
        if len(out) < MAX_METRICS:
            out[key] = new[key]
        else:
            skipped.append((key, f"beyond {MAX_METRICS} names"))
    return out, skipped


def _clean_metrics(values: Mapping[str, Any]) -> dict[str, float]:
    """The metrics of ``values`` the exporter accepts, as one report would carry them."""
    return {k: v for k, v in merge_metrics({}, values)[0].items() if v is not None}


def run_id_setting(run_id: object) -> str:
    """``run_id`` if the exporter accepts it, else a corrected one (one warning).

    The exporter refuses every report whose ``run_id`` is not 1-64 of
    ``[A-Za-z0-9._-]``, so ``"my run"`` would report nothing at all: it becomes
    ``my-run-<8 hex digits of the original's hash>`` (still findable, and never the
    corrected form of another id), or a random id when nothing usable is left.
    """
    if run_id is None or run_id == "":
        return secrets.token_hex(8)
    text = str(run_id)
    if _RUN_ID.match(text):
        return text
    # the original's hash appended: two ids that differ only where they are cut or
    # corrected ("exp 1", "exp/1"; a long sweep name's "-seed1", "-seed2") stay two
    # runs, and the same id is corrected the same way in every process (a resume)
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:55]
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    fixed = f"{base}-{digest}" if base else secrets.token_hex(8)
    if not _RUN_ID.match(fixed):
        fixed = secrets.token_hex(8)
    log.warning(
        "gpu-eta: run_id=%r is not 1-64 characters of [A-Za-z0-9._-] (the exporter "
        "would refuse every report); using %r",
        run_id,
        fixed,
    )
    return fixed


def container_setting(container: object, source: str = "container") -> str | None:
    """``container`` if it is a DNS-1123 label, else a corrected one or None (one warning).

    Kubernetes container names are such labels, so ``"Trainer"`` or ``"my_trainer"``
    can only mean ``trainer`` / ``my-trainer``; sent as given, the exporter would refuse
    every report. With nothing usable left the reports go without it (the exporter
    then files them under the pod's first container).
    """
    if container is None or container == "":
        return None
    text = str(container)
    if _CONTAINER.match(text):
        return text
    fixed: str | None = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")
    if not fixed or not _CONTAINER.match(fixed):
        fixed = None
    log.warning(
        "gpu-eta: %s=%r is not a container name (a DNS-1123 label; the exporter would "
        "refuse every report); %s",
        source,
        container,
        f"using {fixed!r}" if fixed else "reporting without it (the pod's first container)",
    )
    return fixed


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """How long an answer's ``Retry-After`` asks to wait, at most
    ``MAX_RETRY_AFTER_SECONDS``; None when absent or unreadable.

    Both of RFC 9110's forms: whole seconds (what the exporter sends), or an HTTP date
    (``now`` the wall clock to measure it from, ``time.time()`` by default).
    """
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        seconds = float(text)
    else:
        try:
            date = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if date is None:
            return None
        if date.tzinfo is None:  # "-0000": UTC all the same (RFC 5322 3.3)
            date = date.replace(tzinfo=datetime.timezone.utc)
        seconds = date.timestamp() - (time.time() if now is None else now)
    return min(max(0.0, seconds), MAX_RETRY_AFTER_SECONDS)


def _step_after(step: object, last: object) -> bool:
    """Whether ``step()``'s ``step`` replaces ``last`` (the one held, or None): a step
    never goes back, as a framework calling ``step()`` from several threads (Keras 3's
    batch hooks) may call it out of order. Anything but two plain numbers is taken:
    comparing tensors would sync the GPU on every call, and a bad value (NaN) is
    counted ignored where it is read."""

    def plain(value: object) -> bool:
        return (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        )

    return not (plain(step) and plain(last)) or step >= last  # type: ignore[operator]


def _short_repr(value: object) -> str:
    """``repr(value)`` for a log line: bounded, and never raising."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _answer_reason(body: bytes) -> str:
    """The first line of an exporter answer, printable and bounded, for a log line."""
    lines = body.decode("utf-8", "replace").splitlines()
    line = lines[0].strip() if lines else ""
    return "".join(ch if ch.isprintable() else "?" for ch in line[:200])


def _failure_cause(err: BaseException) -> str:
    """One bounded, printable line saying why a send failed, for a log line."""
    text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return "".join(ch if ch.isprintable() else " " for ch in text[:200])


class FailureWarnings:
    """When the sender warns that its reports fail. Pure: the caller passes the clock.

    Why at all: a report that cannot be sent loses the run's progress, and a notebook
    (whose pods may not reach the exporter: report/README.md) has no other sign of it.
    Why so rarely: the sender tries a report every few seconds while backing off, and
    an epoch end each epoch, so a line per failure would flood a training log for as
    long as the exporter is away. So the first failure warns at once, later ones at
    most every ``interval_seconds``, each naming how many failed since the last; an
    exporter reached after a warning is said once (``reached``). An exporter failing
    every other report gives at most a warning and a recovery per interval.
    """

    def __init__(self, interval_seconds: float = FAILURE_WARNING_INTERVAL_SECONDS) -> None:
        self.interval_seconds = interval_seconds
        self.warnings = 0  # warnings said so far
        self._last_warning = -math.inf  # monotonic
        self._unwarned = 0  # failures since the last warning
        self._warned = False  # a warning was said since the exporter was last reached

    def failed(self, now: float) -> int | None:
        """A report failed at ``now`` (monotonic seconds): how many reports a warning
        said now names (this one and the ones since the last warning), or None to say
        nothing now."""
        self._unwarned += 1
        if now - self._last_warning < self.interval_seconds:
            return None
        self._last_warning = now
        self.warnings += 1
        self._warned = True
        count, self._unwarned = self._unwarned, 0
        return count

    def reached(self) -> bool:
        """The exporter answered: True once after failures a warning told of (say that
        reports arrive again), else False."""
        warned, self._warned = self._warned, False
        return warned


class RequestDeadline:
    """When the request in progress must be over (monotonic seconds, ``at``): shared by
    a reporter's sender, which sets it for each report, and its connection's socket
    (``DeadlineSocket``), which times every operation out by it."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = math.inf

    def remaining(self) -> float:
        """Seconds left, else ``TimeoutError`` (what a socket timeout raises)."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        return left


class DeadlineSocket(socket.socket):
    """A socket whose every connect, send and read times out at its request's
    ``deadline``, not a timeout of its own each.

    Why: ``http.client`` applies its timeout to each socket operation, so an answer
    dribbled a byte at a time within it (a proxy, an overloaded node) held the sender
    for as long as the answer took, minutes, while every report after it waited or was
    dropped. Each operation is given the time left of the whole request instead.
    """

    __slots__ = ("deadline",)

    def connect(self, address: Any) -> None:
        self.settimeout(self.deadline.remaining())
        super().connect(address)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self.settimeout(self.deadline.remaining())  # sendall's timeout bounds all of it
        super().sendall(data, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self.settimeout(self.deadline.remaining())
        return super().send(data, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self.settimeout(self.deadline.remaining())
        return super().recv(bufsize, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.settimeout(self.deadline.remaining())  # the answer's reads (makefile)
        return super().recv_into(buffer, nbytes, flags)


def deadline_connection(
    deadline: RequestDeadline,
    address: tuple[str, int],
    timeout: object = None,
    source_address: tuple[str, int] | None = None,
) -> DeadlineSocket:
    """``socket.create_connection`` making a ``DeadlineSocket`` (``HTTPConnection``'s
    ``_create_connection``; its per-operation ``timeout`` is not used). The name lookup
    is the resolver's and not bounded by the deadline."""
    host, port = address
    error: OSError | None = None
    for family, kind, proto, _, target in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = DeadlineSocket(family, kind, proto)
        sock.deadline = deadline
        try:
            if source_address:
                sock.bind(source_address)
            sock.connect(target)
            return sock
        except OSError as err:
            sock.close()
            error = err
    raise error if error is not None else OSError(f"no address for {host!r}")


# Reporters started and not closed: closed at interpreter exit, within
# EXIT_FLUSH_SECONDS in all, and disabled in a forked child. Weak: a reporter left
# without ``end()`` (an interrupted notebook cell) is forgotten once its sender has
# gone idle (``sender_idle_seconds``) and nothing else refers to it.
EXIT_FLUSH_SECONDS = 1.0
# The least a sender thread waits for a report before it ends; the next report starts
# one again. Why 5 s: a training reporting every ``min_interval_seconds`` (1 s) keeps
# its sender, while a reporter left open after such reports costs no thread for longer.
SENDER_IDLE_SECONDS = 5.0
# The most it waits, however seldom its reporter reports: a reporter left open after
# slow reports (an epoch every minute) holds a thread no longer than this.
MAX_SENDER_IDLE_SECONDS = 120.0
# How many of a reporter's latest gaps between reports its sender's wait follows.
REPORT_GAPS_KEPT = 8


def sender_idle_seconds(gaps: Iterable[float]) -> float:
    """How long a sender thread waits for its reporter's next report before it ends:
    twice the longest of ``gaps`` (seconds between the reporter's latest reports) that
    a wait of at most ``MAX_SENDER_IDLE_SECONDS`` bridges, within
    [``SENDER_IDLE_SECONDS``, ``MAX_SENDER_IDLE_SECONDS``].

    Why it follows the gaps: a loop reporting every 6 s against a fixed 5 s wait
    started a thread and connected anew for every report. Twice the gap leaves room
    for a slower epoch; the longest gap, not the last, since a step and an epoch end
    come together (a gap of 0 between them). A gap no wait bridges (a notebook left
    for an hour) says nothing of the next one, and would only keep a thread waiting."""
    most = MAX_SENDER_IDLE_SECONDS
    bridged = [gap for gap in gaps if gap < most]
    return min(most, max(SENDER_IDLE_SECONDS, 2 * max(bridged, default=0.0)))


_OPEN: weakref.WeakSet[ProgressReporter] = weakref.WeakSet()
_OPEN_LOCK = threading.Lock()
_exit_deadline: float | None = None


def exit_deadline() -> float:
    """The monotonic time by which the exit hooks (this module's and the callbacks',
    ``keras._end_deferred_at_exit``) stop waiting for reports: ``EXIT_FLUSH_SECONDS``
    after the first of them asked, so the exit waits that long in all, not per hook."""
    global _exit_deadline
    if _exit_deadline is None:
        _exit_deadline = time.monotonic() + EXIT_FLUSH_SECONDS
    return _exit_deadline


def _close_at_exit() -> None:
    """Give every open reporter's queued reports what is left of ``exit_deadline`` in
    all (not each: ten open reporters would hold the exit ten times as long)."""
    deadline = exit_deadline()
    with _OPEN_LOCK:
        reporters = list(_OPEN)
    for reporter in reporters:
        with contextlib.suppress(Exception):
            reporter._close_by(deadline, grace_seconds=0.0)


atexit.register(_close_at_exit)


def _forget_in_forked_child() -> None:
    """In a child forked from a process with open reporters (``os.fork``, a helper):
    each is disabled there. The child has their queues but not their sender threads,
    and the run is the parent's to report. Their locks are made anew: a sender thread
    may have held one when the process forked, and none would release it in the child."""
    global _OPEN_LOCK, _OPEN, _exit_deadline
    _OPEN_LOCK = threading.Lock()
    _exit_deadline = None
    for reporter in list(_OPEN):
        with contextlib.suppress(Exception):
            reporter._forked()
    _OPEN = weakref.WeakSet()


def _rank_at_import_in_forked_child() -> None:
    """A forked child leaves the RANK its module had at import under its own pid: a
    child it spawns later (after setting its RANK: a forked worker numbering itself,
    then starting its trainer) reads it as its parent's, as it would a spawning
    importer's (``_rank_before_start``)."""
    os.environ[RANK_AT_IMPORT_VARIABLE] = f"{os.getpid()}:{_RANK_AT_IMPORT}"


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget_in_forked_child)
    os.register_at_fork(after_in_child=_rank_at_import_in_forked_child)


class ProgressReporter:
    """One training run's reporter. Make it with ``start()``; see the module doc."""

    def __init__(
        self,
        url: str | None = None,
        *,
        epochs: int | None = None,
        steps: int | None = None,
        steps_per_epoch: int | None = None,
        batch_size: int | None = None,
        container: str | None = None,
        timeout_seconds: float | None = None,
        min_interval_seconds: float = 1.0,
        queue_size: int = QUEUE_SIZE,
        source_address: str | None = None,
        run_id: str | None = None,
        initial_epoch: int | None = None,
        initial_step: int | None = None,
        any_rank: bool | None = None,
    ):
        # What every method reads, set first: whatever fails below leaves a disabled
        # reporter, never an exception in the training script.
        self.url: str | None = None
        self.run_id = secrets.token_hex(8)
        self.run_start = time.time()
        self.epochs: int | float | None = None
        self.steps: int | float | None = None
        self.steps_per_epoch: int | float | None = None
        self.batch_size: int | float | None = None
        self.container: str | None = None
        self.timeout_seconds = DEFAULT_TIMEOUT_SECONDS
        self.min_interval_seconds = DEFAULT_MIN_INTERVAL_SECONDS
        self.source_address: str | None = None
        self._epoch: int | float = 0
        self._step: int | float = 0
        self._pending_step: object = None  # step()'s latest, read when a report is made
        self._metrics: dict[str, float | None] = {}
        self._skipped_logged: set[str] = set()  # metric names already logged as left out
        self._ignored_logged: set[str] = set()  # progress fields already logged as unusable
        # the log levels a value beyond the plan was already logged at (``_at_most``),
        # and the values (``"epoch"``, ``"step"``) whose plan the caller restates itself
        # (``_restates_plan``)
        self._clamps_logged: set[int] = set()
        self._restated: frozenset[str] = frozenset()
        self._refusals: set[str] = set()  # refusal reasons already logged (sender thread)
        self._last_step_enqueue = float("-inf")
        # reports as (body, thinnable): step reports may be dropped while backing off
        self._queue: collections.deque[tuple[bytes, bool]] = collections.deque(maxlen=QUEUE_SIZE)
        self._cond = threading.Condition()
        self._closing = False
        self._inflight = False
        # a Retry-After's hold: no report is sent before this (monotonic); once it is
        # over only the newest queued report is, else the refused one (``_next_report``);
        # the refused report is kept while a hold is on (None: no hold)
        self._hold_until = 0.0
        self._refused: tuple[bytes, bool] | None = None
        # while ``close`` waits: its deadline (monotonic), and how long the last send
        # took (sender thread), which tell whether the backlog can still be sent in order
        self._flush_deadline = math.inf
        self._send_seconds = 0.0
        self._stats = {"sent": 0, "rejected": 0, "failed": 0, "dropped": 0, "ignored": 0}
        self._failure_warnings = FailureWarnings()  # sender thread only
        # after network failures, step reports are dropped until then (monotonic;
        # sender thread, kept across its idle ends)
        self._backoff_until = 0.0
        self._failures = 0
        # the sender: started by the first report queued, ended once idle for
        # ``sender_idle_seconds`` of the gaps between the latest reports queued (all
        # under ``_cond``: a report queued as it ends starts the next one)
        self._thread: threading.Thread | None = None
        self._kept = False  # the sender is kept past its idle time (``_keep_sender``)
        self._last_queued = math.nan  # monotonic
        self._gaps: collections.deque[float] = collections.deque(maxlen=REPORT_GAPS_KEPT)
        self._conn: http.client.HTTPConnection | None = None
        self._deadline = RequestDeadline()  # of the report being sent (``_send``)
        self._target: tuple[str, int, str] | None = None
        # whether torch.distributed's rank, once its group is initialized, still decides
        # if this process reports (``_other_group_rank``)
        self._group_rank_pending = False
        # The checks and the sender's start (see the module doc), under one try.
        try:
            if rerunning_parents_script():
                log.info(
                    "gpu-eta: a multiprocessing child running its parent's script again "
                    "(spawn, forkserver): its parent reports; progress not reported here"
                )
                return
            _warn_misspelt_settings()
            self.run_id = run_id_setting(run_id)
            self.steps_per_epoch = self._plan("steps_per_epoch", steps_per_epoch)
            self.epochs, self.steps = self._planned_totals(epochs, steps)
            self.batch_size = self._plan("batch_size", batch_size)
            # a resumed run starts where its checkpoint left it, not at 0/0 and then a jump
            if initial_epoch is not None:
                self._take_counter("epoch", initial_epoch)
            if initial_step is not None:
                self._take_counter("step", initial_step)
            elif self.steps_per_epoch:
                self._step = self._epoch * self.steps_per_epoch
            if container:
                self.container = container_setting(container)
            else:
                env_container = os.environ.get("GPU_ETA_CONTAINER") or None
                self.container = container_setting(env_container, "GPU_ETA_CONTAINER")
            self.timeout_seconds = timeout_setting(timeout_seconds)
            self.min_interval_seconds = interval_setting(min_interval_seconds)
            size = _count(queue_size, 1)
            self._queue = collections.deque(maxlen=int(size) if size else QUEUE_SIZE)
            self.source_address = source_address or os.environ.get("GPU_ETA_SOURCE_ADDRESS") or None
            every_rank = bool(any_rank or (any_rank is None and _env_true("GPU_ETA_ANY_RANK")))
            rank = other_rank()
            if rank and not every_rank:
                log.info(
                    "gpu-eta: %s=%s: only rank 0 reports (any_rank=True or GPU_ETA_ANY_RANK=1 "
                    "to report from this process too)",
                    *rank,
                )
                return
            # no launcher variable says: the process group's rank, once it is up
            self._group_rank_pending = not every_rank and not names_a_rank()
            if self._group_rank_pending and self._other_group_rank():
                return
            self.url = url if url is not None else exporter_url()
            if self.url is None:
                log.warning(
                    "gpu-eta: no exporter address (GPU_ETA_URL or HOST_IP/NODE_IP); progress not reported"
                )
                return
            try:
                self._target = exporter_target(self.url)
            except ValueError as err:
                # an '@' may end a password: neither the URL nor urllib's error (which
                # quotes a password's start as the port) is shown then
                shown = repr(self.url) if "@" not in self.url else "(not shown: it has an '@')"
                why = err if "@" not in self.url else "a user or password, never sent"
                log.warning("gpu-eta: bad exporter URL %s (%s); progress not reported", shown, why)
                self.url = None
                return
            with _OPEN_LOCK:
                _OPEN.add(self)
        except Exception as err:  # a bug here must not stop the training job
            self._target = None
            log.warning("gpu-eta: reporter not started (%r); progress not reported", err)

    # -- public API: cheap, never raises ---------------------------------------------

    @property
    def enabled(self) -> bool:
        return self._target is not None and not self._silenced

    _silenced = False  # another rank's reporter, found once its process group was up

    @property
    def stats(self) -> dict[str, int]:
        """Reports ``sent`` (2xx), ``rejected`` (any other answer: 4xx, 5xx; the reason
        is logged once), ``failed`` (network), ``dropped`` (never sent: queue full, a
        step report while backing off after failures, superseded by a newer one when a
        ``Retry-After`` hold ends or while ``close`` waits for a backlog it cannot send in
        time, or still queued when ``close``'s wait ends).
        Counted per answer: a refused report sent again after its hold counts again. Also
        ``ignored``: progress values left out as unusable, and calls that failed
        inside the reporter (a bug; the call did nothing)."""
        with self._cond:
            return dict(self._stats)

    def begin(self) -> None:
        """Announce the run (``start()`` calls this): a new run id for the exporter."""
        try:
            self._enqueue("start")
        except Exception:  # never into the training script
            self._count_ignored()

    def step(self, step: int, *, metrics: Mapping[str, Any] | None = None, **values: Any) -> None:
        """``step`` steps of the run done (global step). Thinned to one report per interval.
        Never goes back: a lower step than the one held is ignored (a framework calling
        from several threads, Keras 3's batch hooks, may call out of order); thread-safe.

        Metrics are keyword arguments, or a mapping in ``metrics`` (for names that are no
        identifiers or that clash with a parameter: a framework's logs holding a
        ``step``). The step and the metrics are read only for the reports that are sent
        (``float(cuda_tensor)`` syncs the GPU), so pass plain numbers where possible.
        """
        try:
            with self._cond:  # callers on several threads (Keras 3's batch hooks)
                if _step_after(step, self._pending_step):
                    self._pending_step = step
                # read and set under the lock: a thread that read the clock before
                # another set a later time skipped its report at any interval, 0 too
                now = time.monotonic()
                due = now - self._last_step_enqueue >= self.min_interval_seconds
                if due:
                    self._last_step_enqueue = now
            if due:
                self._take_metrics(metrics, values)
                self._enqueue("progress", thinnable=True)
        except Exception:  # never into the training loop
            self._count_ignored()

    def epoch_end(
        self,
        epoch: int,
        step: int | None = None,
        *,
        metrics: Mapping[str, Any] | None = None,
        **values: Any,
    ) -> None:
        """``epoch`` epochs done (1 after the first). Always reported. Metrics as for
        ``step``."""
        try:
            with self._cond:  # as ``step()``, which another thread may be in
                self._take_step()
                self._take_counter("epoch", epoch)
                if step is not None:
                    self._take_counter("step", step)
                elif self.steps_per_epoch:
                    self._step = max(self._step, self._epoch * self.steps_per_epoch)
                self._take_metrics(metrics, values)
                self._enqueue("progress")
        except Exception:
            self._count_ignored()

    def plan(self, epochs: int | None = None, steps: int | None = None) -> None:
        """Change the run's planned totals while it runs, reported at once (always
        tried, like an epoch end): a trainer that learns its length only by training
        (Lightning's manual optimization, ``lightning.py``).

        A total given replaces the one held, raised or lowered (when the forecaster
        reads a changed plan: docs/progress.md, "Wire format"). None or 0 keeps it: on the wire a
        report that leaves a total out keeps it, so a total once sent cannot be taken
        back (state none until it is known). ``epochs`` without ``steps`` plans
        ``epochs × steps_per_epoch`` steps when that is known, as at ``start()``, so
        the step is not held at the old plan. A bad value is ignored as at ``start()``.
        """
        try:
            new_epochs, new_steps = self._planned_totals(epochs, steps)
            if new_epochs is not None:
                self.epochs = new_epochs
            if new_steps is not None:
                self.steps = new_steps
            self._enqueue("progress")
        except Exception:
            self._count_ignored()

    def _planned_totals(
        self, epochs: object, steps: object
    ) -> tuple[int | float | None, int | float | None]:
        """The planned epochs and steps checked (``_plan``), the steps
        ``epochs × steps_per_epoch`` where none is given and both are known: what
        ``start()`` and ``plan()`` state."""
        epochs = self._plan("epochs", epochs)
        steps = self._plan("steps", steps)
        if steps is None and epochs and self.steps_per_epoch:
            steps = self._plan("steps", epochs * self.steps_per_epoch)
        return epochs, steps

    def end(
        self,
        flush_timeout_seconds: float | None = None,
        *,
        metrics: Mapping[str, Any] | None = None,
        **values: Any,
    ) -> None:
        """Final report, then wait (at most ``flush_timeout_seconds``, by default the
        send timeout) until it is sent and stop the sender. Metrics as for ``step``.

        Call it when training has finished, not when it failed (``close`` then): for a
        run started without ``epochs`` or ``steps`` the exporter takes the epoch and
        step of the end as the run's totals, so the forecaster learns the run's
        duration and forecasts the job's next runs from it."""
        try:
            self._take_metrics(metrics, values)
            self._enqueue("end")
        except Exception:
            self._count_ignored()
        finally:  # whatever failed above, the sender stops
            self.close(flush_timeout_seconds)

    def close(self, flush_timeout_seconds: float | None = None) -> None:
        """Send what is queued within the timeout (by default the send timeout), then
        stop the thread."""
        try:
            self._close(flush_timeout_seconds)
        except Exception:
            self._count_ignored()

    def _close(self, flush_timeout_seconds: object) -> None:
        # a bad value (not a number, NaN, negative, absurd) must not raise at the end of
        # training, nor leave the sender running: the send timeout instead
        wait = (
            self.timeout_seconds
            if flush_timeout_seconds is None
            else _seconds_setting(
                flush_timeout_seconds,
                "flush_timeout_seconds",
                self.timeout_seconds,
                lambda seconds: 0 <= seconds <= MAX_TIMEOUT_SECONDS,
                f" in [0, {MAX_TIMEOUT_SECONDS:g}]",
            )
        )
        self._close_by(time.monotonic() + wait, grace_seconds=0.1)

    def _close_by(self, deadline: float, grace_seconds: float) -> None:
        """Wait until what is queued is sent or ``deadline`` (monotonic) passes, stop the
        sender, and give its thread ``grace_seconds`` past the deadline to end, but never
        past the exit deadline once the exit hooks run (``exit_deadline``): the Keras
        callback's held end closes with the usual grace at exit, and a sender stuck in a
        send took all of it, holding the exit 1.1 s, not the 1 s it is given.

        Meanwhile the sender sends the newest report next once the backlog would not
        fit before the deadline (``_next_report``): each report carries the whole state,
        and ``end()``'s is the one that matters. What is still queued at the deadline is
        counted dropped now, not by a sender thread that may never get to it."""
        if self._target is None:
            return
        with self._cond:
            self._flush_deadline = min(self._flush_deadline, deadline)
            self._cond.notify_all()
            while (
                self._queue or self._refused is not None or self._inflight
            ) and time.monotonic() < deadline:
                self._cond.wait(timeout=max(0.0, deadline - time.monotonic()))
            self._closing = True
            self._stats["dropped"] += len(self._queue)
            self._queue.clear()
            self._refused = None  # refused: counted then, not again
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            until = deadline + grace_seconds
            if _exit_deadline is not None:  # exiting: no grace past what the exit gives
                until = max(deadline, min(until, _exit_deadline))
            thread.join(timeout=max(0.0, until - time.monotonic()))
        with _OPEN_LOCK:
            _OPEN.discard(self)

    def __enter__(self) -> ProgressReporter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        """``end()`` when the block finished, ``close()`` when it raised: an end says
        the run finished, and would make a crashed run without a plan look completed
        at the epoch it crashed in (see ``end``)."""
        if exc_type is None:
            self.end()
        else:
            self.close()

    # -- internals -------------------------------------------------------------------

    def _count_ignored(self) -> None:
        """Count a call or value the reporter could not use (``stats["ignored"]``)."""
        try:
            with self._cond:
                self._stats["ignored"] += 1
        except Exception:
            pass

    def _ignore(self, name: str, value: object, minimum: float) -> None:
        """Count an unusable progress value and say so, once per field."""
        self._count_ignored()
        if name not in self._ignored_logged:
            self._ignored_logged.add(name)
            log.warning(
                "gpu-eta: %s=%s is not a number in [%g, %g] (the exporter would refuse "
                "it); not reported, nor logged again",
                name,
                _short_repr(value),
                minimum,
                MAX_NUMBER,
            )

    def _plan(self, name: str, value: object) -> int | float | None:
        """A planned total (``epochs``, ``steps``, ``batch_size``...) as the exporter takes
        it, else None: 0 and None say "no plan", anything else unusable is ignored."""
        if value is None:
            return None
        number = _count(value, 0)
        if number == 0:
            return None
        if number is None or number < MIN_PLANNED:
            self._ignore(name, value, MIN_PLANNED)
            return None
        return number

    def _take_counter(self, name: str, value: object) -> None:
        """Set the ``epoch`` or ``step`` reached; an unusable value keeps the last one."""
        number = _count(value, 0)
        if number is None:
            self._ignore(name, value, 0)
        elif name == "epoch":
            self._epoch = number
        else:
            self._step = number

    def _take_step(self) -> None:
        """Take ``step()``'s latest value, if any came since the last report."""
        pending, self._pending_step = self._pending_step, None
        if pending is not None and _step_after(pending, self._step):
            self._take_counter("step", pending)

    def _take_metrics(self, metrics: Mapping[str, Any] | None, values: Mapping[str, Any]) -> None:
        """Fold ``metrics`` (a mapping, else ignored) and ``values`` into what every later
        report carries (``merge_metrics``).

        Each left-out name is logged once at INFO: it is expected for some (HF's
        ``total_flos``), and a warning at the end of every training would be noise.
        """
        if isinstance(metrics, Mapping) and metrics:
            values = {**metrics, **values}
        if not values:
            return
        self._metrics, skipped = merge_metrics(self._metrics, values)
        for name, why in skipped:
            if name not in self._skipped_logged and len(self._skipped_logged) < 64:
                self._skipped_logged.add(name)
                log.info("gpu-eta: metric %r not reported (%s)", name, why)

    def _log_refusal(self, status: int, body: bytes) -> None:
        """Log the exporter's one-line reason for refusing a report, once per reason.

        Once, not per report: every report carries the whole state, so a reason that
        holds for one (a bad run id, a reused run) usually holds for all that follow.
        Numbers are ignored when comparing reasons (``epoch 9 > epochs 5`` and
        ``epoch 10 > epochs 5`` are one), and at most ``MAX_LOGGED_REFUSALS`` distinct
        ones are logged; ``stats["rejected"]`` counts every refused report.
        """
        reason = _answer_reason(body)
        key = f"{status} {_NUMBERS.sub('#', reason)}"
        if key in self._refusals:
            return
        if len(self._refusals) >= MAX_LOGGED_REFUSALS:
            if len(self._refusals) == MAX_LOGGED_REFUSALS:
                self._refusals.add("")  # one note, then silence
                log.warning("gpu-eta: further refusal reasons are not logged (see stats)")
            return
        self._refusals.add(key)
        log.warning(
            "gpu-eta: exporter refused a progress report (%d): %s; "
            "not logged again for this reason",
            status,
            reason or "no reason given",
        )

    def _body(self, event: str) -> bytes:
        body: dict[str, Any] = {
            "run_id": self.run_id,
            "run_start": round(self.run_start, 3),
            "event": event,
            "epoch": self._epoch,
            "step": self._step,
        }
        if self.epochs:
            body["epochs"] = self.epochs
            body["epoch"] = self._at_most("epoch", self._epoch, self.epochs)
        if self.steps:
            body["steps"] = self.steps
            body["step"] = self._at_most("step", self._step, self.steps)
        if self.batch_size:
            body["batch_size"] = self.batch_size
        if self.container:
            body["container"] = self.container
        if self._metrics:
            body["metrics"] = dict(self._metrics)
        return json.dumps(body, separators=(",", ":")).encode()

    def _at_most(self, name: str, value: int | float, planned: int | float) -> int | float:
        """``value`` (the epoch or step reached) at most its ``planned`` total, as sent:
        the exporter refuses a report beyond its plan. A loop training past the plan it
        stated then reads as finished while it trains on, so the first value clamped is
        warned of, once for the reporter: the plan stays short until restated. Where the
        caller restates that plan itself (``_restates_plan``: a framework callback at an
        epoch's end) its user has nothing to do: logged at DEBUG only, once."""
        if value <= planned:
            return value
        level = logging.DEBUG if name in self._restated else logging.WARNING
        if level not in self._clamps_logged:
            self._clamps_logged.add(level)
            advice = (
                "until the callback states the plan again"
                if level == logging.DEBUG
                else "the run looks finished while it trains on (state its plan with plan())"
            )
            log.log(
                level,
                "gpu-eta: %s %s is beyond the plan (%s %ss), reported as %s: %s; not logged again",
                name,
                _short_repr(value),
                _short_repr(planned),
                name,
                _short_repr(planned),
                advice,
            )
        return planned

    def _restates_plan(self, *names: str) -> None:
        """Tell the reporter that its caller restates the plan of these values
        (``"epoch"``, ``"step"``) itself when they pass it: the Keras callback states
        the steps again at the end of an epoch longer than the plan assumed, so the
        clamp warning's advice (``plan()``) is nothing its user can follow, and is
        logged at DEBUG (``_at_most``). A direct client user keeps the warning."""
        self._restated = frozenset(names)

    def _enqueue(self, event: str, thinnable: bool = False) -> None:
        """Queue a report of the current state; ``thinnable`` for ``step()``'s, which
        the sender drops while it backs off after a network failure (the others, the
        start, epoch ends and the end, are tried whatever the backoff)."""
        if self._target is None or self._closing:
            return
        if self._group_rank_pending and self._other_group_rank():
            return
        with self._cond:  # the step taken and queued in one order (``step``'s threads)
            now = time.monotonic()
            if not math.isnan(self._last_queued):
                self._gaps.append(now - self._last_queued)
            self._last_queued = now
            self._take_step()
            data = (self._body(event), thinnable)
            if len(self._queue) == self._queue.maxlen:
                self._stats["dropped"] += 1
            self._queue.append(data)
            self._cond.notify_all()
            self._start_sender()

    def _start_sender(self) -> None:
        """Start a sender thread unless one runs: none yet, or it went idle
        (``_next_report``). The caller holds ``_cond``."""
        if self._thread is None and self._target is not None and not self._closing:
            thread = threading.Thread(target=self._run, name="gpu-eta-report", daemon=True)
            thread.start()  # set once started: one that failed to is tried again
            self._thread = thread

    def _keep_sender(self, keep: bool = True) -> None:
        """Keep the sender thread running while ``keep``, however long no report comes
        (starting one if none runs), then let it idle out again (``False``).

        Why: CPython 3.12.0 and 3.12.1 refuse to start a thread in an exit hook ("can't
        create new thread at interpreter shutdown"), so a report queued only at exit
        (the Keras callback's held end, ``keras._end_deferred_at_exit``) is lost if its
        sender went idle, and ``close`` waits the exit's whole second for it. The Keras
        callback keeps the sender of the run whose end it holds back (at most
        ``LOOP_END_GRACE_SECONDS``): at exit the end needs no new thread."""
        try:
            with self._cond:
                self._kept = keep
                if keep:
                    self._start_sender()
                self._cond.notify_all()
        except Exception:
            self._count_ignored()

    def _forked(self) -> None:
        """Disable this reporter in a forked child (``_forget_in_forked_child``): no
        sender, nothing queued, nothing sent; a fresh lock. The connection is left to
        the parent (closing it here would not reach the parent's socket, but its
        object is the parent's)."""
        self._cond = threading.Condition()
        self._thread = None
        self._conn = None
        self._target = None
        self._queue.clear()
        self._refused = None
        self._closing = True

    def _other_group_rank(self) -> bool:
        """Whether this process turned out not to be rank 0 of an initialized
        ``torch.distributed`` group (``torch_rank``), read while no launcher variable
        names a rank: a ``torch.multiprocessing.spawn`` script passes each worker its
        rank and sets none. Read at each report until the group is up, since a reporter
        may start before ``init_process_group``; then decided for good. Another rank's
        reporter then stops: what it queued is dropped (counted), nothing more is sent,
        and one INFO line says so."""
        rank = torch_rank()
        if rank is None:
            return False
        self._group_rank_pending = False
        if rank == 0:
            return False
        self._silenced = True
        with self._cond:
            self._stats["dropped"] += len(self._queue)
            self._queue.clear()
            self._closing = True
            self._cond.notify_all()
        log.info(
            "gpu-eta: torch.distributed rank %d: only rank 0 reports (any_rank=True or "
            "GPU_ETA_ANY_RANK=1 to report from this process too)",
            rank,
        )
        return True

    def _next_report(self) -> tuple[bytes, bool] | None:
        """The next report to send, waiting for one (and out any hold); None once
        closing, or once none came for ``sender_idle_seconds``: the sender thread then
        ends, and says so in ``_thread`` under ``_cond`` (the caller holds it), so that
        the next report queued starts another (``_enqueue``). A reporter left open
        without ``end()`` (an interrupted notebook cell) thus costs no thread. Either
        way the connection is dropped here, under ``_cond``, before another sender can
        start and use it.

        After a hold only the newest queued report is sent: each carries the whole
        state, so the older ones are superseded (counted dropped) rather than sent as a
        burst that would be refused again. So too while ``close`` waits (``end()``),
        once the queued reports, at the last send's duration each, would not all be
        sent before its deadline: ``end()``'s report, the newest, goes next rather than
        be lost behind a backlog sent in order to a slow exporter. With nothing queued, the refused report is
        sent again: it is the current state still (``end()``'s, with its final
        metrics), and ``close`` waits for it within its flush timeout. Superseded, it is
        not counted again (its refusal was). Closing during a hold drops what is
        queued: ``close`` waited its flush timeout for it, and training must not wait
        longer.
        """
        idle_since = time.monotonic()
        while True:
            now = time.monotonic()
            wait = self._hold_until - now
            if (self._queue or self._refused is not None) and wait <= 0:
                refused, self._refused = self._refused, None
                if refused is None and len(self._queue) > 1:
                    left = self._flush_deadline - now
                    if left < len(self._queue) * self._send_seconds:  # the newest next
                        refused = self._queue.popleft()  # superseded, as after a hold
                        self._stats["dropped"] += 1
                if refused is None:  # no hold, and the backlog fits
                    return self._queue.popleft()
                if not self._queue:
                    return refused
                newest = self._queue.pop()
                self._stats["dropped"] += len(self._queue)
                self._queue.clear()
                return newest
            if self._closing:
                self._stats["dropped"] += len(self._queue)
                self._queue.clear()
                self._refused = None
                self._drop_connection()
                return None
            if self._queue or self._refused is not None:
                self._cond.wait(timeout=wait)
                idle_since = time.monotonic()
                continue
            if self._kept:  # no idle end (``_keep_sender``): until a report or close
                self._cond.wait()
                idle_since = time.monotonic()
                continue
            idle = sender_idle_seconds(self._gaps) - (now - idle_since)
            if idle <= 0:
                self._thread = None
                self._drop_connection()
                return None
            self._cond.wait(timeout=idle)

    def _hold(self, seconds: float, refused: tuple[bytes, bool]) -> None:
        """Send nothing for ``seconds`` (an answer's ``Retry-After`` to ``refused``;
        sender thread), then the newest queued report, else ``refused`` again."""
        with self._cond:
            self._hold_until = time.monotonic() + seconds
            self._refused = refused

    def _run(self) -> None:
        while True:
            with self._cond:
                report = self._next_report()
                if report is None:
                    break
                self._inflight = True
            try:
                cause = ""
                if report[1] and time.monotonic() < self._backoff_until:
                    result = "dropped"
                else:
                    sending = time.monotonic()
                    result, cause = self._send(report)
                    self._send_seconds = time.monotonic() - sending
                if result == "failed":  # 0.5 s, doubling to 30 s
                    self._failures += 1
                    self._backoff_until = time.monotonic() + min(
                        30.0, 0.5 * 2 ** min(self._failures - 1, 6)
                    )
                elif result != "dropped":
                    self._failures = 0
            except Exception as err:  # defensive: the sender thread must not die
                result, cause = "failed", f"reporter error {_failure_cause(err)}"
            self._log_reachability(result, cause)
            with self._cond:
                self._stats[result] += 1
                self._inflight = False
                self._cond.notify_all()
        # Nothing after the loop touches the connection: ``_next_report`` drops it under
        # ``_cond``. Once ``_thread`` is None a report queued meanwhile starts another
        # sender, and the connection would be that sender's, mid-send.

    def _log_reachability(self, result: str, cause: str) -> None:
        """Warn that reports fail, and say when they arrive again, as seldom as
        ``FailureWarnings`` decides (sender thread). Any answer, a refusal too, is the
        exporter reached; a report dropped unsent says nothing either way."""
        warnings = self._failure_warnings
        try:
            count = warnings.failed(time.monotonic()) if result == "failed" else None
            if count is not None:
                if warnings.warnings == 1:
                    log.warning(
                        "gpu-eta: cannot send progress to %s (%s); progress is not "
                        "reported until it can (warned again at most every %g min; told "
                        "when reports arrive again)",
                        self.url,
                        cause,
                        warnings.interval_seconds / 60,
                    )
                else:
                    log.warning(
                        "gpu-eta: still cannot send progress to %s (%s): %d reports failed "
                        "since the last warning",
                        self.url,
                        cause,
                        count,
                    )
            elif result not in ("failed", "dropped") and warnings.reached():
                log.info("gpu-eta: reaching the exporter at %s again; progress reported", self.url)
        except Exception:  # a log handler's failure must not stop the sender
            pass

    def _send(self, report: tuple[bytes, bool]) -> tuple[str, str]:
        """POST one report (its body, thinnable): ``sent``, ``rejected`` or ``failed``,
        and for ``failed`` the cause in one line (else "").

        The send timeout bounds each attempt whole, connect, send and answer together
        (``DeadlineSocket``). Retried once, on a new connection, only when a kept-alive
        connection turns out closed by the exporter (it closes idle ones after 10 s):
        the report did not reach it. After a timeout, or on a new connection, it may
        have arrived, or the exporter is away: a retry would only double the wait, or
        the report.
        """
        assert self._target is not None
        host, port, path = self._target
        data = report[0]
        for _ in range(2):
            reused = self._conn is not None
            self._deadline.at = time.monotonic() + self.timeout_seconds
            try:
                if self._conn is None:
                    source = (self.source_address, 0) if self.source_address else None
                    self._conn = http.client.HTTPConnection(
                        host, port, timeout=self.timeout_seconds, source_address=source
                    )
                    self._conn._create_connection = functools.partial(  # type: ignore[attr-defined]
                        deadline_connection, self._deadline
                    )
                self._conn.request(
                    "POST", path, body=data, headers={"Content-Type": "application/json"}
                )
                resp = self._conn.getresponse()
                answer = resp.read(MAX_ANSWER_BYTES)
                if resp.will_close or not resp.isclosed():  # not read to its end: unusable
                    self._drop_connection()
                if 200 <= resp.status < 300:
                    return "sent", ""
                self._log_refusal(resp.status, answer)
                if resp.status in (429, 503):
                    wait = retry_after_seconds(resp.getheader("Retry-After"))
                    if wait:
                        self._hold(wait, report)
                return "rejected", ""
            # ValueError: a host name the resolver cannot encode ("a..b": UnicodeError)
            except (OSError, http.client.HTTPException, ValueError) as err:
                self._drop_connection()
                if not (reused and isinstance(err, ConnectionError)):
                    return "failed", _failure_cause(err)
        return "failed", "connection closed by the exporter"

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def check_options(options: Mapping[str, object], caller: str) -> None:
    """Raise ``TypeError`` naming the first of ``options`` that ``start()`` does not
    take, and the keyword meant where one is close (``timeout`` → ``timeout_seconds``).

    The one exception this package raises, and only where it is called, before any
    training: a misspelt keyword is a programming error, as it is to any Python
    function. Taken silently, it would leave reporting off (a callback's ``start`` at
    ``on_train_begin``, whose error no hook may raise) or its setting unused.
    """
    known = set(inspect.signature(start).parameters) | set(
        inspect.signature(ProgressReporter.__init__).parameters
    )
    known -= {"self", "options"}
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{caller} got an unexpected keyword argument {name!r}{hint}")


def start(
    epochs: int | None = None,
    steps_per_epoch: int | None = None,
    batch_size: int | None = None,
    *,
    steps: int | None = None,
    url: str | None = None,
    container: str | None = None,
    **options: Any,
) -> ProgressReporter:
    """Begin a run and announce it; returns the reporter (disabled if no exporter).

    Each call is a new run with a new random ``run_id``: a notebook that trains
    twice shows two runs, never one spliced series. A run resumed from a checkpoint
    passes ``initial_epoch`` (epochs done) and ``initial_step`` (by default
    ``initial_epoch × steps_per_epoch``): its first report then says where it starts.
    ``options`` are the other ``ProgressReporter`` arguments; one it does not take is a
    ``TypeError`` (``check_options``), the only exception ``start`` raises.
    """
    check_options(options, "start()")
    reporter = ProgressReporter(
        url,
        epochs=epochs,
        steps=steps,
        steps_per_epoch=steps_per_epoch,
        batch_size=batch_size,
        container=container,
        **options,
    )
    reporter.begin()
    return reporter
