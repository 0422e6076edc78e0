"""The event loop `pgfeed serve` (and the integration suite's service) runs on."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop
from pydantic import ValidationError

from pgfeed.config import Settings
from pgfeed.runtime import new_event_loop


@pytest.mark.parametrize(("kind", "expected"), [("auto", uvloop.Loop), ("uvloop", uvloop.Loop),
                                                ("asyncio", asyncio.BaseEventLoop)])
def test_the_configured_loop_runs_coroutines(kind: str, expected: type) -> None:
    loop = new_event_loop(Settings(event_loop=kind).event_loop)  # type: ignore[arg-type]
    try:
        assert isinstance(loop, expected)
        assert kind == "asyncio" or not isinstance(loop, asyncio.BaseEventLoop)
        assert loop.run_until_complete(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        loop.close()


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an interpreter without it sees on import
    loop = new_event_loop("auto")
    try:
        assert isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()
    with pytest.raises(RuntimeError, match="uvloop is not installed"):
        new_event_loop("uvloop")


def test_an_unknown_loop_is_a_settings_error() -> None:
    with pytest.raises(ValidationError, match="event_loop"):
        Settings(event_loop="trio")  # type: ignore[arg-type]
