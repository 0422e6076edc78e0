"""The things a newcomer and an operator rely on: the Dockerfile's essentials, CI = README command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dockerfile_essentials():
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "USER pgfeed" in text and "useradd" in text  # not root
    assert "EXPOSE 8000 50051" in text
    assert 'VOLUME ["/data"]' in text
    assert '"pgfeed", "serve"' in text
    assert "HEALTHCHECK" in text and "/healthz" in text


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test" in readme and "./scripts/demo" in readme
    assert "exec ./scripts/test" in ci
