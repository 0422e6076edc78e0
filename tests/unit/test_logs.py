"""The log handler masks secrets in every part of a record (message, arguments, extra fields,
tracebacks), in both formats, whoever logs."""

import io
import json
import logging

import pytest

from pgfeed.logs import configure_logging


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_secrets_never_reach_the_stream(fmt: str) -> None:
    stream = io.StringIO()
    handler = configure_logging("INFO", fmt, secrets=lambda: ["tok-abcdef"], stream=stream)
    try:
        log = logging.getLogger("pgfeed.test")
        log.info("dsn %s", "host=db password=hunter2 user=x", extra={"feed": "f",
                                                                       "reason": "postgresql://u:pw1@db/x"})
        log.warning("token tok-abcdef refused; password = 'a b c'")
        try:
            raise RuntimeError("connect failed: postgres://cdc:pw2@db:5432/app")
        except RuntimeError:
            log.exception("oops")
        logging.getLogger("some.library").info("password=pw3")
    finally:
        logging.getLogger().removeHandler(handler)
    text = stream.getvalue()
    for secret in ("hunter2", "pw1", "pw2", "pw3", "tok-abcdef", "a b c"):
        assert secret not in text, (secret, text)
    assert "password=***" in text and "postgres://cdc:***@db:5432/app" in text
    if fmt == "json":
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert [e["level"] for e in lines] == ["INFO", "WARNING", "ERROR", "INFO"]
        assert lines[0]["feed"] == "f" and lines[0]["reason"] == "postgresql://u:***@db/x"
        assert "RuntimeError" in lines[2]["exception"]
