"""``pgfeed feeds create``'s option flags come from the API's FeedOptionsIn: every option has a
flag, and what the flags give is a body the API accepts."""

from __future__ import annotations

import pytest

from pgfeed.cli import build_parser
from pgfeed.http_api.schemas import FeedOptionsIn

ALL = ["--toast", "reselect", "--snapshot", "export", "--no-messages", "--two-phase", "--no-streaming",
       "--no-partition-root", "--heartbeat-seconds", "0.5", "--retention-hours", "none",
       "--retention-bytes", "1000", "--retention-consumer-max-idle-hours", "null", "--failover",
       "--keyless", "identity_full", "--publish-generated-columns", "--no-backfill-attached",
       "--ddl", "capture"]


def _body(*flags: str) -> dict[str, object]:
    from pgfeed.cli.options import options_from_args

    args = build_parser().parse_args(["feeds", "create", "f", "--dsn", "x", "--all-tables", *flags])
    return options_from_args(args)


def test_every_api_option_has_a_flag_and_round_trips() -> None:
    body = _body(*ALL)
    assert FeedOptionsIn.model_validate(body).model_dump() == body == {
        "toast": "reselect", "snapshot": "export", "messages": False, "two_phase": True,
        "streaming": False, "partition_root": False, "heartbeat_seconds": 0.5,
        "retention": {"hours": None, "bytes": 1000, "consumer_max_idle_hours": None},
        "failover": True, "keyless": "identity_full", "publish_generated_columns": True,
        "backfill_attached": False, "ddl": "capture"}


def test_flags_left_out_leave_the_server_defaults() -> None:
    assert _body() == {}
    assert _body("--messages", "--retention-bytes", "5") == {"messages": True, "retention": {"bytes": 5}}


@pytest.mark.parametrize("flags", [["--retention-bytes", "1.5"], ["--heartbeat-seconds", "none"],
                                   ["--toast", "drop"]])
def test_bad_values_are_refused_before_anything_is_sent(flags: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _body(*flags)
    assert exited.value.code == 2 and flags[0] in capsys.readouterr().err
