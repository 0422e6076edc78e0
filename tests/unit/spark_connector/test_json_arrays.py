"""The JSON path's array converter: a json/jsonb array's elements are documents (a list is a JSON
array document), any other array with list elements is multi-dimensional (no 1-D Spark array
holds it: NULL, as the Arrow path gives it)."""

from __future__ import annotations

from pgfeed_spark._schema import json_converter


def test_json_array_elements_are_documents() -> None:
    convert = json_converter("jsonb[]")
    assert convert([[1.0], None, {"a": [1, 2]}]) == ["[1.0]", None, '{"a":[1,2]}']
    assert json_converter("_json")([[]]) == ["[]"]


def test_other_arrays_with_list_elements_are_multidimensional() -> None:
    assert json_converter("int4[]")([[1, 2], [3, 4]]) is None
    assert json_converter("text[]")(["a", None]) == ["a", None]
