"""``ast.parse`` with nothing else parsing meanwhile, in the test processes.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state: a
parse that runs while another parse is converting its tree leaves the first one's
count wrong, and it raises ``SystemError: AST constructor recursion depth mismatch``
(python/cpython gh-106905 and its threaded cousins). Python code runs inside a
conversion only through the garbage collector (Hypothesis' gc callback, a finalizer),
which may switch threads or parse itself. 3.11's traceback module parses each line it
underlines, so a server thread of one test printing a traceback could fail the next
test's ``ast.parse`` in the same worker (a CI run failed tests/ops/test_rbac.py so).

So each parse runs with the collector off (nothing runs inside its conversion, in this
thread or by a switch to another) and under one lock (no two threads convert at once):
reentrant, as a parse may be nested in another's caller; made anew in a forked child,
which would otherwise inherit it held by a thread that does not exist there.
"""

from __future__ import annotations

import ast
import gc
import os
import threading
from typing import Any

_lock = threading.RLock()


def _new_lock() -> None:
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_new_lock)


def _parse(*args: Any, **kwargs: Any) -> Any:
    with _lock:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return _UNGUARDED(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()


_UNGUARDED = getattr(ast.parse, "__wrapped__", ast.parse)
_parse.__wrapped__ = _UNGUARDED  # type: ignore[attr-defined]


def serialise_ast_parse() -> None:
    """Route ``ast.parse`` (callers look it up on the module at each call: pytest's
    assertion rewriter, ``traceback``, the tests) through ``_parse``; once."""
    ast.parse = _parse  # type: ignore[assignment]
