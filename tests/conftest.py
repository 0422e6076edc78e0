"""Test configuration: fixtures live in tests/fixtures/fix_*.py and are loaded as plugins."""

from pathlib import Path

pytest_plugins = sorted(
    f"tests.fixtures.{p.stem}" for p in (Path(__file__).parent / "fixtures").glob("fix_*.py")
)
