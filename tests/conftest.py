"""Shared fixtures: generated workspaces, the fake Anthropic server, a clean environment."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from daemon_harness import Processes
from fake_anthropic import FakeAnthropic, Reply

from memoryd.config.settings import Settings, load_settings

FILLER_WORDS = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
)

WorkspaceFactory = Callable[..., Path]
SettingsFactory = Callable[..., Settings]

REAL_DAEMON_FIXTURES = frozenset({"procs"})
"""Fixtures that start ``memoryd run`` as a real process."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that starts a real daemon is ``slow``, marked or not.

    ``pytest -m "not slow"`` is the fast stage and ``pytest -m slow`` the real-process
    stage (``.ci/run`` runs both): a daemon test that forgot its marker must not slip
    into the fast stage.
    """
    for item in items:
        if REAL_DAEMON_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def clean_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """No ANTHROPIC_* / OPENAI_* / MEMORYD_* variable and no machine config file reaches a
    test.

    XDG_CONFIG_HOME points at an empty folder (outside ``tmp_path``, which tests own).
    """
    for name in list(os.environ):
        if name.upper().startswith(("ANTHROPIC_", "OPENAI_", "MEMORYD_")):
            monkeypatch.delenv(name)
    xdg = tmp_path_factory.mktemp("xdg-config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    # The indexes of agents' sessions (memoryd.search.sessions) never land in the real state dir.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
    # Nor the parsed configuration files (memoryd.config.toml_cache) in the real cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    return xdg


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """memoryd's main() configures logging for its process; restore the test process's."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    structlog.reset_defaults()


def filler_text(index: int, size: int) -> str:
    """Deterministic chatter of exactly ``size`` characters (at least 1), tagged by index."""
    words: list[str] = []
    length = 0
    n = index
    while length < size:
        word = FILLER_WORDS[n % len(FILLER_WORDS)]
        words.append(word)
        length += len(word) + 1
        n += 7
    text = f"m{index} " + " ".join(words)
    return text[: max(1, size)]


def make_message(index: int, role: str, content: Any, **extra: Any) -> dict[str, Any]:
    """A message in the conversation format with a predictable id ``msg-<index>``."""
    return {
        "id": f"msg-{index:04d}",
        "role": role,
        "content": content,
        "timestamp": 1_700_000_000_000 + index * 1000,
        **extra,
    }


def generated_messages(
    count: int, size: int | Sequence[int] = 400, first_role: str = "user"
) -> list[dict[str, Any]]:
    """``count`` messages, roles alternating from ``first_role``, content of ``size`` chars.

    Each content starts with the message id, so a test can find it in a prompt.
    """
    sizes = [size] * count if isinstance(size, int) else list(size)
    if len(sizes) != count:
        raise ValueError("one size per message")
    roles = ("user", "assistant") if first_role == "user" else ("assistant", "user")
    messages = []
    for i, chars in enumerate(sizes):
        message_id = f"msg-{i:04d}"
        body = f"{message_id} " + filler_text(i, max(1, chars - len(message_id) - 1))
        messages.append(make_message(i, roles[i % 2], body[:chars] if chars > 0 else ""))
    return messages


def encode_lines(messages: Sequence[dict[str, Any] | bytes]) -> bytes:
    """The bytes of a conversation file: each message as one compact JSON line."""
    out = bytearray()
    for message in messages:
        if isinstance(message, bytes):
            out += message
        else:
            out += json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
            out += b"\n"
    return bytes(out)


def raw_lines(folder: Path) -> list[bytes]:
    """The lines of ``folder``'s conversation.jsonl as bytes, each with its ``\\n``."""
    return (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)


@pytest.fixture
def workspace(tmp_path: Path) -> WorkspaceFactory:
    """A factory: ``workspace(n, size=400, name="ws", messages=None, tail=b"")`` -> folder.

    Writes ``conversation.jsonl`` with ``n`` generated messages (roles alternating
    user/assistant, ``size`` characters of content each, or one size per message), or
    the given ``messages`` (dicts or raw bytes lines), followed by ``tail`` bytes.
    """

    def make(
        n: int = 10,
        size: int | Sequence[int] = 400,
        *,
        name: str = "ws",
        messages: Sequence[dict[str, Any] | bytes] | None = None,
        tail: bytes = b"",
    ) -> Path:
        folder = tmp_path / name
        folder.mkdir(parents=True, exist_ok=True)
        lines = list(messages) if messages is not None else generated_messages(n, size)
        (folder / "conversation.jsonl").write_bytes(encode_lines(lines) + tail)
        return folder

    return make


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment for loading the configuration, with its own HOME and
    XDG_CONFIG_HOME (empty): never the real one."""
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


@pytest.fixture
def make_settings(clean_environment: Path) -> SettingsFactory:
    """Settings from defaults plus dotted-key ``overrides`` only: no env, no machine file.

    Tests run with ``drain_seconds=0`` (no non-locking writers here), ``keep_first=0``
    (their split counts are their subject) and masking off (the strategies are) unless
    they say otherwise; the tests of the default pin (tests/compaction/test_agent_loops.py,
    tests/unit/test_pins.py) and of masking (tests/*/test_masking*.py) ask for them.
    """

    def make(**overrides: Any) -> Settings:
        flags = {
            "drain_seconds": 0,
            "keep_first": 0,
            "masking.enabled": False,
            **{k.replace("__", "."): v for k, v in overrides.items()},
        }
        env = {"XDG_CONFIG_HOME": str(clean_environment)}
        return load_settings(overrides=flags, env=env).settings

    return make


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A started fake Messages API server on 127.0.0.1, stopped after the test."""
    server = FakeAnthropic()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def procs() -> Iterator[Processes]:
    """Daemons and writers started by a test; all killed (by pid) at teardown."""
    processes = Processes()
    try:
        yield processes
    finally:
        processes.cleanup()


@pytest.fixture
def llm(fake_anthropic: FakeAnthropic) -> FakeAnthropic:
    """The fake Messages API server, answering a digest of each transcript."""
    fake_anthropic.set_default(Reply.echo())
    return fake_anthropic


@pytest.fixture
def info_logs() -> None:
    """Info events reach ``capture_logs`` whatever an earlier test configured
    (``_restore_logging`` puts the configuration back afterwards)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
