"""bench/RESULTS.md: each benchmark owns one section between ``<!-- name:start -->`` and
``<!-- name:end -->`` and replaces only that."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
_HEADER = ("# Benchmark results\n\nRecorded by the scripts in bench/; each script replaces only its "
           "own marked section.\n")


def write_section(name: str, text: str, path: Path = RESULTS) -> None:
    """Put ``text`` in section ``name`` (appended at the end the first time)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{text.rstrip()}\n{end}"
    current = path.read_text() if path.exists() else _HEADER
    if start in current and end in current:
        head, rest = current.split(start, 1)
        current = head + block + rest.split(end, 1)[1]
    else:
        current = current.rstrip() + "\n\n" + block + "\n"
    path.write_text(current)
