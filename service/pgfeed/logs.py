"""Logs an operator can use: one line per event that matters, as text or as JSON lines for log
collectors (``--log-format json``), and never a secret.

Every record passes a ``SecretFilter`` on the handler, whatever logger wrote it (uvicorn's and
grpc's too): DSN passwords (key=value and URI forms), the configured bearer tokens and the
passwords of the feeds' DSNs are replaced by ``***`` before the line is formatted. Fields given
as ``extra={"feed": …, "event": …}`` become JSON keys.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

import orjson

__all__ = ["TEXT_FORMAT", "JsonFormatter", "SecretFilter", "configure_logging", "known_secrets"]

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_URI_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s,;)\"]+)", re.IGNORECASE)
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class SecretFilter(logging.Filter):
    """Rewrites each record's message with secrets masked (never drops a record)."""

    def __init__(self, secrets: Callable[[], Iterable[str]] = lambda: ()) -> None:
        super().__init__()
        self._secrets = secrets

    def mask(self, text: str) -> str:
        for secret in self._secrets():
            if secret and len(secret) >= 4:  # a one-letter "secret" would shred every line
                text = text.replace(secret, "***")
        return _KV_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1***@", text))

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.mask(message)
        if masked != message or record.args:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:  # tracebacks quote messages too
            record.exc_text = self.mask(logging.Formatter().formatException(record.exc_info))
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, self.mask(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``ts``, ``level``, ``logger``, ``message``, the record's extra
    fields, and ``exception`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_text:
            out["exception"] = record.exc_text
        elif record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def known_secrets(settings: Any, supervisor: Any) -> list[str]:
    """The configured tokens and the passwords of every feed's DSN (read at each record, so a
    feed created later is covered)."""
    from psycopg.conninfo import conninfo_to_dict

    out = [t.get_secret_value() for t in [*settings.read_tokens, *settings.admin_tokens]]
    store: Any = getattr(settings, "store", None)
    store_text = store.get_secret_value() if hasattr(store, "get_secret_value") else store
    if store_text:
        try:
            password = conninfo_to_dict(store_text).get("password")
        except Exception:  # noqa: BLE001 - unparsable: the regexes remain
            password = None
        if password:
            out.append(str(password))
    for name in supervisor.names():
        try:
            password = conninfo_to_dict(supervisor.spec(name).dsn).get("password")
        except Exception:  # noqa: BLE001, S112  # deleted meanwhile or unparsable: regexes remain
            continue
        if password:
            out.append(str(password))
    return out


def configure_logging(level: str = "INFO", fmt: LogFormat = "text", *,
                      secrets: Callable[[], Iterable[str]] = lambda: (),
                      stream: TextIO | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one on ``stream`` (stderr) in ``fmt``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(SecretFilter(secrets))
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
