"""Unknown query parameters are refused, naming them: a misspelled filter (``table=`` for
``tables=``) would otherwise be ignored silently and the reader would get what it did not ask for.

One dependency of the whole application (``create_app``); what each route accepts is read from
its own declaration (its dependant, walked; kept in the application's state, ``query_params``,
per route), so no list is kept by hand.
"""

from __future__ import annotations

import difflib

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from pgfeed.http_api.errors import ApiError

__all__ = ["reject_unknown_query"]


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters of a dependant and of every dependency under it."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def reject_unknown_query(request: Request) -> None:
    """422 ``unknown_parameter`` for a query parameter the route does not declare (with the
    nearest declared name as a hint)."""
    if not request.url.query or not request.url.path.startswith("/v1/"):
        return  # the API's; probes and pages may be given anything
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    cache: dict[int, frozenset[str]] = request.app.state.query_params
    accepted = cache.get(id(route))
    if accepted is None:
        accepted = cache[id(route)] = frozenset(_query_names(route.dependant))
    unknown = sorted({name for name in request.query_params if name not in accepted})
    if not unknown:
        return
    hints = []
    for name in unknown:
        near = difflib.get_close_matches(name, accepted, n=1)
        hints.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    expected = ", ".join(sorted(accepted)) or "none"
    raise ApiError(422, "unknown_parameter",
                   f"unknown query parameter{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                   f"this endpoint takes: {expected}")
