"""money: served exactly as a decimal, like numeric (a JSON string ``"-1234.56"``, protobuf
numeric_value). PostgreSQL prints money by ``lc_monetary``; the text of the C and English
locales (``$1,234.56``, ``-$1,234.56``: a dollar sign, thousands commas, two decimals) loads
as that amount, any other text (another locale's symbol or separators) keeps its text form, as
before this family: never a wrong amount. Typed reads (Arrow, Spark) hold it as a string."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from psycopg import adapt

from pgfeed.types.family import PgType, TypeFamily

__all__ = ["FAMILY", "SHAPE"]

SHAPE = rb"-?\$\d{1,3}(?:,\d{3})*\.\d\d"
_MONEY = re.compile(SHAPE.decode()).fullmatch


class _MoneyLoader(adapt.Loader):
    def load(self, data: Any) -> Decimal | str:
        text = bytes(data).decode()
        if _MONEY(text) is None:
            return text
        return Decimal(text.replace("$", "").replace(",", ""))


FAMILY = TypeFamily(
    name="money",
    types=(PgType(790, "numeric_value", fast="money", shape=SHAPE),),
    json='a string holding the exact amount ("-1234.56"); another locale\'s text as it is',
    loaders={790: _MoneyLoader},
)
