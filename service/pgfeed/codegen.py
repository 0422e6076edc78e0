"""The one place the read path generates Python: per-relation row functions, compiled once per
relation shape, that name themselves in tracebacks.

``define`` compiles a function's source under a file name that says what it is
(``<pgfeed generated: wire_row public.orders>``) and registers that source with ``linecache``,
so a traceback through it shows the generated line, not ``<string>``. Generated from column
positions, OIDs and constants only: no value from a row is ever part of the source."""

from __future__ import annotations

import hashlib
import linecache
from collections.abc import Callable
from typing import Any

__all__ = ["define"]

def define(name: str, lines: list[str], env: dict[str, Any], what: str) -> Callable[..., Any]:
    """Compile ``lines`` (one ``def name(...)``) in ``env`` and return the function ``name``;
    ``what`` says for whom it was generated (a relation, a column list)."""
    source = "\n".join(lines) + "\n"
    digest = hashlib.blake2s(source.encode(), digest_size=4).hexdigest()  # one entry per source
    filename = f"<pgfeed generated {digest}: {name} for {what}>"
    code = compile(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(code, env)  # noqa: S102 - generated from positions, OIDs and constants only
    fn: Callable[..., Any] = env[name]
    return fn
