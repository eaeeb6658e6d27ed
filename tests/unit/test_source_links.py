"""Source links: every summary names the first and last message it stands for, and a
checkpoint records the span it absorbed, so the originals can be found in the archive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SettingsFactory, WorkspaceFactory, encode_lines, generated_messages

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.compaction.strategies.head import summarized_span
from memoryd.conversation.lines import split_lines


def head(folder: Path) -> dict[str, Any]:
    first = (folder / "conversation.jsonl").read_bytes().split(b"\n", 1)[0]
    message: dict[str, Any] = json.loads(first)
    return message


def archived_ids(folder: Path, archive: str) -> list[str]:
    """The ids of the originals in one archive file (a summary head left out)."""
    messages = [json.loads(line) for line in (folder / archive).read_bytes().splitlines()]
    return [m["id"] for m in messages if not m.get("isSummary")]


def append_messages(folder: Path, start: int, count: int) -> None:
    fresh = generated_messages(start + count, 400)[start:]
    with (folder / "conversation.jsonl").open("ab") as file:
        file.write(encode_lines(fresh))


@pytest.mark.parametrize("strategy", ["narrative", "rolling"])
def test_a_summary_names_its_span_and_a_folding_summary_keeps_the_whole_span(
    strategy: str, workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(60, 400)
    settings = make_settings(strategy=strategy, token_limit=4000)
    first = run_job(JobRequest(folder, settings, force=True))
    assert first.outcome == "completed"
    summary = head(folder)
    originals = archived_ids(folder, summary["archive"])
    assert (summary["firstId"], summary["lastId"]) == ("msg-0000", originals[-1])
    assert summary["summarizedCount"] == len(originals)

    append_messages(folder, 60, 40)
    second = run_job(JobRequest(folder, settings, force=True))
    assert second.outcome == "completed"
    folded = head(folder)
    newly = archived_ids(folder, folded["archive"])
    assert folded["firstId"] == "msg-0000", "the folded summary's span is kept"
    assert folded["lastId"] == newly[-1]
    assert folded["summarizedCount"] == len(originals) + len(newly)
    assert list(folded).index("firstId") < list(folded).index("archive")


def test_checkpoint_records_what_it_absorbed_and_the_head_the_whole_span(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(40, 400)
    settings = make_settings(
        strategy="checkpoint", token_limit=4000, **{"summarizer.backend": "extractive"}
    )
    assert run_job(JobRequest(folder, settings, force=True)).outcome == "completed"
    info = json.loads((folder / "checkpoint.json").read_text())["compaction_info"]
    assert (info["first_id"], info["last_id"]) == ("msg-0000", "msg-0039")

    append_messages(folder, 40, 10)
    assert run_job(JobRequest(folder, settings, force=True)).outcome == "completed"
    info = json.loads((folder / "checkpoint.json").read_text())["compaction_info"]
    assert (info["first_id"], info["last_id"]) == ("msg-0040", "msg-0049")
    assert archived_ids(folder, info["archive"]) == [f"msg-{i:04d}" for i in range(40, 50)]
    message = head(folder)
    assert (message["firstId"], message["lastId"]) == ("msg-0000", "msg-0049")
    assert message["checkpoint"]["compaction_info"]["first_id"] == "msg-0040"


def lines_of(messages: list[dict[str, Any] | bytes]) -> list[Any]:
    return list(split_lines(encode_lines(messages), 1 << 20))


def test_span_of_a_prefix_skips_lines_without_an_id() -> None:
    messages: list[dict[str, Any] | bytes] = [
        b"not json\n",
        {"role": "user", "content": "no id"},
        *generated_messages(3),
    ]
    assert summarized_span(lines_of(messages), folds_previous=False) == ("msg-0000", "msg-0002")
    assert summarized_span(lines_of([b"garbage\n"]), folds_previous=False) == (None, None)


def test_folding_a_summary_from_before_source_links_starts_the_span_after_it() -> None:
    old = {"id": "s1", "role": "assistant", "content": "x", "isSummary": True}
    linked = {**old, "firstId": "earliest", "lastId": "msg-9999"}
    rest: list[dict[str, Any] | bytes] = list(generated_messages(2))
    assert summarized_span(lines_of([old, *rest]), True) == ("msg-0000", "msg-0001")
    assert summarized_span(lines_of([linked, *rest]), True) == ("earliest", "msg-0001")
    assert summarized_span(lines_of([linked]), True) == ("earliest", "msg-9999")
