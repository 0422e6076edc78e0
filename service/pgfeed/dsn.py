"""DSN handling at the edges: masking secrets for logs, status and errors."""

from __future__ import annotations

import re

from psycopg.conninfo import conninfo_to_dict, make_conninfo

_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@]*:)[^@]*@")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def mask_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***``; safe to log and to serve."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # unparsable: scrub textually rather than echo it
        return _KV_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1***@", dsn))
    if "password" in params:
        params["password"] = "***"
    return make_conninfo(**{k: str(v) for k, v in params.items()})


def scrub(text: str, dsn: str) -> str:
    """Remove a DSN's password from an error message that may quote it."""
    try:
        password = conninfo_to_dict(dsn).get("password")
    except Exception:
        password = None
    if password:
        text = text.replace(str(password), "***")
    return _KV_PASSWORD.sub(r"\1***", text)
