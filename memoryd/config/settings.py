"""Configuration: the validated Settings and where each value came from.

Sources, strongest first (docs/design.md#configuration): explicit overrides (command-line
flags), ``MEMORYD_*`` environment variables (nested with ``__``), the TOML file, the
defaults. ``load_settings`` builds them, refuses anything unknown or invalid with one
``ConfigError`` line naming the key, the value and its source, and records the source of
every value.
``settings_for_workspace`` applies a workspace's own ``.memoryd/config.toml``;
``memoryd.config.sections`` holds the sections' models, ``memoryd.config.view`` shows the
result, ``memoryd.config.schema`` holds the helpers.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from memoryd.config.listen import is_loopback, parse_listen
from memoryd.config.schema import (
    deep_merge,
    describe,
    file_error,
    flatten,
    leaf_keys,
    mark,
    mark_env,
    nest,
    origin_text,
    scalar_type_problems,
    setting_env_vars,
)
from memoryd.config.sections import (
    ANTHROPIC_API_KEY_ENV,
    ANTHROPIC_BASE_URL_ENV,
    DAY,
    HOUR,
    MINUTE,
    OPENAI_API_KEY_ENV,
    WEEK,
    AnthropicSettings,
    CheckpointSettings,
    MaskingSettings,
    MemorySettings,
    OpenAISettings,
    RollingSettings,
    SourceEntry,
    SummarizerSettings,
)
from memoryd.config.sources import (
    ENV_DELIMITER,
    ENV_PREFIX,
    LOG_LEVELS,
    WORKSPACE_KEYS,
    find_config_file,
)
from memoryd.defaults import (
    DEFAULT_CRITICAL_AT,
    DEFAULT_TOKEN_LIMIT,
    DEFAULT_WARNING_AT,
)
from memoryd.errors import ConfigError
from memoryd.files.paths import read_in
from memoryd.receipts.pricing import ModelPrice
from memoryd.workspace import Workspace


class Settings(BaseSettings):
    """Every setting of memoryd, validated once; picklable, so it can go to worker processes.

    Build it with ``load_settings``: constructing ``Settings()`` directly reads the same
    sources from ``os.environ`` but skips the unknown-variable check and the source record.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )

    roots: list[Path] = Field(default_factory=lambda: [Path("~/agents")])
    max_depth: int = Field(default=4, ge=0)
    token_limit: int = Field(default=DEFAULT_TOKEN_LIMIT, gt=0)
    warning_at: float = Field(default=DEFAULT_WARNING_AT, gt=0, le=1)
    summarize_at: float = Field(default=0.80, gt=0, le=1)
    critical_at: float = Field(default=DEFAULT_CRITICAL_AT, gt=0, le=1)
    strategy: Literal["narrative", "rolling", "checkpoint"] = "narrative"
    keep_recent_ratio: float = Field(default=0.40, gt=0, lt=1)
    keep_first: int = Field(default=1, ge=0)
    """The first N genuine user turns (the task) are pinned: never summarized away."""
    workers: int = Field(default=16, ge=1, le=1024)
    """Most worker processes at once; each starts with a job (docs/design.md#pool)."""
    worker_idle_timeout: float = Field(default=60.0, gt=0, le=DAY)
    coalesce_ms: int = Field(default=200, ge=0, le=60_000)
    checkin_interval: float = Field(default=5.0, gt=0, le=HOUR)
    shutdown_timeout: float = Field(default=30.0, ge=0, le=HOUR)
    max_consecutive_failures: int = Field(default=3, ge=1)
    failure_cooldown: float = Field(default=600.0, gt=0, le=WEEK)
    drain_seconds: float = Field(default=0.5, ge=0, le=MINUTE)
    rescan_interval: float = Field(default=300.0, gt=0, le=DAY)
    max_line_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    stale_after: float = Field(default=300.0, gt=0, le=WEEK)
    index_archive: bool = True
    log_format: Literal["json", "console"] = "json"
    log_level: str = "info"
    idle_compact_after: float = Field(default=0.0, ge=0, le=WEEK)
    idle_compact_at: float = Field(default=0.60, gt=0, le=1)
    metrics_listen: str = ""
    metrics_allow_remote: bool = False
    metrics_textfile: str = ""
    metrics_per_workspace: bool = False
    summarizer: SummarizerSettings = Field(default_factory=SummarizerSettings)
    anthropic: AnthropicSettings = Field(default_factory=AnthropicSettings)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    rolling: RollingSettings = Field(default_factory=RollingSettings)
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    masking: MaskingSettings = Field(default_factory=MaskingSettings)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """``[prices."model"]``: US dollars per million tokens, over the built-in table."""
    memory: MemorySettings = Field(default_factory=MemorySettings)
    sources: list[SourceEntry] = Field(default_factory=list)
    """``[[sources]]``: agents' session folders the daemon keeps indexed
    (docs/guides/sources.md)."""

    @field_validator("roots")
    @classmethod
    def _expand_roots(cls, roots: list[Path]) -> list[Path]:
        return [root.expanduser().absolute() for root in roots]

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, level: str) -> str:
        if level.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level.lower()

    @field_validator("metrics_listen")
    @classmethod
    def _listen_address(cls, listen: str) -> str:
        if listen:
            parse_listen(listen)
        return listen

    @model_validator(mode="after")
    def _metrics_stay_local(self) -> Settings:
        # The endpoint has no authentication: exposing it to the network is a choice the
        # operator states (docs/design.md#metrics).
        if self.metrics_listen and not self.metrics_allow_remote:
            host = parse_listen(self.metrics_listen)[0]
            if not is_loopback(host):
                raise PydanticCustomError(
                    "metrics_remote",
                    "not a loopback address; set metrics_allow_remote = true to serve "
                    "metrics to the network",
                    {"keys": "metrics_listen", "metrics_listen": self.metrics_listen},
                )
        return self

    @model_validator(mode="after")
    def _idle_below_trigger(self) -> Settings:
        if self.idle_compact_after > 0 and self.idle_compact_at >= self.summarize_at:
            raise PydanticCustomError(
                "threshold_order",
                "idle_compact_at must be below summarize_at",
                {
                    "keys": "idle_compact_at summarize_at",
                    **self.model_dump(include={"idle_compact_at", "summarize_at"}),
                },
            )
        return self

    @model_validator(mode="after")
    def _openai_named(self) -> Settings:
        # Under "auto" a base_url selects the openai backend: its model must come with it.
        missing = None
        if self.summarizer.backend == "openai" and not self.openai.base_url:
            missing = ("base_url", 'summarizer.backend is "openai"')
        elif self.openai.base_url and not self.openai.model:
            missing = ("model", "openai.base_url is set")
        if missing is not None:
            key = f"openai.{missing[0]}"
            raise PydanticCustomError(
                "openai_required", f"{key} is required when {missing[1]}", {"keys": key, key: ""}
            )
        return self

    @model_validator(mode="after")
    def _levels_in_order(self) -> Settings:
        for low, high in (
            ("warning_at", "critical_at"),
            ("warning_at", "summarize_at"),
            ("summarize_at", "critical_at"),
        ):
            if getattr(self, low) > getattr(self, high):
                raise PydanticCustomError(
                    "threshold_order",
                    f"{low} must not be above {high}",
                    {"keys": f"{low} {high}", **self.model_dump(include={low, high})},
                )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init arguments) > environment > TOML file; defaults come last on their own."""
        planned = _PLANNED_SOURCES.get()
        if planned is not None:
            return (init_settings, *planned)
        toml_file = find_config_file(None, os.environ)[0]
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=toml_file),
        )


_LEAVES = frozenset(leaf_keys(Settings))


# The environment and file sources load_settings built, for settings_customise_sources
# (a classmethod, so it cannot be handed them as arguments).
_PLANNED_SOURCES: ContextVar[tuple[PydanticBaseSettingsSource, ...] | None] = ContextVar(
    "memoryd_config_sources", default=None
)


class _MappingEnvSource(EnvSettingsSource):
    """The ``MEMORYD_*`` source, reading a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        # Set before super().__init__, which calls _load_env_vars.
        self._env = {name.lower(): value for name, value in env.items()}
        super().__init__(settings_cls, case_sensitive=False)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return dict(self._env)


@dataclass(frozen=True)
class LoadedSettings:
    """The settings plus where they came from, for ``memoryd config`` and the logs.

    ``sources`` maps every dotted key ("token_limit", "summarizer.backend") to "default",
    "file <path>", "env <VAR>" or "flag". ``config_path`` is None when no file was read;
    ``config_candidate`` is then the default path that was looked for.
    """

    settings: Settings
    config_path: Path | None
    sources: dict[str, str]
    config_candidate: Path | None = None


def load_settings(
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> LoadedSettings:
    """Read, merge and validate the configuration; raise ConfigError (one line) if refused.

    ``overrides`` are the command-line flags, by field name or dotted key
    ("summarizer.backend"); None values (flags not given) are skipped. ``env`` defaults to
    ``os.environ`` and is never modified. An explicit ``config_file`` or ``$MEMORYD_CONFIG``
    must exist; a missing ``$XDG_CONFIG_HOME/memoryd/config.toml`` just means no file.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    env_vars = setting_env_vars(environ, Settings, _LEAVES)
    config_path, candidate = find_config_file(config_file, environ)
    try:
        toml_source = TomlConfigSettingsSource(Settings, toml_file=config_path)
    except (OSError, ValueError, RecursionError) as err:  # TOMLDecodeError and
        # UnicodeDecodeError are ValueErrors; tomllib recurses into nested arrays and tables.
        raise file_error(config_path, err) from None
    env_source = _MappingEnvSource(Settings, {name: environ[name] for name in env_vars})
    flag_data = nest(overrides or {})
    try:
        env_data = env_source()
    except SettingsError as err:
        raise ConfigError(f"config: environment: {err}") from None

    origins = {leaf: "default" for leaf in leaf_keys(Settings)}
    toml_data = toml_source()
    mark(origins, flatten(Settings, toml_data), f"file {config_path}", _LEAVES)
    mark_env(origins, flatten(Settings, env_data), env_vars, _LEAVES)
    wrong_kinds = scalar_type_problems(
        Settings, toml_data, lambda key: f"(in file {config_path})"
    ) | scalar_type_problems(
        Settings, env_data, lambda key: origin_text(key, origins), from_text=True
    )
    mark(origins, flatten(Settings, flag_data), "flag", _LEAVES)

    token = _PLANNED_SOURCES.set((env_source, toml_source))
    try:
        settings = Settings(**flag_data)
    except ValidationError as err:
        # from None: a chained ValidationError would print its input values, secrets included.
        raise ConfigError(describe(err, origins, _LEAVES, known=wrong_kinds)) from None
    finally:
        _PLANNED_SOURCES.reset(token)
    if wrong_kinds:
        raise ConfigError("\n".join(wrong_kinds.values()))

    settings = _with_sdk_fallbacks(settings, origins, environ)
    sources = {key: origin for key, origin in origins.items() if key in _LEAVES}
    return LoadedSettings(settings, config_path, sources, None if config_path else candidate)


def settings_for_workspace(settings: Settings, workspace: Path) -> Settings:
    """Apply ``<workspace>/.memoryd/config.toml`` (budget and strategy keys only).

    A missing file returns ``settings`` unchanged; a bad file, a bad value or a key outside
    ``WORKSPACE_KEYS`` raises ConfigError naming the file and the key.
    """
    path = Workspace(workspace).config
    try:
        # Never through a symlinked .memoryd or config.toml (UnsafePathError, exit 2).
        raw = read_in(workspace, path)
    except FileNotFoundError:
        return settings
    except OSError as err:
        raise file_error(path, err) from None
    return workspace_settings(settings, path, raw)


def workspace_settings(settings: Settings, path: Path, raw: bytes) -> Settings:
    """:func:`settings_for_workspace` with the file at ``path`` already read (``raw``)."""
    try:
        data = tomllib.loads(raw.decode())
    except (ValueError, RecursionError) as err:
        raise file_error(path, err) from None
    for key in data:
        if key not in WORKSPACE_KEYS:
            raise ConfigError(
                f"config: key '{key}' is not allowed in a workspace config (in file {path}); "
                f"allowed: {', '.join(sorted(WORKSPACE_KEYS))}"
            )
    if not data:
        return settings
    origins = {key: f"file {path}" for key in flatten(Settings, data)}
    wrong_kinds = scalar_type_problems(Settings, data, lambda key: f"(in file {path})")
    try:
        merged = Settings.model_validate(deep_merge(settings.model_dump(), data))
    except ValidationError as err:
        raise ConfigError(
            describe(err, origins, _LEAVES, fallback="daemon settings", known=wrong_kinds)
        ) from None
    if wrong_kinds:
        raise ConfigError("\n".join(wrong_kinds.values()))
    return merged


def _with_sdk_fallbacks(
    settings: Settings, origins: dict[str, str], env: Mapping[str, str]
) -> Settings:
    """Fill an unset key / base URL from the SDKs' own variables, recording the source."""
    update: dict[str, Any] = {}
    for section, key, variable in (
        ("anthropic", "api_key", ANTHROPIC_API_KEY_ENV),
        ("anthropic", "base_url", ANTHROPIC_BASE_URL_ENV),
        ("openai", "api_key", OPENAI_API_KEY_ENV),
    ):
        part = update.get(section, getattr(settings, section))
        if not getattr(part, key) and env.get(variable):
            value = SecretStr(env[variable]) if key == "api_key" else env[variable]
            update[section] = part.model_copy(update={key: value})
            origins[f"{section}.{key}"] = f"env {variable}"
    return settings.model_copy(update=update) if update else settings
