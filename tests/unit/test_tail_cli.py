"""``pgfeed tail`` lines: numbers are written back exactly as the server sent them (a jsonb
value can hold more digits than a float, or more than 64 bits), in --json and in text lines."""

from pgfeed.cli.tail import _json, _loads, event_line

PAGE = (b'{"changes":[{"lsn":"0/10","seq":0,"commit_lsn":"0/20","xid":7,'
        b'"commit_ts":"2026-11-22T10:00:00+00:00","op":"insert","schema":"public","table":"t",'
        b'"key":{"id":1},"after":{"id":1,"doc":{"f":1.000000000000000000001,'
        b'"big":123456789012345678901234567890,"e":1e400,"neg":-0.0,"n":42}},'
        b'"unchanged_toast":[],"origin":null}],"next":"0/20","head":"0/20","has_more":false}')


def test_numbers_round_trip_exactly() -> None:
    (event,) = _loads(PAGE)["changes"]
    line = _json(event)
    for text in ("1.000000000000000000001", "123456789012345678901234567890", "1e400", "-0.0",
                 '"n":42', '"xid":7'):
        assert text in line, (text, line)
    assert PAGE.decode().split('"changes":[')[1].split("],\"next\"")[0] == line
    text = event_line(event)
    assert text.startswith("0/20:0 xid=7 insert public.t key={\"id\":1} after=")
    assert "123456789012345678901234567890" in text and "1.000000000000000000001" in text
