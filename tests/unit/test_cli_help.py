"""Every flag of every ``pgfeed`` command says what it does and its default (issue 30.3)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from pgfeed.cli import build_parser
from pgfeed.cli.output import walk_parsers
from pgfeed.config import Settings

ROOT = Path(__file__).resolve().parents[2]
# Hidden on purpose: "memory" loses every change at exit (tests only; the runtime warns).
HIDDEN = {("pgfeed serve", "--changelog")}


def _options() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    found = []
    for path, parser in walk_parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            found.append((" ".join(path), parser, action))
    return found


def test_every_option_of_every_command_has_a_help_that_names_its_default() -> None:
    options = _options()
    commands = {command for command, _, _ in options}
    assert {"pgfeed serve", "pgfeed feeds list", "pgfeed feeds create", "pgfeed consumers delete",
            "pgfeed backfill", "pgfeed tail", "pgfeed peek", "pgfeed check", "pgfeed demo"} <= commands
    missing, no_default = [], []
    for command, parser, action in options:
        name = action.option_strings[0] if action.option_strings else action.dest
        if action.help is argparse.SUPPRESS:
            assert (command, name) in HIDDEN, f"{command} {name} is hidden"
            continue
        if not (action.help or "").strip():
            missing.append(f"{command} {name}")
            continue
        rendered = parser._get_formatter()._expand_help(action)
        default = action.default
        if action.option_strings and default not in (None, False, argparse.SUPPRESS) \
                and "default" not in rendered:
            no_default.append(f"{command} {name}: {rendered}")
    assert not missing, f"options without help: {missing}"
    assert not no_default, f"options whose help hides their default: {no_default}"


def test_serve_help_takes_descriptions_and_defaults_from_the_settings_model() -> None:
    serve = dict(walk_parsers(build_parser()))[("pgfeed", "serve")]
    flags = {a.option_strings[0]: a for a in serve._actions if a.option_strings}
    named = {"--tls-cert": "tls_cert_file", "--tls-key": "tls_key_file",
             "--tls-client-ca": "tls_client_ca_file"}
    checked = 0
    for flag, action in flags.items():
        if flag in ("-h", "--config") or action.help is argparse.SUPPRESS:
            continue
        field = named.get(flag, flag[2:].replace("-", "_"))
        info = Settings.model_fields[field]
        assert info.description and info.description in action.help, flag
        assert f"PGFEED_{field.upper()}" in action.help, flag
        if info.default is not None:
            assert f"default: {info.default}" in action.help, flag
        checked += 1
    assert checked >= 13
    # ... and the rendered --help shows them (a person reads this).
    shown = subprocess.run([sys.executable, "-m", "pgfeed", "serve", "--help"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60, check=True).stdout
    flat = " ".join(shown.split())
    assert "default: 8000" in flat and "default: 50051" in flat and "default: pgfeed-data" in flat
    assert "--changelog" not in shown


def test_feed_option_flags_name_the_server_default() -> None:
    create = dict(walk_parsers(build_parser()))[("pgfeed", "feeds", "create")]
    helps = {a.option_strings[0]: a.help or "" for a in create._actions if a.option_strings}
    assert "default: 10.0" in helps["--heartbeat-seconds"]
    assert "default: placeholder" in helps["--toast"]
    assert "default: false" in helps["--messages"] and "default: false" in helps["--two-phase"]
    assert "default: 168.0" in helps["--retention-hours"] and "default: none" in helps["--retention-bytes"]
