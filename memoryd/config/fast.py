"""A fast path to the configuration for ``memoryd status``, which orchestrators poll.

Building the pydantic ``Settings`` costs about 90 ms (pydantic-settings and the models'
schemas), several times a bare interpreter's start. This module reads the same file in
plain Python, and the ``MEMORYD_*`` setting variables as pydantic-settings reads them
(case-insensitive names nested with ``__``, text parsed as the field's kind, JSON for a list
or a table), and returns the values only when it is sure the full loader would accept them
and give the same values: every key known, every value of the exact kind and inside the
bounds that ``Settings`` declares, a variable's text in a form the full loader surely reads
the same way. In every other case it returns None and the caller loads ``Settings``, which
accepts or refuses with its one-line message: this path never refuses anything itself
(docs/design.md#configuration).

``FIELDS`` (memoryd/config/fields.py) is written from ``Settings`` by
``python -m memoryd.config.derive``, and a test fails when it differs from what the model
gives, so the model stays the one source of names, defaults and bounds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from memoryd import strict_json
from memoryd.config import toml_cache
from memoryd.config.fields import FIELDS
from memoryd.config.sources import (
    ENV_DELIMITER,
    ENV_PREFIX,
    LOG_LEVELS,
    RESERVED_ENV,
    WORKSPACE_KEYS,
    find_config_file,
    header_problem,
)
from memoryd.errors import MemorydError
from memoryd.files.paths import read_in
from memoryd.files.regular import read_file
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# kind: "int", "float", "bool", "str", "nonempty-str", "literal:a|b", "roots", "log_level",
# "names" (a list of strings), "headers" (a table of strings), "api_key" (a string, empty
# means unset), "table" (only an empty table is checked here; anything in it is for the
# full loader), "list" (only an empty list, likewise), "validated" (a validator of the model
# checks it: only its default value is taken here, any other value goes to the full
# loader), "url" (empty, or starting with http:// or https://). The table of every field's
# kind, default and bounds (FIELDS) is written from the model by memoryd/config/derive.py.
MODEL_CHECKS: dict[str, tuple[str, ...]] = {
    "_levels_in_order": (),  # checked here too: warning_at <= summarize_at <= critical_at
    "_metrics_stay_local": ("metrics_listen", "metrics_allow_remote"),
    "_idle_below_trigger": ("idle_compact_after", "idle_compact_at"),
    "_openai_named": (),  # checked here too: the openai backend names its server and model
}
"""The model validators of ``Settings``, with the fields this path leaves to them: with
those fields at their defaults each validator passes whatever the other fields hold."""
_TABLES = frozenset(key.split(".")[0] for key in FIELDS if "." in key)
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "gt": lambda value, bound: value > bound,
    "ge": lambda value, bound: value >= bound,
    "lt": lambda value, bound: value < bound,
    "le": lambda value, bound: value <= bound,
}


class _NotSure(Exception):
    """The fast path cannot vouch for a value: the full loader decides."""


@dataclass(frozen=True, slots=True)
class StatusSettings:
    """The settings ``memoryd status`` uses, read by the fast path; the attribute names and
    types are those of ``Settings``. ``values`` holds every checked value by dotted key."""

    roots: list[Path]
    max_depth: int
    token_limit: int
    warning_at: float
    summarize_at: float
    critical_at: float
    strategy: str
    max_line_bytes: int
    stale_after: float
    values: Mapping[str, Any]

    def for_workspace(self, workspace: Path) -> StatusSettings | None:
        """These settings with ``<workspace>/.memoryd/config.toml`` applied; None when the
        full loader must decide (a bad or unusual file), as ``settings_for_workspace``."""
        try:
            # As the full loader reads it: never through a symlink, never a FIFO.
            config = Workspace(workspace).config
            data = toml_cache.parsed(read_in(workspace, config), config)
        except FileNotFoundError:
            return self
        except (OSError, MemorydError, ValueError, RecursionError):
            return None
        if not data:
            return self
        if not set(data) <= WORKSPACE_KEYS:
            return None
        try:
            return _settings({**self.values, **_checked(_flatten(data))})
        except _NotSure:
            return None


def fast_status_settings(
    config_file: Path | None, env: Mapping[str, str], overrides: Mapping[str, Any]
) -> StatusSettings | None:
    """The settings from the file (or the defaults) when the full loader would surely give
    the same, else None. Raises ConfigError as the full loader does for an explicit
    ``--config`` or ``$MEMORYD_CONFIG`` that does not exist."""
    config_path, _ = find_config_file(config_file, env)
    try:
        from_env = _env_values(env)
    except _NotSure:
        return None
    data: dict[str, Any] = {}
    if config_path is not None:
        try:
            data = toml_cache.parsed(read_file(config_path), config_path, env)
        except (OSError, MemorydError, ValueError, RecursionError):
            return None
    try:
        values = {key: default for key, (_, default, _) in FIELDS.items()}
        values |= _checked(_flatten(data))
        values |= from_env
        values |= _checked({key: value for key, value in overrides.items() if value is not None})
        values["roots"] = _roots(values["roots"])
        return _settings(values)
    except _NotSure:
        return None


# Compiled on first use (re caches them): a start without variables pays nothing.
_ENV_INT = r"-?(?:0|[1-9][0-9]{0,17})"
_ENV_FLOAT = r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?"
_ENV_BOOLS = {"true": True, "1": True, "yes": True, "on": True}
_ENV_BOOLS |= {"false": False, "0": False, "no": False, "off": False}
_ENV_JSON_KINDS = frozenset({"roots", "names", "headers", "table", "list"})


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    """The checked values of the ``MEMORYD_*`` setting variables by dotted key; _NotSure
    for a variable the full loader may read otherwise, or refuse (an unknown name, a whole
    section or a table's key, two names for one key, a text of an unusual form)."""
    found: dict[str, Any] = {}
    for name, text in env.items():
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in RESERVED_ENV:
            continue
        key = ".".join(upper[len(ENV_PREFIX) :].lower().split(ENV_DELIMITER))
        if key not in FIELDS or key in found:
            raise _NotSure
        found[key] = _value(key, _env_parsed(FIELDS[key][0], text))
    return found


def _env_parsed(kind: str, text: str) -> Any:
    """``text`` as the value it stands for in a field of ``kind``, in the forms that
    pydantic-settings and pydantic's lax mode surely read the same way; _NotSure else."""
    if kind == "int" and re.fullmatch(_ENV_INT, text):
        return int(text)
    if kind == "float" and re.fullmatch(_ENV_FLOAT, text):
        return float(text)
    if kind == "bool" and text in _ENV_BOOLS:
        return _ENV_BOOLS[text]
    if kind in _ENV_JSON_KINDS:
        try:
            return strict_json.loads(text)
        except strict_json.JSONProblem:
            raise _NotSure from None
    if kind in ("int", "float", "bool", "validated"):
        raise _NotSure
    return text


def _settings(values: Mapping[str, Any]) -> StatusSettings:
    warning, summarize, critical = (
        values["warning_at"],
        values["summarize_at"],
        values["critical_at"],
    )
    if not warning <= summarize <= critical:
        raise _NotSure
    if (values["summarizer.backend"] == "openai" or values["openai.base_url"]) and not (
        values["openai.base_url"] and values["openai.model"]
    ):
        raise _NotSure
    return StatusSettings(
        roots=list(values["roots"]),
        max_depth=values["max_depth"],
        token_limit=values["token_limit"],
        warning_at=warning,
        summarize_at=summarize,
        critical_at=critical,
        strategy=values["strategy"],
        max_line_bytes=values["max_line_bytes"],
        stale_after=values["stale_after"],
        values=values,
    )


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = prefix + key
        if not prefix and key in _TABLES:
            if not isinstance(value, dict):
                raise _NotSure
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _checked(flat: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _value(key, value) for key, value in flat.items()}


def _value(key: str, value: Any) -> Any:
    """The value ``Settings`` would hold for ``value`` at ``key``; _NotSure otherwise."""
    if key not in FIELDS:
        raise _NotSure
    kind, default, bounds = FIELDS[key]
    if kind == "validated":
        if type(value) is not type(default) or value != default:
            raise _NotSure
        return value
    if kind == "int" and type(value) is int:
        number: float = value
    elif kind == "float" and type(value) in (int, float) and math.isfinite(value):
        number = float(value)
    else:
        return _other_value(kind, value)
    if not all(_COMPARE[op](number, bound) for op, bound in bounds):
        raise _NotSure
    return number


def _other_value(kind: str, value: Any) -> Any:
    text = value if type(value) is str else None
    if kind == "bool" and type(value) is bool:
        return value
    if text is not None and (
        kind == "str"
        or (kind == "nonempty-str" and text)
        or (kind.startswith("literal:") and text in kind.removeprefix("literal:").split("|"))
    ):
        return text
    if kind == "log_level" and text is not None and text.lower() in LOG_LEVELS:
        return text.lower()
    if kind == "names" and type(value) is list and all(type(v) is str for v in value):
        return list(value)
    if kind == "roots" and type(value) is list and all(type(v) is str and v for v in value):
        return list(value)
    if (
        kind == "headers"
        and type(value) is dict
        and all(type(k) is str and type(v) is str for k, v in value.items())
        and header_problem(value) is None
    ):
        return dict(value)
    if kind == "table" and value == {}:
        return {}
    if kind == "list" and value == []:
        return []  # [[sources]] entries are the full loader's to check
    if kind == "api_key" and text is not None:
        return None  # validated; status never needs the key itself
    if kind == "url" and text is not None and _url_with_scheme(text):
        return text
    raise _NotSure


def _url_with_scheme(text: str) -> bool:
    """As the full loader checks it (config/sections.py); anything else goes to it."""
    lowered = text.lower()
    return not text or (
        lowered.startswith(("http://", "https://"))
        and len(text) > lowered.index("//") + 2
        and text[lowered.index("//") + 2] not in "/ \t\n"
    )


def _roots(roots: list[str] | list[Path]) -> list[Path]:
    return [Path(root).expanduser().absolute() for root in roots]
