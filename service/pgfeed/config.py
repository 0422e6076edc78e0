"""Service settings: command-line flags over ``PGFEED_*`` environment variables over a TOML file.

Built once in the CLI and passed down; nothing reads the environment anywhere else.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

__all__ = ["InvalidSettings", "Settings"]


class InvalidSettings(ValueError):
    """Settings ``pgfeed serve`` cannot start with (``Settings.load``): the message is one line
    naming the setting, where it comes from and what to fix, never its value (tokens and the
    store's password are secrets)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PGFEED_", extra="forbid", hide_input_in_errors=True)

    # Descriptions are ``pgfeed serve --help``'s (cli.py adds the flag, variable and default).
    data_dir: Path = Field(Path("pgfeed-data"), description="catalogue and change logs; one pgfeed "
                                                            "serve at a time (locked)")
    # "memory" loses every change at exit: for tests, not offered in --help, warned about when used.
    changelog: Literal["sqlite", "memory"] = "sqlite"
    # A PostgreSQL store (``postgresql://…`` or ``key=value`` conninfo) shared by several replicas
    # instead of the data dir; a secret (it holds a password), never logged.
    store: SecretStr | None = Field(None, description="PostgreSQL store shared by replicas "
                                                      "(postgresql://…) instead of the data dir; "
                                                      "unset: the data dir")
    store_schema: str = Field("pgfeed", min_length=1, max_length=50,
                              description="schema of the store's tables")
    replica_id: str | None = Field(None, description="this replica's id in the store's leases, one "
                                                     "live process per id; unset: host:http-port")
    http_host: str = Field("127.0.0.1", description="address the HTTP API listens on")
    http_port: int = Field(8000, ge=0, le=65535, description="port of the HTTP API (0: any free one)")
    grpc_host: str = Field("127.0.0.1", description="address the gRPC API listens on")
    grpc_port: int = Field(50051, ge=0, le=65535, description="port of the gRPC API (0: any free one)")
    # Bearer tokens; none configured means the API is open. Admin tokens may also read.
    read_tokens: list[SecretStr] = Field(default_factory=list)
    admin_tokens: list[SecretStr] = Field(default_factory=list)
    metrics_auth: Literal["open", "read"] = Field(
        "open", description="/metrics open to anyone (scrapers keep working without a token) or "
                            "behind the read tokens (read), when tokens are configured")
    retention_check_seconds: float = 60.0
    # The console's history (issue 30.1): one sample a feed every history_seconds, kept in memory
    # for history_hours (GET /v1/feeds/{feed}/history).
    history_seconds: float = Field(10.0, gt=0, description="Seconds between two history samples "
                                                           "of a feed")
    history_hours: float = Field(6.0, gt=0, le=168, description="Hours of history kept (in memory)")
    # uvloop when it is installed ("auto"): the event loop runs every HTTP answer and gRPC message.
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # TLS on both listeners (PEM files; service/pgfeed/tls.py); a client CA also requires client certs.
    tls_cert_file: Path | None = Field(None, description="PEM certificate: TLS on HTTP and gRPC; "
                                                         "unset: plain text")
    tls_key_file: Path | None = Field(None, description="PEM private key of the certificate")
    tls_client_ca_file: Path | None = Field(None, description="PEM CA bundle: require client "
                                                              "certificates signed by it; unset: none "
                                                              "required")
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = Field(
        "text", description="text, or json: one object a line, for log collectors")

    @field_validator("store")
    @classmethod
    def _store_dsn(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        try:
            conninfo_to_dict(value.get_secret_value())
        except psycopg.ProgrammingError:
            raise ValueError("store must be a PostgreSQL connection string (postgresql://user@host/db "
                             "or 'host=… dbname=…')") from None
        return value

    @classmethod
    def load(cls, config_file: Path | None = None, **flags: Any) -> Settings:
        """Settings from flags (None values ignored), environment, then ``config_file`` (TOML).
        InvalidSettings (one line) for a missing or malformed file or an invalid value."""
        given = {k: v for k, v in flags.items() if v is not None}
        try:
            if config_file is None:
                return cls(**given)
            _check_toml(config_file)

            class _FromFile(cls):  # type: ignore[valid-type,misc]
                @classmethod
                def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                               init_settings: PydanticBaseSettingsSource,
                                               env_settings: PydanticBaseSettingsSource,
                                               dotenv_settings: PydanticBaseSettingsSource,
                                               file_secret_settings: PydanticBaseSettingsSource,
                                               ) -> tuple[PydanticBaseSettingsSource, ...]:
                    return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, config_file))

            return Settings(**_FromFile(**given).model_dump())
        except SettingsError as exc:
            raise InvalidSettings(_unparsable(str(exc))) from None
        except ValidationError as exc:
            raise InvalidSettings(_invalid(exc, config_file)) from None


# What to write instead, for the settings whose mistakes are easy to make.
_HINTS = {
    "read_tokens": "a JSON list of strings, e.g. PGFEED_READ_TOKENS='[\"token-1\", \"token-2\"]'",
    "admin_tokens": "a JSON list of strings, e.g. PGFEED_ADMIN_TOKENS='[\"token-1\"]'",
}


# Settings ``pgfeed serve`` takes as flags too (cli.py), and the flags named otherwise.
_FLAGGED = {"data_dir", "changelog", "store", "store_schema", "replica_id", "http_host", "http_port",
            "grpc_host", "grpc_port", "metrics_auth", "log_format"}
_FLAGS = {"tls_cert_file": "--tls-cert", "tls_key_file": "--tls-key", "tls_client_ca_file": "--tls-client-ca"}


def _env_name(field: str) -> str:
    return f"PGFEED_{field.upper()}"


def _check_toml(path: Path) -> None:
    """InvalidSettings unless ``path`` is a readable TOML file (pydantic-settings would quietly
    take a missing file for an empty one)."""
    try:
        text = Path(path).read_bytes().decode()
    except FileNotFoundError:
        raise InvalidSettings(f"config file {path} not found (check --config)") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise InvalidSettings(f"config file {path} cannot be read: {reason} (check --config)") from None
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # says where, never what: no value is echoed
        raise InvalidSettings(f"config file {path} is not valid TOML: {exc}") from None


def _unparsable(message: str) -> str:
    """pydantic-settings' 'error parsing value for field "x" from source "EnvSettingsSource"'."""
    match = re.search(r'field "([a-z_]+)"', message)
    if match is None:
        return f"invalid settings: {message}"
    field = match.group(1)
    hint = _HINTS.get(field, "valid JSON")
    return f"{_env_name(field)} is not valid JSON: give {hint}"


def _invalid(exc: ValidationError, config_file: Path | None) -> str:
    """Every problem on one line: the setting, where it may come from, what is wrong."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        field = str(error["loc"][0]) if error["loc"] else "settings"
        if error["type"] == "extra_forbidden":
            where = f" in {config_file}" if config_file is not None else ""
            problems.append(f"unknown setting {field!r}{where}")
            continue
        flag = _FLAGS.get(field, f"--{field.replace('_', '-')}" if field in _FLAGGED else None)
        sources = f"{flag}, {_env_name(field)}" if flag else _env_name(field)
        if config_file is not None:
            sources += f" or {field} in {config_file}"
        hint = f"; give {_HINTS[field]}" if field in _HINTS else ""
        problems.append(f"invalid {field} ({sources}): {error['msg']}{hint}")
    return "; ".join(problems)
