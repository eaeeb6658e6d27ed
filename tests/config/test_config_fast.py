"""The fast configuration path of ``memoryd status`` gives exactly what the full loader
gives, or steps aside (None) for the full loader to decide; it never accepts what the full
loader refuses, and its table of fields mirrors ``Settings``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from memoryd.config.derive import FIELDS_MODULE, derived_fields, fields_module
from memoryd.config.fast import MODEL_CHECKS, fast_status_settings
from memoryd.config.fields import FIELDS
from memoryd.config.settings import Settings, load_settings, settings_for_workspace
from memoryd.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
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


def models(model: type[BaseModel]) -> list[type[BaseModel]]:
    found = [model]
    for info in model.model_fields.values():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += models(annotation)
    return found


def test_the_fast_table_is_the_one_the_model_gives() -> None:
    """When this fails, run ``python -m memoryd.config.derive`` (and teach the fast path any
    new kind it names, or list the field in OWN_KINDS)."""
    assert FIELDS_MODULE.read_text() == fields_module()
    assert derived_fields(Settings) == FIELDS


def test_a_derived_table_follows_the_model() -> None:
    """The table follows a change of the model: a new bound, a new default, a new field."""

    class Section(BaseModel):
        size: int = Field(default=7, ge=2, le=9)

    class Model(BaseModel):
        level: float = Field(default=0.5, gt=0, lt=1)
        mode: typing.Literal["a", "b"] = "b"
        name: str = Field(default="x", min_length=1)
        section: Section = Field(default_factory=Section)

    assert derived_fields(Model) == {
        "level": ("float", 0.5, (("gt", 0), ("lt", 1))),
        "mode": ("literal:a|b", "b", ()),
        "name": ("nonempty-str", "x", ()),
        "section.size": ("int", 7, (("ge", 2), ("le", 9))),
    }


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


ENV_NAMES = [
    "MEMORYD_TOKEN_LIMIT",
    "memoryd_token_limit",
    "MEMORYD_WARNING_AT",
    "MEMORYD_SUMMARIZE_AT",
    "MEMORYD_CRITICAL_AT",
    "MEMORYD_MAX_DEPTH",
    "MEMORYD_STALE_AT",
    "MEMORYD_STALE_AFTER",
    "MEMORYD_STRATEGY",
    "MEMORYD_ROOTS",
    "MEMORYD_INDEX_ARCHIVE",
    "MEMORYD_LOG_LEVEL",
    "MEMORYD_LOG_FORMAT",
    "MEMORYD_METRICS_LISTEN",
    "MEMORYD_IDLE_COMPACT_AFTER",
    "MEMORYD_SUMMARIZER__BACKEND",
    "MEMORYD_SUMMARIZER",
    "MEMORYD_SUMMARIZER__MIN_RETENTION",
    "MEMORYD_Summarizer__Max_Summary_Tokens",
    "MEMORYD_ANTHROPIC__MODEL",
    "MEMORYD_ANTHROPIC__API_KEY",
    "MEMORYD_ANTHROPIC__DEFAULT_HEADERS",
    "MEMORYD_ANTHROPIC__DEFAULT_HEADERS__X_TEAM",
    "MEMORYD_OPENAI__BASE_URL",
    "MEMORYD_OPENAI__MODEL",
    "MEMORYD_MASKING__ENABLED",
    "MEMORYD_MASKING__EXCLUDE_TOOLS",
    "MEMORYD_MASKING__TARGET",
    "MEMORYD_ROLLING__TOKEN_THRESHOLD",
    "MEMORYD_PRICES",
    "MEMORYD_SOURCES",
    "MEMORYD_MEMORY__MAX_ENTRY_BYTES",
    "MEMORYD_CONFIG",
    "MEMORYD_",
    "MEMORYD_MASKING____ENABLED",
]
ENV_TEXTS = [
    "",
    "0",
    "1",
    "-1",
    "-0",
    "007",
    "4000",
    " 4000",
    "4000 ",
    "4_000",
    "+4000",
    "4000.0",
    "0.5",
    "0.75",
    ".5",
    "1e3",
    "1E-1",
    "0.9000000000000000000001",
    "99999999999999999999999",
    "inf",
    "nan",
    "true",
    "false",
    "True",
    "FALSE",
    "yes",
    "no",
    "on",
    "off",
    "t",
    "y",
    "2",
    "rolling",
    "checkpoint",
    "Rolling",
    "extractive",
    "openai",
    "debug",
    "WARNING",
    "loud",
    "json",
    "http://127.0.0.1:8080/v1",
    "ftp://x",
    "127.0.0.1:9100",
    "0.0.0.0:9100",
    "m",
    "sk-secret",
    "[]",
    '["/srv/agents"]',
    '["~/a", "/b"]',
    '[""]',
    "[1]",
    "[true]",
    '["TodoWrite"]',
    "{}",
    '{"x": "1"}',
    '{"x\\ny": "1"}',
    '{"backend": "extractive"}',
    "[",
    "null",
    '"rolling"',
]
ENV_FILES = ["", "token_limit = 4000\n[masking]\ntarget = 0.5\n", "summarize_at = 0.75\n"]


def every_value(settings: Any) -> dict[str, Any]:
    """The value of every key the fast path checks, read from the full loader's Settings,
    as the fast path holds it (a secret key is not kept: None)."""
    found: dict[str, Any] = {}
    for key in FIELDS:
        value = settings
        for part in key.split("."):
            value = getattr(value, part)
        if key.endswith("api_key"):
            value = None
        elif key == "prices":
            value = dict(value)
        elif isinstance(value, list) and key != "roots":
            value = list(value)
        found[key] = value
    return found


@settings(max_examples=400, deadline=None)
@given(
    variables=st.dictionaries(
        st.sampled_from(ENV_NAMES), st.sampled_from(ENV_TEXTS), min_size=1, max_size=4
    ),
    file_text=st.sampled_from(ENV_FILES),
)
def test_memoryd_variables_are_read_as_the_full_loader_reads_them_or_left_to_it(
    tmp_path_factory: pytest.TempPathFactory, variables: dict[str, str], file_text: str
) -> None:
    """Over many variables, names and texts: wherever the full loader refuses, the fast
    path steps aside; wherever the fast path answers, every value equals the full loader's."""
    folder = tmp_path_factory.mktemp("env")
    path = folder / "memoryd.toml"
    path.write_text(file_text)
    env = {"HOME": str(folder), "XDG_CONFIG_HOME": str(folder / "xdg"), **variables}
    env.pop("MEMORYD_CONFIG", None)  # an explicit --config is given
    try:
        full: Any = load_settings(path, env=env).settings
    except ConfigError:
        full = None
    fast = fast_status_settings(path, env, {})
    if full is None:
        assert fast is None
    elif fast is not None:
        assert status_values(fast) == status_values(full)
        assert dict(fast.values) == {**every_value(full), "roots": fast.roots}


def test_each_memoryd_variable_alone_is_read_as_the_full_loader_reads_it_or_left_to_it(
    tmp_path: Path,
) -> None:
    """Every name with every text, one variable at a time, over the shipped file."""
    config = REPO / "config" / "memoryd.toml"
    wrong, taken = [], 0
    for name in ENV_NAMES:
        for text in ENV_TEXTS:
            env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), name: text}
            try:
                full: Any = load_settings(config, env=env).settings
            except ConfigError:
                full = None
            fast = fast_status_settings(config, env, {})
            taken += fast is not None
            if fast is not None and (
                full is None or dict(fast.values) != {**every_value(full), "roots": fast.roots}
            ):
                wrong.append((name, text))
    assert wrong == []
    assert taken > len(ENV_NAMES) * 3  # the fast path does answer for most usual forms


USUAL_ENV = {
    "MEMORYD_ROOTS": '["/srv/agents", "~/agents"]',
    "MEMORYD_TOKEN_LIMIT": "120000",
    "MEMORYD_WARNING_AT": "0.6",
    "MEMORYD_STRATEGY": "rolling",
    "MEMORYD_SUMMARIZER__BACKEND": "extractive",
    "MEMORYD_LOG_LEVEL": "WARNING",
    "MEMORYD_MASKING__ENABLED": "false",
    "MEMORYD_MASKING__EXCLUDE_TOOLS": '["TodoWrite"]',
    "memoryd_rolling__token_threshold": "9000",
    "MEMORYD_OPENAI__BASE_URL": "http://127.0.0.1:8080/v1",
    "MEMORYD_OPENAI__MODEL": "qwen",
    "MEMORYD_ANTHROPIC__API_KEY": "sk-not-a-real-key",
}


def test_usual_memoryd_variables_take_the_fast_path_with_the_full_loaders_values(
    tmp_path: Path,
) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **USUAL_ENV}
    config = REPO / "config" / "memoryd.toml"
    fast = fast_status_settings(config, env, {})
    full = load_settings(config, env=env).settings
    assert fast is not None
    assert status_values(fast) == status_values(full)
    assert dict(fast.values) == {**every_value(full), "roots": fast.roots}
    assert fast.token_limit == 120000 and fast.strategy == "rolling"
    assert fast.roots == [Path("/srv/agents"), Path("~/agents").expanduser()]


@pytest.mark.parametrize(
    "variables",
    [
        {"MEMORYD_TOKN_LIMIT": "4000"},  # unknown: the full loader names it
        {"MEMORYD_TOKEN_LIMIT": "lots"},
        {"MEMORYD_TOKEN_LIMIT": "-3"},
        {"MEMORYD_ROOTS": "/srv/agents"},  # a list must be JSON
        {"MEMORYD_SUMMARIZER": '{"backend": "extractive"}'},  # a whole section
        {"MEMORYD_TOKEN_LIMIT": "4000", "memoryd_token_limit": "5000"},  # one key twice
        {"MEMORYD_WARNING_AT": "0.9"},  # above summarize_at
        {"MEMORYD_SUMMARIZER__BACKEND": "openai"},  # without its server and model
    ],
)
def test_a_variable_the_fast_path_cannot_vouch_for_goes_to_the_full_loader(
    tmp_path: Path, variables: dict[str, str]
) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **variables}
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


def test_status_with_memoryd_variables_set_does_not_import_pydantic(tmp_path: Path) -> None:
    """The systemd unit's way: a file named by $MEMORYD_CONFIG and MEMORYD_* settings."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    probe = (
        "import io, json, sys\n"
        "from memoryd.cli import main\n"
        "out = io.StringIO()\n"
        "code = main(sys.argv[1:], out)\n"
        "row = json.loads(out.getvalue())[0]\n"
        "print(json.dumps([code, 'pydantic' in sys.modules, row['token_limit']]))\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_")},
        **USUAL_ENV,
        "MEMORYD_CONFIG": str(REPO / "config" / "memoryd.toml"),
        "MEMORYD_TOKEN_LIMIT": "4321",
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", probe, "status", str(ws), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [0, False, 4321]
