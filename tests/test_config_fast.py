"""The fast configuration path of ``memoryd status`` gives exactly what the full loader
gives, or steps aside (None) for the full loader to decide; it never accepts what the full
loader refuses, and its table of fields mirrors ``Settings``."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from memoryd.config.fast import FIELDS, MODEL_CHECKS, fast_status_settings
from memoryd.config.settings import Settings, load_settings, settings_for_workspace
from memoryd.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
STATUS_FIELDS = (
    "roots",
    "max_depth",
    "token_limit",
    "warning_at",
    "summarize_at",
    "critical_at",
    "strategy",
    "max_line_bytes",
    "stale_after",
)
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


def models(model: type[BaseModel]) -> list[type[BaseModel]]:
    found = [model]
    for info in model.model_fields.values():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += models(annotation)
    return found


def derived_fields(model: type[BaseModel], prefix: str = "") -> dict[str, tuple[str, Any, Any]]:
    """The table FIELDS should be, derived from the pydantic model: a field with its own
    validator, or one that a model validator checks, is "validated" unless the fast path
    knows the validator (OWN_KINDS)."""
    table: dict[str, tuple[str, Any, Any]] = {}
    decorators = model.__pydantic_decorators__
    validated = {field for d in decorators.field_validators.values() for field in d.info.fields}
    validated |= {field for fields in MODEL_CHECKS.values() for field in fields}
    for name, info in model.model_fields.items():
        key = prefix + name
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            table |= derived_fields(annotation, key + ".")
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
            else:
                assert isinstance(annotation, type), (key, annotation)
                kind = {int: "int", float: "float", bool: "bool", str: "str"}[annotation]
        if key == "roots":
            default = [str(root) for root in default]
        table[key] = (kind, default, tuple(bounds))
    return table


def test_the_fast_table_mirrors_settings() -> None:
    """When this fails, copy the printed table into memoryd/config/fast.py FIELDS (and teach
    the fast path any new kind, or make it "other" so that the full loader decides)."""
    expected = derived_fields(Settings)
    assert expected == FIELDS, "\n".join(f"    {k!r}: {v!r}," for k, v in expected.items())


def test_the_fast_path_knows_every_model_validator() -> None:
    """A new model validator may refuse a combination the fast path would accept: name it
    in MODEL_CHECKS with the fields it checks (or check it in the fast path)."""
    found = {name for m in models(Settings) for name in m.__pydantic_decorators__.model_validators}
    assert found == set(MODEL_CHECKS)


CASES = [
    "",
    (REPO / "config" / "memoryd.toml").read_text(),
    'roots = ["~/agents", "/srv/agents"]\ntoken_limit = 4000\nstrategy = "rolling"\n',
    "warning_at = 0.5\nsummarize_at = 0.6\ncritical_at = 0.6\n",
    'log_level = "WARNING"\n[anthropic]\napi_key = ""\ndefault_headers = {x = "1"}\n',
    "max_line_bytes = 1024\nstale_after = 60\n[memory]\nthreshold = 5\n",
    'token_limit = "4000"\n',
    "workers = true\n",
    "token_limit = 4000.0\n",
    "token_limit = -3\n",
    "drain_seconds = inf\n",
    "checkin_interval = nan\n",
    "warning_at = 0.82\n",
    "summarize_at = 0.9\n",
    "tokn_limit = 5\n",
    "[rolling]\nmesages = 1\n",
    "rolling = 3\n",
    '[prices."claude-haiku-4-5"]\ninput = 1.0\noutput = 5.0\n',
    'log_level = "loud"\n',
    'strategy = "bogus"\n',
    'roots = ""\n',
    "roots = []\n",
    "token_limit = \n",
    '[anthropic]\nmodel = ""\n',
    "[anthropic]\ntimeout = 1e300\n",
    "idle_compact_after = 60\nidle_compact_at = 0.9\n",
    'metrics_listen = "0.0.0.0:9100"\n',
    "summarize_at = 0.5\nwarning_at = 0.4\n",
    '[masking]\nexclude_tools = ["TodoWrite", "memory"]\ntool_input_chars = 2000\n',
    "[masking]\nexclude_tools = [1]\n",
    '[masking]\nexclude_tools = "TodoWrite"\n',
    "[masking]\ntool_input_chars = 0\nmedia = false\n",
]


def status_values(settings: Any) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in STATUS_FIELDS}


@pytest.mark.parametrize("text", CASES)
def test_the_fast_path_agrees_with_the_full_loader_or_steps_aside(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "memoryd.toml"
    path.write_text(text)
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    try:
        full: Any = load_settings(path, env=env).settings
    except ConfigError:
        full = None
    fast = fast_status_settings(path, env, {})
    if full is None:
        assert fast is None
    elif fast is not None:
        assert status_values(fast) == status_values(full)


def test_the_shipped_config_and_no_config_take_the_fast_path(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert fast_status_settings(REPO / "config" / "memoryd.toml", env, {}) is not None
    assert fast_status_settings(None, env, {}) is not None


def test_excluded_tools_take_the_fast_path_with_the_full_loaders_value(tmp_path: Path) -> None:
    path = tmp_path / "memoryd.toml"
    path.write_text('[masking]\nexclude_tools = ["TodoWrite"]\ntool_inputs = false\n')
    env = {"HOME": str(tmp_path)}
    fast = fast_status_settings(path, env, {})
    assert fast is not None and fast.values["masking.exclude_tools"] == ["TodoWrite"]
    assert load_settings(path, env=env).settings.masking.exclude_tools == ["TodoWrite"]


def test_any_memoryd_setting_variable_sends_status_to_the_full_loader(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "MEMORYD_TOKEN_LIMIT": "4000"}
    assert fast_status_settings(None, env, {}) is None


def test_a_missing_explicit_file_is_refused_like_the_full_loader(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        fast_status_settings(tmp_path / "nope.toml", {}, {})


WORKSPACE_CASES = [
    "token_limit = 5000\n",
    'strategy = "checkpoint"\nwarning_at = 0.6\n',
    "[rolling]\ntoken_threshold = 100\n",
    "token_limit = -3\n",
    'token_limit = "5000"\n',
    "warning_at = 0.95\n",
    'roots = ["/elsewhere"]\n',
    "keep_first = 2\n",
    "",
]


@pytest.mark.parametrize("text", WORKSPACE_CASES)
def test_a_workspace_config_is_applied_as_the_full_loader_does_or_left_to_it(
    tmp_path: Path, text: str
) -> None:
    (tmp_path / ".memoryd").mkdir()
    (tmp_path / ".memoryd" / "config.toml").write_text(text)
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    base_fast = fast_status_settings(None, env, {})
    assert base_fast is not None
    try:
        full: Any = settings_for_workspace(load_settings(env=env).settings, tmp_path)
    except ConfigError:
        full = None
    fast = base_fast.for_workspace(tmp_path)
    if full is None:
        assert fast is None
    elif fast is not None:
        assert status_values(fast) == status_values(full)


def test_status_with_the_shipped_config_does_not_import_pydantic(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    probe = (
        "import io, json, sys\n"
        "from memoryd.cli import main\n"
        "code = main(sys.argv[1:], io.StringIO())\n"
        "print(json.dumps([code, 'pydantic' in sys.modules]))\n"
    )
    config = str(REPO / "config" / "memoryd.toml")
    done = subprocess.run(
        [sys.executable, "-c", probe, "status", str(ws), "--json", "--config", config],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [0, False]
