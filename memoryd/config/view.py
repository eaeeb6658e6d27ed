"""How the effective configuration is shown: ``memoryd config`` and its ``--json``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memoryd.config.schema import HEADER_KEYS, SECRET_KEYS, URL_KEYS, mask_headers, mask_url
from memoryd.config.settings import LoadedSettings

MASKED = "set (masked)"
UNSET = "unset"


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

    With ``masked`` (the default) the API key reads "set (masked)" or null, secret-looking
    header values and a password in a base URL are masked; ``masked=False`` shows them in clear.
    """
    values = loaded.settings.model_dump(mode="json")
    for name in ("anthropic", "openai"):
        section, shown = getattr(loaded.settings, name), values[name]
        api_key = section.api_key
        if masked:
            shown["api_key"] = MASKED if api_key is not None else None
            shown["default_headers"] = mask_headers(section.default_headers)
            shown["base_url"] = mask_url(section.base_url)
        else:
            shown["api_key"] = api_key.get_secret_value() if api_key is not None else None
    return {
        "config_file": str(loaded.config_path) if loaded.config_path else None,
        "settings": values,
        "sources": dict(loaded.sources),
    }


def _effective_values(model: BaseModel, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _effective_values(value, f"{prefix}{name}.")
        elif isinstance(value, dict):
            # A table of models ([prices."model"]) shows as plain JSON.
            yield (
                prefix + name,
                {
                    key: item.model_dump(exclude_none=True) if isinstance(item, BaseModel) else item
                    for key, item in value.items()
                },
            )
        elif isinstance(value, list) and any(isinstance(item, BaseModel) for item in value):
            # An array of tables ([[sources]]) shows as plain JSON.
            yield (
                prefix + name,
                [
                    item.model_dump(mode="json") if isinstance(item, BaseModel) else item
                    for item in value
                ],
            )
        else:
            yield prefix + name, value


def _render_value(key: str, value: Any) -> str:
    if key in SECRET_KEYS:
        return MASKED if value is not None else UNSET
    if key in HEADER_KEYS:
        value = mask_headers(value)
    if key in URL_KEYS and isinstance(value, str):
        value = mask_url(value)
    if isinstance(value, Path):
        value = str(value)
    elif isinstance(value, list):
        value = [str(item) if isinstance(item, Path) else item for item in value]
    return json.dumps(value, ensure_ascii=False)
