"""The console's files ship in the wheel: setuptools packages only .py files unless
package-data names the rest (a wheel built without them serves a 404 at /ui)."""

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_console_assets_are_package_data():
    config = tomllib.loads((ROOT / "service" / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["pgfeed.http_api"]
    package = ROOT / "service" / "pgfeed" / "http_api"
    assets = [p.relative_to(package).as_posix() for p in (package / "static").rglob("*") if p.is_file()]
    assert {"static/ui/index.html", "static/ui/console.js", "static/ui/console.css"} <= set(assets)
    for asset in assets:
        assert any(fnmatch.fnmatch(asset, pattern) for pattern in patterns), asset
