"""Odd names and odd bytes: workspaces whose folder name is not UTF-8 (a byte such as
0xff in the name, which Python holds as a surrogate) work for recall over their root and
expand as any other, and their index is brought up to date after a job without a
failure; a UTF-8 byte order mark before the first line is read as the line it is."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import structlog
from cli_helpers import cli
from conftest import SettingsFactory, generated_messages

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.conversation.api_view import read_messages
from memoryd.errors import InputError
from memoryd.search.archive import expand, recall, update_index_in_background

ARCHIVE = ".memoryd/archive/conversation-20260101T000000Z-abcd.jsonl"
LINE = b'{"id":"m1","role":"user","content":"postgres hello"}\n'


def workspace(folder: Path) -> Path:
    (folder / ARCHIVE).parent.mkdir(parents=True)
    (folder / ARCHIVE).write_bytes(LINE)
    (folder / "conversation.jsonl").write_bytes(b"")
    return folder


def test_recall_and_expand_work_in_a_workspace_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Root-wide recall finds the message in both workspaces, the odd one included;
    ``expand`` gives the original line back; the commands exit 0."""
    root = tmp_path / "root"
    odd = workspace(root / os.fsdecode(b"bad-\xff"))
    workspace(root / "good")
    found = sorted(os.fsencode(hit.workspace) for hit in recall(root, "postgres"))
    assert found == sorted(os.fsencode(p) for p in (odd, root / "good"))
    assert b"".join(expand(odd, "m1")) == LINE
    assert cli("recall", str(root), "postgres")[0] == 0
    code, printed = cli("recall", str(root), "postgres", "--json")
    assert code == 0
    assert sorted(hit["workspace"] for hit in json.loads(printed)) == [
        str(root / "bad-\ufffd"),
        str(root / "good"),
    ]
    assert cli("expand", str(odd), "m1") == (0, LINE.decode())


def test_the_index_of_such_a_workspace_is_updated_after_a_job_without_failure(
    tmp_path: Path,
) -> None:
    """What a worker runs after a commit brings the index up to date at once: no
    ``index_update_failed`` (which the daemon would log again after every job)."""
    odd = workspace(tmp_path / os.fsdecode(b"caf\xe9"))
    with structlog.testing.capture_logs() as logs:
        update_index_in_background(odd).join()
    assert [entry for entry in logs if entry["event"] == "index_update_failed"] == []
    assert (odd / ".memoryd" / "index.sqlite").stat().st_size > 0


BOM = b"\xef\xbb\xbf"


def test_a_byte_order_mark_before_the_first_line_is_read_as_the_line_it_precedes(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """An editor that saves with a UTF-8 BOM: the task line is a message (not malformed,
    in the view), ``expand task-1`` returns it byte for byte, and a job pins it as the
    task, right after the summary, byte for byte (BOM included) and still a message."""
    folder = tmp_path / "ws"
    folder.mkdir()
    task = {"id": "task-1", "role": "user", "content": "Build the zebra parser"}
    rest = generated_messages(40, 300, first_role="assistant")
    lines = [json.dumps(message).encode() + b"\n" for message in [task, *rest]]
    lines[0] = BOM + lines[0]
    (folder / "conversation.jsonl").write_bytes(b"".join(lines))
    code, text = cli("status", str(folder), "--json")
    assert code == 0 and json.loads(text)[0]["malformed_lines"] == 0
    assert read_messages(folder)[0]["content"] == task["content"]
    assert cli("expand", str(folder), "task-1") == (0, lines[0].decode())
    job = make_settings(token_limit=4000, keep_first=1)
    assert run_job(JobRequest(folder, job, force=True)).outcome == "completed"
    after = (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)
    assert after[1] == lines[0]
    assert read_messages(folder)[1]["content"] == task["content"]
    assert json.loads(cli("status", str(folder), "--json")[1])[0]["malformed_lines"] == 0


def test_expand_names_a_conversation_that_is_a_folder_and_refuses_an_unknown_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``conversation.jsonl`` a folder: one line naming its path (not a descriptor
    number), exit 2 as every refusal of a path. An id that is in no message: one line,
    exit 2, as any argument given wrong."""
    odd = tmp_path / "odd"
    (odd / "conversation.jsonl").mkdir(parents=True)
    (odd / ".memoryd" / "archive").mkdir(parents=True)
    assert cli("expand", str(odd), "m1") == (2, "")
    err = capsys.readouterr().err
    assert err == f"memoryd: {odd / 'conversation.jsonl'}: is not a regular file\n"
    good = workspace(tmp_path / "good")
    assert cli("expand", str(good), "not-an-id") == (2, "")
    assert "not-an-id: no message with this id" in capsys.readouterr().err
    with pytest.raises(InputError):
        expand(good, "not-an-id")


@pytest.mark.slow
def test_mcp_recall_over_a_root_with_a_workspace_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """The MCP recall tool over the root answers with the hits of both workspaces; the odd
    name comes back in the hit's ``workspace`` with U+FFFD for its bad byte (JSON cannot
    carry the byte), never an error."""
    from mcp_client import structured, with_server

    root = tmp_path / "root"
    workspace(root / os.fsdecode(b"bad-\xff"))
    workspace(root / "good")

    async def session(client: Any) -> None:
        hits = structured(await client.call_tool("recall", {"query": "postgres"}))["hits"]
        assert len(hits) == 2
        names = sorted(hit["workspace"].rsplit("/", 1)[-1] for hit in hits)
        assert names == ["bad-\ufffd", "good"]

    with_server(tmp_path, "--root", str(root))(session)
