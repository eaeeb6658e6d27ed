"""The parsed configuration file kept as marshal data (memoryd/config/toml_cache.py): used
only for the very bytes it was made from, never an error, and what spares a per-message
command the TOML parser."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from memoryd.config import toml_cache

REPO = Path(__file__).resolve().parents[2]
TEXT = b'token_limit = 4321\nroots = ["/srv/agents"]\n[summarizer]\nbackend = "extractive"\n'


def env_for(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}


def test_a_second_read_of_the_same_bytes_comes_from_the_cache(tmp_path: Path) -> None:
    config, env = tmp_path / "memoryd.toml", env_for(tmp_path)
    first = toml_cache.parsed(TEXT, config, env)
    assert first == {
        "token_limit": 4321,
        "roots": ["/srv/agents"],
        "summarizer": {"backend": "extractive"},
    }
    entry = toml_cache.entry_path(config, env)
    assert entry is not None and entry.is_file()
    # An entry for these bytes is believed as it stands: what it holds is what is returned.
    entry.write_bytes(marshal.dumps((toml_cache.VERSION, TEXT, {"token_limit": 7})))
    assert toml_cache.parsed(TEXT, config, env) == {"token_limit": 7}


def test_changed_bytes_are_parsed_again_and_replace_the_entry(tmp_path: Path) -> None:
    config, env = tmp_path / "memoryd.toml", env_for(tmp_path)
    toml_cache.parsed(TEXT, config, env)
    changed = TEXT.replace(b"4321", b"4322")
    assert toml_cache.parsed(changed, config, env)["token_limit"] == 4322
    entry = toml_cache.entry_path(config, env)
    assert entry is not None
    assert marshal.loads(entry.read_bytes())[1] == changed


def test_each_file_has_its_own_entry(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    assert toml_cache.entry_path(one, env) != toml_cache.entry_path(two, env)
    toml_cache.parsed(b"token_limit = 1\n", one, env)
    assert toml_cache.parsed(b"token_limit = 2\n", two, env) == {"token_limit": 2}
    assert toml_cache.parsed(b"token_limit = 1\n", one, env) == {"token_limit": 1}


def test_a_torn_or_foreign_entry_is_a_miss(tmp_path: Path) -> None:
    config, env = tmp_path / "memoryd.toml", env_for(tmp_path)
    entry = toml_cache.entry_path(config, env)
    assert entry is not None
    entry.parent.mkdir(parents=True)
    for junk in (b"", b"\x00\x01garbage", marshal.dumps([1, 2]), marshal.dumps((0, TEXT, {}))):
        entry.write_bytes(junk)
        assert toml_cache.parsed(TEXT, config, env)["token_limit"] == 4321
        assert marshal.loads(entry.read_bytes())[:2] == (toml_cache.VERSION, TEXT)


def test_a_cache_that_cannot_be_written_only_costs_time(tmp_path: Path) -> None:
    config = tmp_path / "memoryd.toml"
    (tmp_path / "cache").write_text("a file where the cache folder belongs")
    env = env_for(tmp_path)
    assert toml_cache.parsed(TEXT, config, env)["token_limit"] == 4321
    assert (tmp_path / "cache").read_text() == "a file where the cache folder belongs"
    assert toml_cache.entry_path(config, {"HOME": "relative"}) is None
    assert toml_cache.parsed(TEXT, config, {"HOME": "relative"})["token_limit"] == 4321


def test_dates_are_parsed_each_time(tmp_path: Path) -> None:
    config, env = tmp_path / "memoryd.toml", env_for(tmp_path)
    data = toml_cache.parsed(b"when = 2026-11-28T12:00:00Z\n", config, env)
    assert data["when"].year == 2026
    entry = toml_cache.entry_path(config, env)
    assert entry is not None and not entry.exists()
    assert not list((tmp_path / "cache").rglob("*.marshal"))


def test_a_bad_file_is_refused_as_the_parser_refuses_it(tmp_path: Path) -> None:
    import tomllib

    config, env = tmp_path / "memoryd.toml", env_for(tmp_path)
    try:
        toml_cache.parsed(b"token_limit = = 1\n", config, env)
    except tomllib.TOMLDecodeError:
        pass
    else:
        raise AssertionError("a malformed file was accepted")
    entry = toml_cache.entry_path(config, env)
    assert entry is not None and not entry.exists()


def test_status_with_a_warm_cache_does_not_import_the_toml_parser(tmp_path: Path) -> None:
    """The systemd unit's way (a file named by $MEMORYD_CONFIG, MEMORYD_* settings): the
    first status parses the file, the next ones read the cache."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    probe = (
        "import io, json, sys\n"
        "from memoryd.cli import main\n"
        "out = io.StringIO()\n"
        "code = main(sys.argv[1:], out)\n"
        "row = json.loads(out.getvalue())[0]\n"
        "print(json.dumps([code, 'tomllib' in sys.modules, row['token_limit']]))\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MEMORYD_", "XDG_"))},
        "MEMORYD_CONFIG": str(REPO / "config" / "memoryd.toml"),
        "MEMORYD_TOKEN_LIMIT": "4321",
        "HOME": str(tmp_path),
    }
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", probe, "status", str(ws), "--json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
                env=env,
            ).stdout.splitlines()[-1]
        )
        for _ in range(2)
    ]
    assert runs == [[0, True, 4321], [0, False, 4321]]
    assert list((tmp_path / ".cache" / "memoryd").glob("config-*.marshal"))


def test_a_file_that_names_an_api_key_is_never_copied_into_the_cache(tmp_path: Path) -> None:
    config, env = tmp_path / "memoryd.toml", env_for(tmp_path)
    secret = b'[anthropic]\napi_key = "sk-ant-not-a-real-key"\n'
    assert toml_cache.parsed(secret, config, env)["anthropic"]["api_key"].startswith("sk-ant")
    assert not list((tmp_path / "cache").rglob("*"))
