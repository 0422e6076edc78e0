"""Schema annotations (issue 27.2): how captured DDL and catalogue reads become a relation
version's ``previous_name`` / ``missing_value``, from schema-history frames alone (what a restart
or a replica rebuilds)."""

from __future__ import annotations

from typing import Any

from pgfeed.assembler.annotations import ColumnNote, annotation_body, annotation_frame, ddl_notes
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.pgoutput.messages import RelationColumn, RelationMessage

REL = 16384


def _relation(*names: str) -> RelationMessage:
    return RelationMessage(None, REL, "public", "t", ord("d"),
                           tuple(RelationColumn(0, n, 23, -1) for n in names))


def _ddl(*columns: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "ddl", "relation_id": REL, "columns": list(columns)}


def test_an_annotation_frame_round_trips_and_other_frames_are_not_one() -> None:
    frame = annotation_frame(0x10, {"kind": "catalog", "relation_id": 1, "missing": {"a": "1"}})
    assert annotation_body(frame) == {"kind": "catalog", "relation_id": 1, "missing": {"a": "1"}}
    assert annotation_body(b"R\x00\x00") is None


def test_renames_chain_to_the_previous_version_and_a_column_added_then_renamed_is_new() -> None:
    pending = [
        _ddl({"attnum": 1, "name": "id"}, {"attnum": 2, "name": "b", "previous_name": "a"}),
        _ddl({"attnum": 1, "name": "id"}, {"attnum": 2, "name": "c", "previous_name": "b"},
             {"attnum": 3, "name": "x", "added": True, "missing": "7"}),
        _ddl({"attnum": 1, "name": "id"}, {"attnum": 2, "name": "c"},
             {"attnum": 3, "name": "y", "previous_name": "x", "missing": "7"}),
    ]
    assert ddl_notes(pending, ["id", "c", "y"], ["id", "a"]) == {
        "c": ColumnNote("c", "a", None), "y": ColumnNote("y", None, "7")}
    # renamed back: no rename; a first version has no notes
    back = [_ddl({"attnum": 1, "name": "b", "previous_name": "a"}),
            _ddl({"attnum": 1, "name": "a", "previous_name": "b"})]
    assert ddl_notes(back, ["a"], ["a"]) == {}
    assert ddl_notes(pending, ["id", "c", "y"], None) == {}


def test_the_catalogue_applies_annotations_to_the_version_they_describe() -> None:
    catalog = RelationCatalog()
    catalog.add(0x10, _relation("id", "a"))
    # catalogue read: only a column the version added gets the missing value
    catalog.add(0x20, _relation("id", "a", "flag"))
    catalog.add(0x20, annotation_frame(0x20, {"kind": "catalog", "relation_id": REL,
                                               "missing": {"a": "x", "flag": "t"}}))
    # a re-sent, unchanged Relation's annotation changes nothing
    catalog.add(0x30, _relation("id", "a", "flag"))
    catalog.add(0x30, annotation_frame(0x30, {"kind": "catalog", "relation_id": REL,
                                               "missing": {"a": "x", "flag": "f"}}))
    # captured DDL waits for the next version
    catalog.add(0x40, annotation_frame(0x40, _ddl({"attnum": 1, "name": "id"},
                                                  {"attnum": 2, "name": "b", "previous_name": "a"},
                                                  {"attnum": 3, "name": "flag"})))
    catalog.add(0x50, _relation("id", "b", "flag"))
    described = [v.describe() for v in catalog.versions(REL)]
    assert [[{k: c[k] for k in ("name", "previous_name", "missing_value") if k in c}
             for c in v["columns"]] for v in described] == [
        [{"name": "id"}, {"name": "a"}],
        [{"name": "id"}, {"name": "a"}, {"name": "flag", "missing_value": "t"}],
        [{"name": "id"}, {"name": "b", "previous_name": "a"}, {"name": "flag"}]]
    # the value is typed by whoever serves it
    assert catalog.versions(REL)[1].describe(lambda oid, text: text == "t")["columns"][2][
        "missing_value"] is True
