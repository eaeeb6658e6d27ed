"""The fast path's table of fields, derived from ``Settings``: ``memoryd/config/fields.py``.

``python -m memoryd.config.derive`` writes that module from the pydantic model (defaults,
bounds, kinds), so the model stays the one source of what each setting is; a test fails
when the written module differs from what the model gives now. A field with its own
validator, or one a model validator checks, is "validated" (the fast path takes only its
default) unless the fast path knows the check itself (``OWN_KINDS``);
docs/design.md#configuration.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from memoryd.config.fast import MODEL_CHECKS
from memoryd.config.schema import nested_model

FIELDS_MODULE = Path(__file__).with_name("fields.py")
OWN_KINDS = {
    "roots": "roots",
    "log_level": "log_level",
    "anthropic.default_headers": "headers",
    "anthropic.api_key": "api_key",
    "openai.default_headers": "headers",
    "openai.api_key": "api_key",
    "anthropic.base_url": "url",
    "openai.base_url": "url",
    "prices": "table",
    "sources": "list",
    "masking.exclude_tools": "names",
}
"""Fields whose kind the fast path checks in its own way (memoryd/config/fast.py)."""
_SCALARS: dict[Any, str] = {int: "int", float: "float", bool: "bool", str: "str"}
_HEADER = '''"""The fields of ``Settings`` for the fast path: dotted key -> (kind, default, bounds).

Written by ``python -m memoryd.config.derive`` from the pydantic model; do not edit (a test
fails when this differs from what the model gives). The kinds are described in
memoryd/config/fast.py.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Bounds = tuple[tuple[str, float], ...]

FIELDS: dict[str, tuple[str, Any, Bounds]] = {
'''


def derived_fields(model: type[BaseModel], prefix: str = "") -> dict[str, tuple[str, Any, Any]]:
    """The table of ``model``'s fields, walking into its sections."""
    table: dict[str, tuple[str, Any, Any]] = {}
    decorators = model.__pydantic_decorators__
    validated = {field for d in decorators.field_validators.values() for field in d.info.fields}
    validated |= {field for fields in MODEL_CHECKS.values() for field in fields}
    for name, info in model.model_fields.items():
        key = prefix + name
        annotation = info.annotation
        nested = nested_model(annotation)
        if nested is not None:
            table |= derived_fields(nested, key + ".")
            continue
        default = info.get_default(call_default_factory=True)
        bounds: list[tuple[str, float]] = []
        kind = OWN_KINDS.get(key) or ("validated" if name in validated else None)
        for rule in info.metadata:
            for op in ("gt", "ge", "lt", "le"):
                if getattr(rule, op, None) is not None:
                    bounds.append((op, getattr(rule, op)))
            if getattr(rule, "min_length", None) == 1:
                kind = kind or "nonempty-str"
        if kind is None:
            if typing.get_origin(annotation) is typing.Literal:
                kind = "literal:" + "|".join(typing.get_args(annotation))
            elif annotation in _SCALARS:
                kind = _SCALARS[annotation]
            else:
                raise TypeError(f"{key}: teach memoryd/config/fast.py the kind {annotation}")
        if key == "roots":
            default = [str(root) for root in default]
        table[key] = (kind, default, tuple(bounds))
    return table


def fields_module() -> str:
    """The text of memoryd/config/fields.py for the model as it is."""
    from memoryd.config.settings import Settings

    lines = [f"    {key!r}: {entry!r},\n" for key, entry in derived_fields(Settings).items()]
    return _HEADER + "".join(lines).replace("'", '"') + "}\n"


if __name__ == "__main__":
    # Silent, as a code generator run by hand: the rewritten file is the output.
    FIELDS_MODULE.write_text(fields_module())
