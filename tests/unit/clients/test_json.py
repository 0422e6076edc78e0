"""The client's exact JSON parsing (issue 13, item 2): no number of a json/jsonb document is rounded
on the way to the user, on pages (orjson when safe, the exact parser otherwise) and gRPC's
``json_value``; documents nested past ``MAX_EMBEDDED_DEPTH`` are their text on both."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from pgfeed_client._grpc import json_document
from pgfeed_client._http_base import decode
from pgfeed_client._json import (
    JSON_NULL,
    MAX_EMBEDDED_DEPTH,
    dumps_exact,
    embeddable,
    json_depth,
    loads_exact,
    loads_page,
)
from pgfeed_client._models import Page
from tests.unit.encoding.jsondocs import documents, exact_tree, jsonb_text, same_numbers


def test_json_depth_ignores_brackets_in_strings() -> None:
    assert json_depth("1") == 0 and json_depth("[]") == 1 and json_depth('[{"a": [[]]}]') == 4
    assert json_depth('["[[[[", "\\"]]]", {}]') == 2


@pytest.mark.parametrize(("text", "value"), [
    ("123456789012345678901234567890", 123456789012345678901234567890),
    ("-9223372036854775809", -9223372036854775809),
    ("1e-7", 1e-7), ("1E+300", 1e300), ("0.30000000000000004", 0.30000000000000004),
    ("0.10000000000000000001", Decimal("0.10000000000000000001")),
    ("1e400", Decimal("1e400")), ("1e-400", Decimal("1e-400")),
])
def test_numbers_are_exact(text: str, value: object) -> None:
    for parsed in (loads_exact(text), loads_page(text.encode()), json_document(text)):
        assert parsed == value and type(parsed) is type(value)
    assert loads_exact("-0.0") == 0 and str(loads_exact("-0.0")) == "-0.0"


def test_orjson_would_round_these() -> None:
    """Why pages are not simply orjson.loads'ed."""
    assert orjson.loads("123456789012345678901234567890") != 123456789012345678901234567890
    assert loads_page(b'{"a":[1,2.5,"x"]}') == {"a": [1, 2.5, "x"]}


def test_dumps_exact_keeps_every_digit() -> None:
    value = loads_exact('{"a": [123456789012345678901234567890, 0.10000000000000000001, "é"]}')
    assert dumps_exact(value) == '{"a":[123456789012345678901234567890,0.10000000000000000001,"é"]}'


def test_deep_documents_are_text_on_both_clients() -> None:
    deep = "[" * (MAX_EMBEDDED_DEPTH + 1) + "]" * (MAX_EMBEDDED_DEPTH + 1)
    assert json_document(deep) == deep
    shallow = "[" * MAX_EMBEDDED_DEPTH + "]" * MAX_EMBEDDED_DEPTH
    assert json_document(shallow) == loads_exact(shallow)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=documents(100))
def test_client_values_hold_every_number(batch: list[str]) -> None:
    """10,000 documents in all, as json and as jsonb print them, embedded in a page as the server does, and as
    ``json_value``: every number exact, a document too deep to embed its text on both."""
    texts = [t for doc in batch for t in (doc, jsonb_text(doc))]
    events = b",".join(
        b'{"lsn":"0/1","seq":%d,"commit_lsn":"0/2","xid":1,"op":"insert","after":{"doc":%s}%s}'
        % (i, t.encode() if embeddable(t) else orjson.dumps(t),
           b',"json_null":{"after":["doc"]}' if t == "null" else b"")  # as the server writes it
        for i, t in enumerate(texts))
    page = decode(b'{"changes":[' + events + b'],"next":"0/2","head":"0/2","has_more":false}',
                  Page.from_json)
    for change, text in zip(page.changes, texts, strict=True):
        assert change.after is not None
        if not embeddable(text):
            assert change.after["doc"] == json_document(text) == text
            continue
        if text == "null":  # the document null: the same sentinel from both clients
            assert change.after["doc"] is JSON_NULL
            assert json_document(text) is JSON_NULL
            continue
        exact = exact_tree(text)
        assert same_numbers(change.after["doc"], exact), text
        assert same_numbers(json_document(text), exact), text
