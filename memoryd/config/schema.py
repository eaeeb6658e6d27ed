"""Helpers of the configuration loader that do not depend on the Settings model itself.

Walking a model's fields as dotted keys, finding the file, resolving ``MEMORYD_*``
variables, recording where each value came from, and describing a refusal in one line
with secrets hidden (docs/design.md#configuration).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, get_origin

from pydantic import BaseModel, ValidationError

from memoryd import strict_json
from memoryd.config.sources import (
    ENV_DELIMITER,
    ENV_PREFIX,
    RESERVED_ENV,
)
from memoryd.errors import ConfigError

API_KEY = "anthropic.api_key"
HEADERS = "anthropic.default_headers"
SECRET_KEYS = (API_KEY, "openai.api_key")
HEADER_KEYS = (HEADERS, "openai.default_headers")
URL_KEYS = ("anthropic.base_url", "openai.base_url")
"""URLs that may carry a password (``http://user:PASS@host``): shown with it masked."""
_SECRET_HEADER = re.compile(r"authorization|token|key|secret|password|cookie|auth", re.IGNORECASE)


# --- schema walking ---------------------------------------------------------------------


def nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def leaf_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, info in model.model_fields.items():
        nested = nested_model(info.annotation)
        if nested is None:
            yield prefix + name
        else:
            yield from leaf_keys(nested, f"{prefix}{name}.")


def flatten(
    model: type[BaseModel] | None, data: Mapping[str, Any], prefix: str = ""
) -> dict[str, Any]:
    """Dotted leaf keys of ``data``, walking into nested models; unknown keys are leaves too."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        info = model.model_fields.get(key) if model is not None else None
        nested = nested_model(info.annotation) if info is not None else None
        if nested is not None and isinstance(value, Mapping):
            flat.update(flatten(nested, value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        old = merged.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(old, value)
        else:
            merged[key] = value
    return merged


def nest(overrides: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        entry: Any = value
        for part in reversed(key.split(".")):
            entry = {part: entry}
        nested = deep_merge(nested, entry)
    return nested


def scalar_type_problems(
    model: type[BaseModel],
    data: Mapping[str, Any],
    where: Callable[[str], str],
    from_text: bool = False,
    prefix: str = "",
) -> dict[str, str]:
    """Every value of the wrong kind for a number or text setting: its dotted key and one
    line that says so.

    pydantic's lax mode would turn ``"4000"`` into 4000 and ``true`` into 1; a TOML file or
    a JSON value says what it means, so a string where a number belongs and a boolean where
    a count belongs are mistakes (docs/design.md#configuration). ``from_text`` marks
    environment variables, whose scalars are always strings for pydantic to parse; there
    only booleans inside JSON values are refused. Anything else is left to pydantic.
    """
    found: dict[str, str] = {}
    for key, value in data.items():
        info = model.model_fields.get(key)
        if info is None:
            continue
        dotted = prefix + key
        nested = nested_model(info.annotation)
        if nested is not None:
            if isinstance(value, Mapping):
                found |= scalar_type_problems(nested, value, where, from_text, f"{dotted}.")
            continue
        problem = _wrong_kind(info.annotation, value, from_text)
        if problem:
            found[dotted] = f"config: {dotted} = {shown(dotted, value)} {where(dotted)}: {problem}"
    return found


def _wrong_kind(annotation: Any, value: Any, from_text: bool) -> str | None:
    if annotation not in (int, float, str) and get_origin(annotation) is not Literal:
        return None
    if from_text and isinstance(value, str):
        return None
    if annotation in (int, float) and isinstance(value, bool):
        return f"must be a number, not {str(value).lower()}"
    if annotation is int and not isinstance(value, int):
        return "must be a whole number" + (", not a string" if isinstance(value, str) else "")
    if annotation is float and not isinstance(value, int | float):
        return "must be a number" + (", not a string" if isinstance(value, str) else "")
    if (annotation is str or get_origin(annotation) is Literal) and not isinstance(value, str):
        return "must be a string"
    return None


# --- sources ------------------------------------------------------------------------------


def file_error(path: Path | None, err: Exception) -> ConfigError:
    if isinstance(err, tomllib.TOMLDecodeError):
        found = re.fullmatch(r"(.*) \(at line (\d+), column \d+\)", str(err))
        if found:
            return ConfigError(f"config: {path}: invalid TOML at line {found[2]}: {found[1]}")
        return ConfigError(f"config: {path}: invalid TOML: {err}")
    if isinstance(err, UnicodeDecodeError):
        return ConfigError(f"config: {path}: not UTF-8 text")
    if isinstance(err, OSError):
        return ConfigError(f"config: {path}: cannot read: {err.strerror or err}")
    if isinstance(err, RecursionError):
        return ConfigError(f"config: {path}: invalid TOML: nested too deeply")
    return ConfigError(f"config: {path}: {err}")


def setting_env_vars(
    env: Mapping[str, str], model: type[BaseModel], leaves: frozenset[str]
) -> dict[str, tuple[str, ...]]:
    """The ``MEMORYD_*`` variables that name a setting, with their paths; others are refused.

    pydantic-settings ignores an unknown variable, so a typo would silently do nothing.
    """
    found: dict[str, tuple[str, ...]] = {}
    for name, value in env.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in RESERVED_ENV:
            continue
        target = _env_target(model, tuple(upper[len(ENV_PREFIX) :].lower().split(ENV_DELIMITER)))
        if target is None:
            known = [_env_name(leaf) for leaf in sorted(leaves)]
            close = difflib.get_close_matches(upper, known, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"config: unknown environment variable {name} (no such setting){hint}"
            )
        path, is_json = target
        if is_json:
            try:
                strict_json.loads(value)
            except strict_json.JSONProblem as problem:
                key = ".".join(path)
                raise ConfigError(
                    f"config: {key} = {shown(key, value)} (from env {name}): "
                    f"{problem} (a list or table must be written as JSON)"
                ) from None
        found[name] = path
    return found


def _env_target(
    model: type[BaseModel], parts: tuple[str, ...]
) -> tuple[tuple[str, ...], bool] | None:
    """(dotted path, value must be JSON) of an env variable's name parts, or None if unknown."""
    for index, part in enumerate(parts):
        info = model.model_fields.get(part)
        if info is None:
            return None
        path, last = parts[: index + 1], index == len(parts) - 1
        nested = nested_model(info.annotation)
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


def mark(
    origins: dict[str, str], flat: Mapping[str, Any], origin: str, leaves: frozenset[str]
) -> None:
    for key in flat:
        origins[key] = origin
        for leaf in leaves:
            if leaf.startswith(key + "."):
                origins[leaf] = origin


def mark_env(
    origins: dict[str, str],
    flat: Mapping[str, Any],
    env_vars: Mapping[str, tuple[str, ...]],
    leaves: frozenset[str],
) -> None:
    """Attribute each key from the environment to the most specific variable that set it."""
    for key in flat:
        parts = tuple(key.split("."))
        matches = [
            (len(path), name) for name, path in env_vars.items() if parts[: len(path)] == path
        ]
        if matches:
            mark(origins, {key: None}, f"env {max(matches)[1]}", leaves)


# --- errors ------------------------------------------------------------------------------


def describe(
    err: ValidationError,
    origins: Mapping[str, str],
    leaves: frozenset[str],
    fallback: str = "default",
    known: Mapping[str, str] | None = None,
) -> str:
    """One line for each problem of ``err`` (key, value masked, source and reason), after
    the lines of ``known`` (problems found before validation), a key said once."""
    lines = dict(known or {})
    for problem in err.errors(include_url=False):
        key = ".".join(str(part) for part in problem["loc"])
        lines.setdefault(key, _one_problem(problem, key, origins, leaves, fallback))
    return "\n".join(lines.values())


def _one_problem(
    problem: Any, key: str, origins: Mapping[str, str], leaves: frozenset[str], fallback: str
) -> str:
    reason = problem["msg"].removeprefix("Value error, ")

    def where(dotted: str) -> str:
        return origin_text(dotted, origins, fallback)

    if problem["type"] == "extra_forbidden":
        close = difflib.get_close_matches(key, sorted(leaves), n=1, cutoff=0.8)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"config: unknown key '{key}' {where(key)}{hint}"
    context = problem.get("ctx") or {}
    if "keys" in context:  # a problem of several keys together (model validators)
        values = " and ".join(
            f"{name} = {shown(name, context[name])} {where(name)}"
            for name in context["keys"].split()
        )
        return f"config: {values}: {reason}"
    return f"config: {key} = {shown(key, problem['input'])} {where(key)}: {reason}"


def origin_text(dotted: str, origins: Mapping[str, str], fallback: str = "default") -> str:
    """Where the value of ``dotted`` came from, for an error line: "(in file F)", "(from
    env VAR)", "(default)"; a key without a record takes its nearest recorded parent's."""
    parts = dotted.split(".")
    while parts and ".".join(parts) not in origins:
        parts.pop()
    origin = origins[".".join(parts)] if parts else fallback
    if origin == "default":
        return "(default)"
    return f"(in {origin})" if origin.startswith("file ") else f"(from {origin})"


def shown(key: str, value: Any) -> str:
    """``repr`` of a value for an error line, never showing a secret, kept short."""
    for secret in SECRET_KEYS:
        if key == secret or key.startswith(secret + ".") or secret.startswith(key + "."):
            return "<hidden>"  # the key itself, or a table that may hold it
    if key in URL_KEYS and isinstance(value, str):
        value = mask_url(value)
    for headers in HEADER_KEYS:
        if key == headers:
            value = mask_headers(value) if isinstance(value, Mapping) else "<hidden>"
        elif key.startswith(headers + ".") and _SECRET_HEADER.search(key[len(headers) + 1 :]):
            return "<hidden>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def mask_url(url: str) -> str:
    """``url`` with the password of its user part masked, if it has one (pure)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    user_part, at, host = authority.rpartition("@")
    if not at or ":" not in user_part:
        return url
    user = user_part.split(":", 1)[0]
    return f"{scheme}://{user}:(masked)@{host}{slash}{path}"


def mask_headers(headers: Mapping[Any, Any]) -> dict[Any, Any]:
    return {
        name: "(masked)" if _SECRET_HEADER.search(str(name)) else value
        for name, value in headers.items()
    }
