"""``ast.parse`` one thread at a time in the test processes.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state: a
parse in one thread that runs while another thread's parse is converting its tree
(Hypothesis' gc callback lets threads switch in the middle of one) leaves the first
one's count wrong, and it raises ``SystemError: AST constructor recursion depth
mismatch`` (python/cpython gh-106905 and its threaded cousins). 3.11's traceback module
parses each line it underlines, so a server thread of one test printing a traceback
could fail the next test's ``ast.parse`` in the same worker (a CI run failed
tests/ops/test_rbac.py so). Serialised, no parse runs inside another's conversion; a
reentrant lock, as a gc callback in the parsing thread may parse too.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.RLock()
_UNGUARDED = ast.parse


def _parse(*args: Any, **kwargs: Any) -> Any:
    with _LOCK:
        return _UNGUARDED(*args, **kwargs)


def serialise_ast_parse() -> None:
    """Route ``ast.parse`` (callers look it up on the module at each call: pytest's
    assertion rewriter, ``traceback``, the tests) through one lock."""
    ast.parse = _parse  # type: ignore[assignment]
