"""``pgfeed feeds create``'s option flags, derived from the HTTP API's ``FeedOptionsIn`` model so
the CLI offers every option ``POST /v1/feeds`` takes and cannot drift from it.

A field ``x`` becomes ``--x`` (underscores as dashes), a nested model's field ``m.y`` becomes
``--m-y``; booleans get ``--x/--no-x``, literals their choices, and optional numbers accept
``none`` for null. Only the flags given go into the request body: the server keeps the defaults.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel

from pgfeed.http_api.schemas import FeedOptionsIn

__all__ = ["add_option_flags", "options_from_args"]

_PREFIX = "opt__"  # argparse dest of an option: opt__retention__hours


def _fields(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any, str]]:
    """(path, annotation, description) of every leaf field, nested models flattened; the
    description ends with the server's default (``--help`` shows what leaving a flag out means)."""
    out = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += _fields(annotation, (*path, name))
        else:
            default = info.get_default(call_default_factory=True)
            shown = "none" if default is None else str(default).lower() if isinstance(default, bool) \
                else str(default)
            described = info.description or name.replace("_", " ")
            out.append(((*path, name), annotation, f"{described} (default: {shown})"))
    return out


def _number(kind: type, nullable: bool) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        if nullable and text.lower() in ("none", "null"):
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}"
                f"{' or none' if nullable else ''}, got {text!r}") from None
    parse.__name__ = kind.__name__
    return parse


def add_option_flags(parser: argparse.ArgumentParser, model: type[BaseModel] = FeedOptionsIn) -> None:
    group = parser.add_argument_group("feed options (POST /v1/feeds 'options'; server defaults "
                                      "when left out)")
    for path, annotation, description in _fields(model):
        flag = "--" + "-".join(path).replace("_", "-")
        dest = _PREFIX + "__".join(path)
        help_text = description.replace("%", "%%") or None
        members = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
        nullable = type(None) in members
        base = next((a for a in members if a is not type(None)), annotation)
        if typing.get_origin(base) is Literal:
            group.add_argument(flag, dest=dest, choices=list(typing.get_args(base)), help=help_text,
                               default=argparse.SUPPRESS)
        elif base is bool:
            group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=help_text)
        elif base in (int, float):
            group.add_argument(flag, dest=dest, type=_number(base, nullable), help=help_text,
                               metavar="N|none" if nullable else "N", default=argparse.SUPPRESS)
        else:  # pragma: no cover - a new kind of option must be taught here
            raise TypeError(f"no CLI flag for option {'.'.join(path)} of type {annotation!r}")


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``options`` body of the flags that were given (nested as the model is)."""
    options: dict[str, Any] = {}
    for dest, value in vars(args).items():  # flags left out are absent (default SUPPRESS)
        if not dest.startswith(_PREFIX):
            continue
        *parents, leaf = dest[len(_PREFIX):].split("__")
        target = options
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    return options
