"""The things a newcomer and an operator rely on: the package builds from a clean clone, the Docker
image installs that package only, CI = README command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What the image's final stage runs after installing the wheel (the Dockerfile has the same line):
# the compiled transcoder must be the one in use, and PGFEED_IMPL=c fails without it.
IMPORT_CHECK = ("import pgfeed.encoding.transcode as t, pgfeed.encoding._transcode as c; "
                "assert t.IMPLEMENTATION == 'c', t.IMPLEMENTATION; print(c.__file__)")


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _clean_clone(dest: Path) -> Path:
    """The tracked files as they are now (a fresh clone has nothing else: no .so, no build/)."""
    tracked = _run("git", "ls-files", "-z", cwd=ROOT).split("\0")
    for name in filter(None, tracked):
        src = ROOT / name
        if src.is_file():  # a file deleted but not yet committed is not in a clone either
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(src.read_bytes())
    return dest


@pytest.mark.slow
def test_wheel_from_clean_clone_uses_compiled_transcoder(tmp_path: Path) -> None:
    """Build the wheel the image's builder stage builds, install it into a fresh venv, and import it
    from a directory without sources: what `docker build` does, minus the engine."""
    # Nothing of this process's environment may point at the sources: a PYTHONPATH holding the
    # checkout (the Spark fixture sets one) makes pip take its egg-info for an installed pgfeed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGFEED_IMPL")}
    src = _clean_clone(tmp_path / "src")
    assert not list(src.rglob("*.so")), "a clean clone holds no compiled module"
    dist = tmp_path / "dist"
    # --no-build-isolation: the shared venv's setuptools, so the step needs no network
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", dist, src, cwd=tmp_path, env=env)
    (wheel,) = dist.glob("pgfeed-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    compiled = r"service/encoding/_transcode\.cpython-.*\.so"
    assert any(re.fullmatch(compiled, n) for n in names), names
    assert "pgfeed/v1/feed_pb2.py" in names and "service/encoding/transcode.py" in names
    assert not [n for n in names if n.startswith("tests/")]

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    vpy = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", vpy, "install", "-q", "--no-deps", "--no-index",
         wheel, cwd=tmp_path, env=env)
    # The dependencies come from the shared venv (appended after the fresh venv's own
    # site-packages, so the installed wheel wins; the shared venv's editable pgfeed is a .pth
    # there, which a path line does not process).
    site = Path(_run(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=tmp_path, env=env).strip())
    (site / "zz_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    neutral = tmp_path / "elsewhere"
    neutral.mkdir()
    compiled = Path(_run(vpy, "-c", IMPORT_CHECK, cwd=neutral, env=env).strip())
    assert compiled.is_relative_to(site), compiled
    out = _run(vpy, "-c", "import pgfeed.encoding.transcode as t; print(t.IMPLEMENTATION)",
               cwd=neutral, env={**env, "PGFEED_IMPL": "c"})
    assert out.strip() == "c"
    # the console script of the image's CMD, from the installed package alone
    assert "serve" in _run(venv / "bin" / "pgfeed", "--help", cwd=neutral, env=env)
    # and the same import check is the one the Dockerfile runs
    assert IMPORT_CHECK in (ROOT / "Dockerfile").read_text()


def _stages(dockerfile: str) -> list[list[str]]:
    """The Dockerfile's instructions (continuation lines joined), one list per FROM stage."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    stages: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def test_image_final_stage_holds_the_wheel_only():
    """The defect this replaces: sources copied next to the installed package shadowed it."""
    stages = _stages((ROOT / "Dockerfile").read_text())
    assert len(stages) == 2, "a builder stage and a final stage"
    builder, final = stages
    assert any("pip wheel" in i for i in builder)
    copies = [i for i in final if i.upper().startswith(("COPY", "ADD"))]
    assert copies and all(i.startswith("COPY --from=") for i in copies), copies
    assert not any(re.search(r"\bgcc\b", i) for i in final), "no compiler in the image"
    assert final[-1].startswith("CMD") and '"pgfeed", "serve"' in final[-1]
    ignored = (ROOT / ".dockerignore").read_text().split()
    for pattern in (".git", ".venv", "build", "**/*.so", "tests", "bench"):
        assert pattern in ignored, pattern


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test" in readme and "./scripts/demo" in readme
    assert "exec ./scripts/test" in ci
