"""Service settings: command-line flags over ``PGFEED_*`` environment variables over a TOML file.

Built once in the CLI and passed down; nothing reads the environment anywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import TomlConfigSettingsSource


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PGFEED_", extra="forbid")

    data_dir: Path = Path("pgfeed-data")
    changelog: Literal["sqlite", "memory"] = "sqlite"
    http_host: str = "127.0.0.1"
    http_port: int = Field(8000, ge=0, le=65535)
    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(50051, ge=0, le=65535)
    # Bearer tokens; none configured means the API is open. Admin tokens may also read.
    read_tokens: list[SecretStr] = Field(default_factory=list)
    admin_tokens: list[SecretStr] = Field(default_factory=list)
    retention_check_seconds: float = 60.0
    # uvloop when it is installed ("auto"): the event loop runs every HTTP answer and gRPC message.
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # TLS on both listeners (PEM files; service/tls.py); a client CA also requires client certs.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = "text"  # json: one object a line (service/logs.py)

    @classmethod
    def load(cls, config_file: Path | None = None, **flags: Any) -> Settings:
        """Settings from flags (None values ignored), environment, then ``config_file`` (TOML)."""
        given = {k: v for k, v in flags.items() if v is not None}
        if config_file is None:
            return cls(**given)

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
