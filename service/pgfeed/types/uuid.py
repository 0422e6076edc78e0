"""uuid: PostgreSQL's canonical text (lower-case hex with dashes) as a string everywhere. It
loads as text: psycopg's UUID object would only be written back as the same text."""

from __future__ import annotations

from pgfeed.types.family import PgType, TypeFamily

FAMILY = TypeFamily(
    name="uuid",
    types=(PgType(2950, "string_value", fast="text",
                  shape=rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),),
    json="a string: the canonical text",
    loads=False,
)
