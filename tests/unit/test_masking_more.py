"""Masking beyond tool outputs (memoryd/compaction/masking/rules.py): old calls' large
input fields, old user turns' images and documents, and tools never masked. As for
outputs: the API view stays valid, every original line is once in the file or the
archive, ``memoryd expand`` gives the original back, and what must stay stays."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_shapes import TASK, agent_conversations, tool_loop
from api_rules import request_problem, thinking_for
from archive_checks import originals_kept
from cli_helpers import cli
from conftest import SettingsFactory, encode_lines, make_message
from hypothesis import given, settings
from hypothesis import strategies as st
from media_files import encoded, image_block, jpeg_behind_exif, pdf_block, pillow_pdf, screenshot

from memoryd.boundaries import running_tool_call
from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.compaction.masking.decide import MASKED_FIELD, Masking, plan_masking
from memoryd.compaction.masking.rules import INPUT_PLACEHOLDER_LEAD, MaskRules
from memoryd.conversation.api_view import api_messages, messages_for_api
from memoryd.conversation.lines import Line, split_lines
from memoryd.conversation.pins import pinned_indices
from memoryd.search.archive import expand

PNG = image_block(encoded(screenshot(1382, 1090), "PNG"))
JPEG = image_block(jpeg_behind_exif(800, 600, exif_bytes=20_000), "image/jpeg")
PDF = pdf_block(pillow_pdf(2))
MEDIA = (PNG, JPEG, PDF)
TIMES = "\N{MULTIPLICATION SIGN}"
ALL_ON = MaskRules(tool_inputs=True, media=True)


def lines_of(messages: list[dict[str, Any]]) -> list[Line]:
    return list(split_lines(encode_lines(messages), 1 << 24))


def file_text(length: int, seed: int) -> str:
    """A file an agent writes: ``length`` characters of Python."""
    row = f"def handler_{seed}(event):\n    return event.path  # keep the loader first\n"
    return (row * (length // len(row) + 1))[:length]


def enriched(messages: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """``messages`` with, chosen by ``seed``: tool calls renamed Write (a large
    ``content`` field beside a ``file_path``) or TodoWrite (a large ``todos`` text), and
    genuine user turns given a PNG screenshot, a JPEG or a PDF before their text."""
    rng = random.Random(seed)
    out = []
    for message in messages:
        content = message["content"]
        if message["role"] == "assistant" and isinstance(content, list):
            blocks = []
            for block in content:
                if block.get("type") == "tool_use" and rng.random() < 0.6:
                    name = rng.choice(["Write", "TodoWrite", "bash"])
                    big = file_text(rng.choice([400, 1200, 5000]), rng.randrange(100))
                    field = "todos" if name == "TodoWrite" else "content"
                    tool_input = {"file_path": f"src/app/m{rng.randrange(9)}.py", field: big}
                    block = {**block, "name": name, "input": {**block["input"], **tool_input}}
                blocks.append(block)
            message = {**message, "content": blocks}
        elif message["role"] == "user" and isinstance(content, str) and content.strip():
            medium = rng.choice(MEDIA)
            if rng.random() < 0.4:
                message = {**message, "content": [medium, {"type": "text", "text": content}]}
        out.append(message)
    return out


def rewritten(lines: list[Line], masking: Masking) -> list[bytes]:
    data = encode_lines([line.message for line in lines if line.message is not None])
    parts = masking.parts(lines)
    new = b"".join(p if isinstance(p, bytes) else data[p[0] : p[1]] for p in parts)
    return new.splitlines(keepends=True)


def archived(lines: list[Line], masking: Masking) -> list[bytes]:
    data = encode_lines([line.message for line in lines if line.message is not None])
    ranges = masking.originals(lines)  # adjacent lines make one range
    return b"".join(data[a:b] for a, b in ranges).splitlines(keepends=True)


def calls_of(lines: list[Line]) -> list[tuple[int, int, dict[str, Any]]]:
    return [
        (line.index, k, dict(block))
        for line in lines
        if line.role == "assistant"
        for k, block in enumerate(line.blocks)
        if block.get("type") == "tool_use"
    ]


@settings(max_examples=60, deadline=None)
@given(agent_conversations(), st.integers(0, 10_000), st.integers(0, 5), st.integers(0, 2),
       st.sampled_from([frozenset(), frozenset({"TodoWrite"}), frozenset({"Write", "bash"})]),
       st.sampled_from([200, 1000, 3000]))  # fmt: skip
def test_property_inputs_media_and_excluded_tools(
    messages: list[dict[str, Any]],
    seed: int,
    keep_recent: int,
    keep_first: int,
    exclude: frozenset[str],
    limit: int,
) -> None:
    """Over generated agent conversations with large inputs and pasted media: the view of
    the masked file is a valid request; every original line once in the file or the
    archive; a masked input is the same object with only its large strings replaced; the
    newest ``keep_recent`` calls and media turns, the running turn, the pins and every
    call and result of an excluded tool stay byte for byte."""
    lines = lines_of(enriched(messages, seed))
    pinned = pinned_indices(lines, keep_first)
    rules = MaskRules(tool_inputs=True, input_chars=limit, media=True, exclude_tools=exclude)
    masking = plan_masking(lines, keep_recent, pinned, rules)
    new = rewritten(lines, masking)
    old = encode_lines([x.message for x in lines if x.message]).splitlines(keepends=True)
    plain = [x for x in new if b'"isMasked"' not in x]
    assert Counter(plain + archived(lines, masking)) == Counter(old)
    masked = {m.line.index: m for m in masking.masked}
    assert not masked.keys() & pinned
    for m in masking.masked:
        assert m.line.tokens < m.original.tokens
        assert m.data == new[m.line.index]
        assert json.loads(m.data)[MASKED_FIELD] is True
    # Inputs: the same object, only large strings replaced; recent, running, excluded kept.
    calls = calls_of(lines)
    recent = {(i, k) for i, k, _ in calls[len(calls) - keep_recent :]} if keep_recent else set()
    running = running_tool_call(lines)
    excluded_ids = {str(b["id"]) for _, _, b in calls if b.get("name") in exclude}
    for index, k, block in calls:
        if index not in masked:
            continue
        after = masked[index].line.blocks[k]
        if (index, k) in recent or block.get("name") in exclude:
            assert after == block
        if running is not None and index >= running:
            assert after == block
        assert list(after["input"]) == list(block["input"])
        for name, value in block["input"].items():
            if after["input"][name] != value:
                assert isinstance(value, str) and len(value) > limit
                assert after["input"][name].startswith(INPUT_PLACEHOLDER_LEAD)
    for index, m in masked.items():
        for k, kept in enumerate(lines[index].blocks):
            if kept.get("tool_use_id") in excluded_ids:
                assert m.line.blocks[k] == kept
    # Media: the newest keep_recent user turns with media keep theirs (a text-mode agent's
    # old command output is one output, whatever it holds: masked whole, as it always was).
    with_media = [
        x.index
        for x in lines
        if x.is_genuine_user_turn and any(b.get("type") in ("image", "document") for b in x.blocks)
    ]
    for index in with_media[len(with_media) - keep_recent :] if keep_recent else []:
        if index in masked and not masked[index].outputs:
            for k, medium in enumerate(lines[index].blocks):
                if medium.get("type") in ("image", "document"):
                    assert masked[index].line.blocks[k] == medium
    view = api_messages(json.loads(x) for x in new)
    if view:
        body: dict[str, Any] = {"model": "m", "max_tokens": 2048, "messages": view}
        if thinking_for(view):
            body["thinking"] = thinking_for(view)
        assert request_problem(body) is None
    assert masking.freed_tokens == sum(x.tokens for x in lines) - sum(
        x.tokens for x in masking.applied(lines)
    )


def write_call(index: int, call_id: str, content: str, name: str = "Write") -> dict[str, Any]:
    tool_input = {"file_path": f"src/app/m{index}.py", "content": content, "mode": 420}
    block = {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
    return make_message(index, "assistant", [{"type": "text", "text": "Writing it."}, block])


def result(index: int, call_id: str, text: str = "File written.") -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return make_message(index, "user", [block])


def writes(count: int, size: int = 4000, name: str = "Write") -> list[dict[str, Any]]:
    messages = [make_message(0, "user", TASK)]
    for n in range(count):
        messages.append(write_call(len(messages), f"w{n}", file_text(size, n), name))
        messages.append(result(len(messages), f"w{n}"))
    return messages


def test_an_old_large_input_field_becomes_a_placeholder_in_the_same_object() -> None:
    lines = lines_of(writes(5))
    masking = plan_masking(lines, 2, frozenset(), ALL_ON)
    assert [m.line.index for m in masking.masked] == [1, 3, 5]
    assert masking.inputs == 3 and masking.outputs == 0
    for m in masking.masked:
        (text, call) = m.line.blocks
        assert text == {"type": "text", "text": "Writing it."}
        tool_input = call["input"]
        assert list(tool_input) == ["file_path", "content", "mode"]
        assert tool_input["file_path"] == f"src/app/m{m.line.index}.py"
        assert tool_input["mode"] == 420
        n = (m.line.index - 1) // 2
        assert tool_input["content"] == (
            "[tool input masked by memoryd: content, 4,000 characters (~1,000 tokens); "
            f"defines handler_{n}; the original: memoryd expand WORKSPACE msg-{m.line.index:04d}]"
        )
    assert masking.what() == "0 tool outputs, 3 tool inputs"


def test_the_threshold_and_the_switch_decide() -> None:
    lines = lines_of(writes(5, size=900))
    assert plan_masking(lines, 0, frozenset(), ALL_ON).masked == ()
    low = MaskRules(tool_inputs=True, input_chars=500)
    assert plan_masking(lines, 0, frozenset(), low).inputs == 5
    assert plan_masking(lines_of(writes(5)), 0, frozenset(), MaskRules()).masked == ()


def test_the_running_call_keeps_its_input() -> None:
    messages = writes(4)
    messages.append(write_call(len(messages), "open", file_text(5000, 9)))
    lines = lines_of(messages)
    masking = plan_masking(lines, 0, frozenset(), ALL_ON)
    assert {m.line.index for m in masking.masked} == {1, 3, 5, 7}


def test_an_excluded_tool_keeps_its_calls_and_results() -> None:
    messages = writes(4, name="TodoWrite")
    messages[2] = result(2, "w0", "todo list:\n" + "- [ ] step\n" * 400)
    lines = lines_of(messages)
    assert plan_masking(lines, 0, frozenset(), ALL_ON).outputs == 1
    rules = MaskRules(tool_inputs=True, media=True, exclude_tools=frozenset({"TodoWrite"}))
    assert plan_masking(lines, 0, frozenset(), rules).masked == ()


def media_turns(count: int) -> list[dict[str, Any]]:
    messages = []
    for n in range(count):
        medium = MEDIA[n % len(MEDIA)]
        content = [medium, {"type": "text", "text": f"look {n}"}]
        messages.append(make_message(2 * n, "user", content))
        messages.append(make_message(2 * n + 1, "assistant", f"I see the problem in {n}."))
    return messages


def test_old_media_of_user_turns_become_text_placeholders() -> None:
    lines = lines_of(media_turns(5))
    masking = plan_masking(lines, 2, frozenset(), ALL_ON)
    assert [m.line.index for m in masking.masked] == [0, 2, 4]
    assert masking.media == 3
    assert masking.what() == "0 tool outputs, 3 images or documents"
    texts = [m.line.blocks[0]["text"] for m in masking.masked]
    assert texts == [
        f"[image 1382{TIMES}1090 png, ~1,533 tokens: memoryd expand WORKSPACE msg-0000]",
        f"[image 800{TIMES}600 jpeg, ~640 tokens: memoryd expand WORKSPACE msg-0002]",
        "[document pdf, 2 pages, ~6,000 tokens: memoryd expand WORKSPACE msg-0004]",
    ]
    for m in masking.masked:
        assert m.line.blocks[1] == {"type": "text", "text": f"look {m.line.index // 2}"}
    assert masking.freed_tokens > 1533 + 640 + 6000 - 100
    off = MaskRules(tool_inputs=True)
    assert plan_masking(lines, 2, frozenset(), off).masked == ()


def job_settings(make_settings: SettingsFactory, tokens: int, **extra: Any) -> Any:
    return make_settings(
        keep_first=1,
        drain_seconds=0,
        token_limit=int(tokens / 0.95),
        **{"summarizer.backend": "extractive", "masking.enabled": True},
        **{"masking.target": 0.9, **extra},
    )


def session(seed: int) -> list[dict[str, Any]]:
    """A tool loop with large Write inputs, a TodoWrite tool and pasted media."""
    messages = tool_loop(30, 20, interjections=frozenset({3, 8, 13, 20}))
    turns = [k for k, m in enumerate(messages) if k and isinstance(m["content"], str)]
    assert len(turns) == 4 and all(messages[k]["role"] == "user" for k in turns)
    for k in turns:  # four screenshots: the oldest is masked, keep_recent 3
        messages[k] = {**messages[k], "content": [PNG, {"type": "text", "text": f"see {k}"}]}
    return enriched(messages, seed)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_masking_job_of_inputs_and_media_loses_nothing_and_expand_gives_the_originals(
    tmp_path: Path, make_settings: SettingsFactory, seed: int
) -> None:
    messages = session(seed)
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "conversation.jsonl").write_bytes(encode_lines(messages))
    original = (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)
    tokens = sum(x.tokens for x in lines_of(messages))
    config = job_settings(make_settings, tokens, **{"masking.exclude_tools": ["TodoWrite"]})
    result = run_job(JobRequest(folder, config, reason="trigger"))
    assert result.outcome == "completed" and result.masked_messages, result.reason
    originals_kept(folder, original)
    live = (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)
    masked = [json.loads(x) for x in live if b'"isMasked"' in x]
    assert any(INPUT_PLACEHOLDER_LEAD in json.dumps(m, ensure_ascii=False) for m in masked)
    assert any(f"[image 1382{TIMES}1090 png" in json.dumps(m, ensure_ascii=False) for m in masked)
    by_id = {json.loads(x)["id"]: x for x in original}
    for message in masked:
        assert expand(folder, message["id"]) == [by_id[message["id"]]]
        code, out = cli("expand", str(folder), message["id"])
        assert code == 0 and out.encode() == by_id[message["id"]]
    for line in live:  # TodoWrite's calls kept as they were
        message = json.loads(line)
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("name") == "TodoWrite":
                assert INPUT_PLACEHOLDER_LEAD not in json.dumps(block)
    view = messages_for_api(folder)
    body: dict[str, Any] = {"model": "m", "max_tokens": 2048, "messages": view}
    if thinking_for(view):
        body["thinking"] = thinking_for(view)
    assert request_problem(body) is None
    receipt = result.receipt
    assert receipt is not None and receipt.masked is not None
    assert receipt.masked.inputs > 0 and receipt.masked.media == 1
    code, history = cli("history", str(folder))
    masked_cell = f"{receipt.masked.outputs} +{receipt.masked.inputs} in +1 media"
    assert code == 0 and masked_cell in history
