"""Configuration: the validated Settings, where each value came from, and how it is shown.

Sources, strongest first: explicit overrides (command-line flags), ``MEMORYD_*``
environment variables (nested with ``__``), the TOML file, the defaults. ``load_settings``
builds them, refuses anything unknown or invalid with one ``ConfigError`` line naming the
key, the value and its source, and records the source of every value.
``settings_for_workspace`` applies a workspace's own ``.memoryd/config.toml``.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
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

from memoryd.errors import ConfigError
from memoryd.pricing import ModelPrice
from memoryd.workspace import Workspace

ENV_PREFIX = "MEMORYD_"
ENV_DELIMITER = "__"
CONFIG_ENV = "MEMORYD_CONFIG"
RESERVED_ENV = frozenset({CONFIG_ENV})
"""``MEMORYD_*`` variables that are not settings and so are not refused as unknown."""
ANTHROPIC_API_KEY_ENV = "ANTHROPIC_API_KEY"
ANTHROPIC_BASE_URL_ENV = "ANTHROPIC_BASE_URL"
LOG_LEVELS = ("debug", "info", "warning", "error")
# Defaults that code outside Settings needs too (the monitor, the level text, the stores'
# functions): each is written here once.
DEFAULT_TOKEN_LIMIT = 100_000
DEFAULT_WARNING_AT = 0.70
DEFAULT_CRITICAL_AT = 0.85
DEFAULT_MEMORY_THRESHOLD = 50
DEFAULT_KEEP_BOOKMARKS = 10
WORKSPACE_KEYS = frozenset(
    {
        "token_limit",
        "strategy",
        "warning_at",
        "summarize_at",
        "critical_at",
        "keep_recent_ratio",
        "keep_first",
        "rolling",
        "checkpoint",
    }
)
"""The keys a workspace's ``.memoryd/config.toml`` may set: its budget and strategy."""

API_KEY = "anthropic.api_key"
HEADERS = "anthropic.default_headers"
MASKED = "set (masked)"
UNSET = "unset"
_SECRET_HEADER = re.compile(r"authorization|token|key|secret|password|cookie|auth", re.IGNORECASE)

_NESTED = ConfigDict(extra="forbid", frozen=True)


class SummarizerSettings(BaseModel):
    """``[summarizer]``: which backend writes summaries, and their budgets."""

    model_config = _NESTED

    backend: Literal["auto", "anthropic", "extractive"] = "auto"
    max_summary_tokens: int = Field(default=1024, gt=0)
    max_input_tokens: int = Field(default=150_000, gt=0)
    min_retention: float = Field(default=0.8, ge=0, le=1)
    """Below this share of kept details a summary is repaired (docs/design.md#retention)."""


class AnthropicSettings(BaseModel):
    """``[anthropic]``: the Messages API client; the key and URL fall back to the SDK's env."""

    model_config = _NESTED

    model: str = Field(default="claude-haiku-4-5", min_length=1)
    base_url: str = ""
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    # Header values may hold credentials: kept out of repr() and so out of logs.
    default_headers: dict[str, str] = Field(default_factory=dict, repr=False)
    api_key: SecretStr | None = None

    @field_validator("api_key")
    @classmethod
    def _empty_key_is_unset(cls, api_key: SecretStr | None) -> SecretStr | None:
        return api_key if api_key is not None and api_key.get_secret_value() else None

    def effective_api_key(self, env: Mapping[str, str]) -> str | None:
        """The key to use: ``api_key`` if set, else ``$ANTHROPIC_API_KEY``, else None."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return env.get(ANTHROPIC_API_KEY_ENV) or None

    def effective_base_url(self, env: Mapping[str, str]) -> str | None:
        """The URL to use: ``base_url`` if set, else ``$ANTHROPIC_BASE_URL``, else None."""
        return self.base_url or env.get(ANTHROPIC_BASE_URL_ENV) or None


class RollingSettings(BaseModel):
    """``[rolling]``: the rolling strategy's trigger and window."""

    model_config = _NESTED

    message_count_threshold: int = Field(default=30, gt=0)
    messages_to_summarize: int = Field(default=20, gt=0)
    recent_messages_to_keep: int = Field(default=10, ge=0)
    token_threshold: int = Field(default=15_000, gt=0)


class CheckpointSettings(BaseModel):
    """``[checkpoint]``: when the checkpoint strategy compacts."""

    model_config = _NESTED

    compact_at: float = Field(default=0.90, gt=0, le=1)


class MemorySettings(BaseModel):
    """``[memory]``: when memory stores are compacted and how many bookmarks stay."""

    model_config = _NESTED

    threshold: int = Field(default=DEFAULT_MEMORY_THRESHOLD, gt=0)
    keep_bookmarks: int = Field(default=DEFAULT_KEEP_BOOKMARKS, ge=0)


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
    )

    roots: list[Path] = Field(default_factory=lambda: [Path("~/agents")])
    max_depth: int = Field(default=4, ge=0)
    token_limit: int = Field(default=DEFAULT_TOKEN_LIMIT, gt=0)
    warning_at: float = Field(default=DEFAULT_WARNING_AT, gt=0, le=1)
    summarize_at: float = Field(default=0.80, gt=0, le=1)
    critical_at: float = Field(default=DEFAULT_CRITICAL_AT, gt=0, le=1)
    strategy: Literal["narrative", "rolling", "checkpoint"] = "narrative"
    keep_recent_ratio: float = Field(default=0.40, gt=0, lt=1)
    keep_first: int = Field(default=0, ge=0)
    """The first N genuine messages are pinned: never summarized away."""
    workers: int = Field(default=2, ge=1)
    coalesce_ms: int = Field(default=200, ge=0)
    checkin_interval: float = Field(default=5.0, gt=0)
    shutdown_timeout: float = Field(default=30.0, ge=0)
    max_consecutive_failures: int = Field(default=3, ge=1)
    failure_cooldown: float = Field(default=600.0, gt=0)
    drain_seconds: float = Field(default=0.5, ge=0)
    rescan_interval: float = Field(default=30.0, gt=0)
    max_line_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    stale_after: float = Field(default=300.0, gt=0)
    index_archive: bool = True
    log_format: Literal["json", "console"] = "json"
    log_level: str = "info"
    summarizer: SummarizerSettings = Field(default_factory=SummarizerSettings)
    anthropic: AnthropicSettings = Field(default_factory=AnthropicSettings)
    rolling: RollingSettings = Field(default_factory=RollingSettings)
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """``[prices."model"]``: US dollars per million tokens, over the built-in table."""
    memory: MemorySettings = Field(default_factory=MemorySettings)

    @field_validator("roots")
    @classmethod
    def _expand_roots(cls, roots: list[Path]) -> list[Path]:
        return [root.expanduser() for root in roots]

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, level: str) -> str:
        if level.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level.lower()

    @model_validator(mode="after")
    def _levels_in_order(self) -> Settings:
        if self.warning_at > self.critical_at:
            raise PydanticCustomError(
                "threshold_order",
                "warning_at must not be above critical_at",
                {
                    "keys": "warning_at critical_at",
                    **self.model_dump(include={"warning_at", "critical_at"}),
                },
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
        toml_file = _find_config_file(None, os.environ)[0]
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=toml_file),
        )


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
    env_vars = _setting_env_vars(environ)
    config_path, candidate = _find_config_file(config_file, environ)
    try:
        toml_source = TomlConfigSettingsSource(Settings, toml_file=config_path)
    except (OSError, ValueError) as err:  # TOMLDecodeError and UnicodeDecodeError are ValueErrors
        raise _file_error(config_path, err) from None
    env_source = _MappingEnvSource(Settings, {name: environ[name] for name in env_vars})
    flag_data = _nest(overrides or {})
    try:
        env_data = env_source()
    except SettingsError as err:
        raise ConfigError(f"config: environment: {err}") from None

    origins = {leaf: "default" for leaf in _leaf_keys(Settings)}
    _mark(origins, _flatten(Settings, toml_source()), f"file {config_path}")
    _mark_env(origins, _flatten(Settings, env_data), env_vars)
    _mark(origins, _flatten(Settings, flag_data), "flag")

    token = _PLANNED_SOURCES.set((env_source, toml_source))
    try:
        settings = Settings(**flag_data)
    except ValidationError as err:
        # from None: a chained ValidationError would print its input values, secrets included.
        raise ConfigError(_describe(err, origins)) from None
    finally:
        _PLANNED_SOURCES.reset(token)

    settings = _with_anthropic_fallbacks(settings, origins, environ)
    sources = {key: origin for key, origin in origins.items() if key in _LEAVES}
    return LoadedSettings(settings, config_path, sources, None if config_path else candidate)


def settings_for_workspace(settings: Settings, workspace: Path) -> Settings:
    """Apply ``<workspace>/.memoryd/config.toml`` (budget and strategy keys only).

    A missing file returns ``settings`` unchanged; a bad file, a bad value or a key outside
    ``WORKSPACE_KEYS`` raises ConfigError naming the file and the key.
    """
    path = Workspace(workspace).config
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        return settings
    except (OSError, ValueError) as err:
        raise _file_error(path, err) from None
    for key in data:
        if key not in WORKSPACE_KEYS:
            raise ConfigError(
                f"config: key '{key}' is not allowed in a workspace config (in file {path}); "
                f"allowed: {', '.join(sorted(WORKSPACE_KEYS))}"
            )
    if not data:
        return settings
    origins = {key: f"file {path}" for key in _flatten(Settings, data)}
    try:
        return Settings.model_validate(_deep_merge(settings.model_dump(), data))
    except ValidationError as err:
        raise ConfigError(_describe(err, origins, fallback="daemon settings")) from None


def render_config(loaded: LoadedSettings) -> str:
    """Every effective ``key = value`` with its source, secrets masked, for ``memoryd config``."""
    if loaded.config_path is not None:
        header = f"# config file: {loaded.config_path}"
    else:
        header = f"# config file: none (no file at {loaded.config_candidate})"
    rows = [
        (f"{key} = {_render_value(key, value)}", loaded.sources.get(key, "default"))
        for key, value in _effective_values(loaded.settings)
    ]
    width = max(len(assignment) for assignment, _ in rows)
    lines = [header] + [f"{assignment.ljust(width)}  # {origin}" for assignment, origin in rows]
    return "\n".join(lines) + "\n"


def config_as_dict(loaded: LoadedSettings, masked: bool = True) -> dict[str, Any]:
    """The effective configuration as JSON-ready data: file, nested values and sources.

    With ``masked`` (the default) the API key reads "set (masked)" or null and secret-looking
    header values are masked; ``masked=False`` shows them in clear.
    """
    values = loaded.settings.model_dump(mode="json")
    api_key = loaded.settings.anthropic.api_key
    anthropic = values["anthropic"]
    if masked:
        anthropic["api_key"] = MASKED if api_key is not None else None
        anthropic["default_headers"] = _mask_headers(loaded.settings.anthropic.default_headers)
    else:
        anthropic["api_key"] = api_key.get_secret_value() if api_key is not None else None
    return {
        "config_file": str(loaded.config_path) if loaded.config_path else None,
        "settings": values,
        "sources": dict(loaded.sources),
    }


# --- schema walking ---------------------------------------------------------------------


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, info in model.model_fields.items():
        nested = _nested_model(info.annotation)
        if nested is None:
            yield prefix + name
        else:
            yield from _leaf_keys(nested, f"{prefix}{name}.")


_LEAVES = frozenset(_leaf_keys(Settings))


def _flatten(
    model: type[BaseModel] | None, data: Mapping[str, Any], prefix: str = ""
) -> dict[str, Any]:
    """Dotted leaf keys of ``data``, walking into nested models; unknown keys are leaves too."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        info = model.model_fields.get(key) if model is not None else None
        nested = _nested_model(info.annotation) if info is not None else None
        if nested is not None and isinstance(value, Mapping):
            flat.update(_flatten(nested, value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def _effective_values(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _effective_values(value, f"{prefix}{name}.")
        elif isinstance(value, dict):
            # A table of models ([prices."model"]) shows as plain JSON.
            yield prefix + name, {
                key: item.model_dump(exclude_none=True) if isinstance(item, BaseModel) else item
                for key, item in value.items()
            }
        else:
            yield prefix + name, value


def _deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        old = merged.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = _deep_merge(old, value)
        else:
            merged[key] = value
    return merged


def _nest(overrides: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        entry: Any = value
        for part in reversed(key.split(".")):
            entry = {part: entry}
        nested = _deep_merge(nested, entry)
    return nested


# --- sources ------------------------------------------------------------------------------


def _find_config_file(config_file: Path | None, env: Mapping[str, str]) -> tuple[Path | None, Path]:
    """(the file to read or None, the path considered); an explicit path must be a file."""
    if config_file is not None:
        explicit, given_by = Path(config_file).expanduser(), "--config"
    elif env.get(CONFIG_ENV):
        explicit, given_by = Path(env[CONFIG_ENV]).expanduser(), f"${CONFIG_ENV}"
    else:
        xdg = env.get("XDG_CONFIG_HOME", "")
        # The XDG spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else _home(env) / ".config"
        default = base / "memoryd" / "config.toml"
        return (default if default.is_file() else None), default
    if not explicit.exists():
        raise ConfigError(f"config: {explicit}: no such config file (given by {given_by})")
    if not explicit.is_file():
        raise ConfigError(f"config: {explicit}: not a regular file (given by {given_by})")
    return explicit, explicit


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def _file_error(path: Path | None, err: Exception) -> ConfigError:
    if isinstance(err, tomllib.TOMLDecodeError):
        found = re.fullmatch(r"(.*) \(at line (\d+), column \d+\)", str(err))
        if found:
            return ConfigError(f"config: {path}: invalid TOML at line {found[2]}: {found[1]}")
        return ConfigError(f"config: {path}: invalid TOML: {err}")
    if isinstance(err, UnicodeDecodeError):
        return ConfigError(f"config: {path}: not UTF-8 text")
    if isinstance(err, OSError):
        return ConfigError(f"config: {path}: cannot read: {err.strerror or err}")
    return ConfigError(f"config: {path}: {err}")


def _setting_env_vars(env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The ``MEMORYD_*`` variables that name a setting, with their paths; others are refused.

    pydantic-settings ignores an unknown variable, so a typo would silently do nothing.
    """
    found: dict[str, tuple[str, ...]] = {}
    for name, value in env.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in RESERVED_ENV:
            continue
        target = _env_target(tuple(upper[len(ENV_PREFIX) :].lower().split(ENV_DELIMITER)))
        if target is None:
            known = [_env_name(leaf) for leaf in sorted(_LEAVES)]
            close = difflib.get_close_matches(upper, known, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"config: unknown environment variable {name} (no such setting){hint}"
            )
        path, is_json = target
        if is_json:
            try:
                json.loads(value)
            except ValueError:
                key = ".".join(path)
                raise ConfigError(
                    f"config: {key} = {_shown(key, value)} (from env {name}): "
                    "not valid JSON (a list or table must be written as JSON)"
                ) from None
        found[name] = path
    return found


def _env_target(parts: tuple[str, ...]) -> tuple[tuple[str, ...], bool] | None:
    """(dotted path, value must be JSON) of an env variable's name parts, or None if unknown."""
    model: type[BaseModel] = Settings
    for index, part in enumerate(parts):
        info = model.model_fields.get(part)
        if info is None:
            return None
        path, last = parts[: index + 1], index == len(parts) - 1
        nested = _nested_model(info.annotation)
        if nested is not None:
            if last:
                return path, True
            model = nested
            continue
        origin = get_origin(info.annotation)
        if origin is dict:  # deeper parts are keys of the table
            return path, last
        return (path, origin is list) if last else None
    return None


def _env_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", ENV_DELIMITER).upper()


def _mark(origins: dict[str, str], flat: Mapping[str, Any], origin: str) -> None:
    for key in flat:
        origins[key] = origin
        for leaf in _LEAVES:
            if leaf.startswith(key + "."):
                origins[leaf] = origin


def _mark_env(
    origins: dict[str, str], flat: Mapping[str, Any], env_vars: Mapping[str, tuple[str, ...]]
) -> None:
    """Attribute each key from the environment to the most specific variable that set it."""
    for key in flat:
        parts = tuple(key.split("."))
        matches = [
            (len(path), name) for name, path in env_vars.items() if parts[: len(path)] == path
        ]
        if matches:
            _mark(origins, {key: None}, f"env {max(matches)[1]}")


def _with_anthropic_fallbacks(
    settings: Settings, origins: dict[str, str], env: Mapping[str, str]
) -> Settings:
    """Fill an unset API key / base URL from the SDK's own variables, recording the source."""
    update: dict[str, Any] = {}
    if settings.anthropic.api_key is None and env.get(ANTHROPIC_API_KEY_ENV):
        update["api_key"] = SecretStr(env[ANTHROPIC_API_KEY_ENV])
        origins[API_KEY] = f"env {ANTHROPIC_API_KEY_ENV}"
    if not settings.anthropic.base_url and env.get(ANTHROPIC_BASE_URL_ENV):
        update["base_url"] = env[ANTHROPIC_BASE_URL_ENV]
        origins["anthropic.base_url"] = f"env {ANTHROPIC_BASE_URL_ENV}"
    if not update:
        return settings
    return settings.model_copy(update={"anthropic": settings.anthropic.model_copy(update=update)})


# --- errors and display -----------------------------------------------------------------------


def _describe(err: ValidationError, origins: Mapping[str, str], fallback: str = "default") -> str:
    """One line for the first problem of ``err``: key, value (masked), source and reason."""
    problems = err.errors(include_url=False)
    problem = problems[0]
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    key = ".".join(str(part) for part in problem["loc"])
    reason = problem["msg"].removeprefix("Value error, ")

    def where(dotted: str) -> str:
        parts = dotted.split(".")
        while parts and ".".join(parts) not in origins:
            parts.pop()
        origin = origins[".".join(parts)] if parts else fallback
        if origin == "default":
            return "(default)"
        return f"(in {origin})" if origin.startswith("file ") else f"(from {origin})"

    if problem["type"] == "extra_forbidden":
        close = difflib.get_close_matches(key, sorted(_LEAVES), n=1, cutoff=0.8)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"config: unknown key '{key}' {where(key)}{hint}{more}"
    context = problem.get("ctx") or {}
    if problem["type"] == "threshold_order":
        shown = " and ".join(
            f"{name} = {_shown(name, context[name])} {where(name)}"
            for name in context["keys"].split()
        )
        return f"config: {shown}: {reason}{more}"
    return f"config: {key} = {_shown(key, problem['input'])} {where(key)}: {reason}{more}"


def _shown(key: str, value: Any) -> str:
    """``repr`` of a value for an error line, never showing a secret, kept short."""
    if key == API_KEY or key.startswith(API_KEY + ".") or API_KEY.startswith(key + "."):
        return "<hidden>"  # the key itself, or a table that may hold it
    if key == HEADERS:
        value = _mask_headers(value) if isinstance(value, Mapping) else "<hidden>"
    elif key.startswith(HEADERS + ".") and _SECRET_HEADER.search(key[len(HEADERS) + 1 :]):
        return "<hidden>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mask_headers(headers: Mapping[Any, Any]) -> dict[Any, Any]:
    return {
        name: "(masked)" if _SECRET_HEADER.search(str(name)) else value
        for name, value in headers.items()
    }


def _render_value(key: str, value: Any) -> str:
    if key == API_KEY:
        return MASKED if value is not None else UNSET
    if key == HEADERS:
        value = _mask_headers(value)
    if isinstance(value, Path):
        value = str(value)
    elif isinstance(value, list):
        value = [str(item) if isinstance(item, Path) else item for item in value]
    return json.dumps(value, ensure_ascii=False)
