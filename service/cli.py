"""Command line: ``pgfeed serve | feeds create | demo | peek``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgfeed", description="Change data capture for PostgreSQL")
    sub = parser.add_subparsers(dest="command", required=True)
    from service import peek

    peek.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
