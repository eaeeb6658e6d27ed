"""Text that is not valid Unicode never breaks anything: a lone surrogate (valid JSON, what
Python writes for bytes read with ``surrogateescape``) or bytes that are not UTF-8 in one
message, archived or live, leave summarize, the index, recall (one workspace, a root, the
command line, JSON output, MCP) and expand working, and never fail a search of others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import SettingsFactory, generated_messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_client import structured, with_server
from structlog.testing import capture_logs

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.errors import MemorydError
from memoryd.search.archive import expand, recall
from memoryd.search.history import MAX_PARSED_LINE

ARCHIVE = ".memoryd/archive/conversation-20260101T000000000000Z-0a1b2c.jsonl"
ODD = "We decided to keep the parser \udcff config and the \ud800 loader."


def odd_lines(texts: list[str], raw: list[bytes]) -> bytes:
    """Archived lines: one good marker message, messages of ``texts`` (their JSON may
    hold lone surrogates, as json.dumps writes them) and lines holding ``raw`` bytes."""
    lines = [json.dumps({"id": "good", "role": "user", "content": "marker zebra"})]
    for n, text in enumerate(texts):
        lines.append(json.dumps({"id": f"odd-{n}\udcff", "role": "assistant", "content": text}))
    data = ("\n".join(lines) + "\n").encode()
    for n, value in enumerate(raw):
        cleaned = value.replace(b"\\", b"").replace(b'"', b"").replace(b"\n", b"")
        cleaned = bytes(b for b in cleaned if b >= 0x20)
        data += b'{"id":"raw-%d","role":"user","content":"zebra %s"}\n' % (n, cleaned)
    return data


def archived_workspace(folder: Path, data: bytes) -> Path:
    (folder / ARCHIVE).parent.mkdir(parents=True)
    (folder / ARCHIVE).write_bytes(data)
    (folder / "conversation.jsonl").write_bytes(b"")
    return folder


def test_a_lone_surrogate_in_a_summarized_message_leaves_summarize_and_recall_working(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """The summary head quotes the odd sentence; it is written (as ``\\u`` escapes), the
    index takes the message, and recall finds it from the workspace and from the root."""
    folder = tmp_path / "root" / "ws"
    folder.mkdir(parents=True)
    messages = generated_messages(40, 300)
    for message in messages:
        message["content"] = f"{ODD} " + message["content"]
    lines = [json.dumps(message).encode() + b"\n" for message in messages]
    (folder / "conversation.jsonl").write_bytes(b"".join(lines))
    job = make_settings(token_limit=4000, index_archive=True)
    with capture_logs() as logs:
        assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"
    assert not [entry for entry in logs if entry["event"] == "index_update_failed"]
    head = json.loads((folder / "conversation.jsonl").read_bytes().splitlines()[0])
    assert "\udcff" in head["content"]
    for where in (folder, tmp_path / "root"):
        code, out = cli("recall", str(where), "loader", "--json")
        assert code == 0, out
        hits = json.loads(out)
        assert hits and "\ufffd" in hits[0]["snippet"]
    assert expand(folder, messages[1]["id"]) == [lines[1]]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(
        st.text(st.characters(codec=None) | st.sampled_from("\udcff\ud800\udfff"), max_size=40),
        max_size=4,
    ),
    raw=st.lists(st.binary(max_size=40), max_size=3),
    query=st.sampled_from(["zebra", "marker", "parser", "odd*", "\udcff", "\ufffd loader"]),
)
def test_property_odd_code_points_and_bytes_never_break_recall_or_expand(
    texts: list[str], raw: list[bytes], query: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("root")
    odd = archived_workspace(root / "odd", odd_lines(texts, raw))
    good = archived_workspace(root / "good", odd_lines([], []))
    assert [hit.id for hit in recall(good, "marker")] == ["good"]
    assert "good" in [hit.id for hit in recall(root, "marker")]
    for where in (odd, root):
        try:
            hits = recall(where, query)
        except Exception as exc:  # a UsageError for a query of nothing searchable
            assert exc.__class__.__name__ == "UsageError", exc
            continue
        for hit in hits:
            json.dumps(hit.as_dict(), ensure_ascii=False).encode()
        code, out = cli("recall", str(where), query, "--json")
        assert code in (0, 2), out
    for n in range(len(texts)):
        [line] = expand(odd, f"odd-{n}\udcff")
        assert json.loads(line)["content"] == texts[n]
    for n in range(len(raw)):
        [line] = expand(odd, f"raw-{n}")
        assert line.startswith(b'{"id":"raw-%d"' % n)


@pytest.mark.slow
def test_mcp_recall_and_expand_answer_over_an_odd_message(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    odd = archived_workspace(root / "odd", odd_lines([ODD], [b"\xff\xfe zebra \xc3"]))
    archived_workspace(root / "good", odd_lines([], []))
    live = {"id": "live", "role": "user", "content": ODD}
    (odd / "conversation.jsonl").write_text(json.dumps(live) + "\n{oops\n")

    async def session(client: Any) -> None:
        hits = structured(await client.call_tool("recall", {"query": "zebra"}))["hits"]
        assert {h["id"] for h in hits} >= {"good", "raw-0"}
        found = structured(await client.call_tool("recall", {"query": "loader"}))["hits"]
        assert found[0]["id"] == "odd-0\ufffd"
        lines = structured(
            await client.call_tool("expand", {"id": "odd-0\ufffd", "workspace": str(odd)})
        )["lines"]
        assert "loader" in lines[0]
        view = structured(await client.call_tool("conversation_messages", {"workspace": str(odd)}))
        assert "loader" in json.dumps(view["messages"]) and view["left_out"] == [2]

    with_server(tmp_path, "--root", str(root))(session)


def test_expand_of_an_archived_line_too_long_to_index_says_why(tmp_path: Path) -> None:
    """A line over the parse limit is archived byte for byte but never indexed: expand
    says so, where it is, instead of "no message with this id"."""
    huge = json.dumps({"id": "huge", "role": "user", "content": "x" * (MAX_PARSED_LINE + 10)})
    folder = archived_workspace(tmp_path / "ws", odd_lines([], []) + huge.encode() + b"\n")
    with pytest.raises(MemorydError) as caught:
        expand(folder, "huge")
    message = str(caught.value)
    assert "not indexed" in message and ARCHIVE in message and "no message" not in message
    with pytest.raises(MemorydError, match="no message with this id"):
        expand(folder, "missing")
