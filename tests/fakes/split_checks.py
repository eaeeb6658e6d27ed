"""Conversations for split tests: message builders, independent checkers computed from the
raw messages (not from Line properties), and a hypothesis strategy of random conversations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conftest import encode_lines, make_message
from hypothesis import strategies as st

from memoryd.conversation.lines import Line, split_lines

MAX_LINE = 8 << 20


def lines_of(
    messages: Sequence[dict[str, Any] | bytes], max_line_bytes: int = MAX_LINE
) -> list[Line]:
    """Real parsed lines, as the job hands them to the policy."""
    return list(split_lines(encode_lines(messages), max_line_bytes))


def text_of_tokens(tokens: int) -> str:
    """Content whose message estimate is exactly ``tokens`` (chars/4 rounded up, plus 4)."""
    return "x" * ((tokens - 4) * 4)


def tool_use(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "run", "input": {"cmd": "ls"}}


def tool_result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


def text_block(text: str = "and also this") -> dict[str, Any]:
    return {"type": "text", "text": text}


def summary(index: int = 0) -> dict[str, Any]:
    return make_message(
        index,
        "assistant",
        "[Summary of earlier conversation]\n\nold",
        isSummary=True,
        summarizedCount=12,
        archive=".memoryd/archive/a.jsonl",
    )


# --- independent checkers (computed from the raw messages, not from Line properties) ---


def genuine_user_turn(message: Mapping[str, Any]) -> bool:
    """A user message that is not a summary and not only tool results."""
    if message.get("role") != "user" or message.get("isSummary") is True:
        return False
    content = message.get("content")
    if not isinstance(content, list):
        return True
    blocks = [b for b in content if isinstance(b, Mapping)]
    return not blocks or any(b.get("type") != "tool_result" for b in blocks)


def _ids(messages: Sequence[Mapping[str, Any]], kind: str, key: str) -> set[str]:
    found: set[str] = set()
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found |= {
                str(b[key])
                for b in content
                if isinstance(b, Mapping) and b.get("type") == kind and key in b
            }
    return found


def straddling(messages: Sequence[Mapping[str, Any]], k: int) -> set[str]:
    """Tool ids whose tool_use and tool_result lie on different sides of boundary k.

    A result belongs to the newest call of its id in an earlier message, or, when there is
    none, to the first call of its id after it: ids may repeat over a file (an agent that
    numbers its calls from 1 in each run), never within one exchange."""
    parted: set[str] = set()
    for j, message in enumerate(messages):
        for ident in _ids([message], "tool_result", "tool_use_id"):
            earlier = [i for i in range(j) if ident in _ids([messages[i]], "tool_use", "id")]
            later = [i for i in range(j, len(messages))
                     if ident in _ids([messages[i]], "tool_use", "id")]  # fmt: skip
            call = earlier[-1] if earlier else (later[0] if later else None)
            if call is not None and min(call, j) < k <= max(call, j):
                parted.add(ident)
    return parted


def _assistant(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "assistant" and message.get("isSummary") is not True


def _vanishes(message: Mapping[str, Any]) -> bool:
    """Nothing of the message is left in the API view (blank text, no block)."""
    content = message.get("content")
    items = content if isinstance(content, list) else [content]
    for item in items:
        if isinstance(item, Mapping):
            if item.get("type") != "text" or str(item.get("text", "")).strip():
                return False
        elif isinstance(item, str) and item.strip():
            return False
    return True


def splits_turn(messages: Sequence[Mapping[str, Any]], k: int) -> bool:
    """The nearest message before k that the API view keeps is an assistant message, and
    so is the nearest at or after k: a split at k would cut one API assistant turn in
    two."""
    before = next((m for m in reversed(messages[:k]) if not _vanishes(m)), None)
    after = next((m for m in messages[k:] if not _vanishes(m)), None)
    return before is not None and after is not None and _assistant(before) and _assistant(after)


def boundary_ok(messages: Sequence[Mapping[str, Any]], k: int) -> bool:
    """The kept part may start at k at a genuine user turn."""
    return boundary_kind(messages, k) == "user"


def boundary_kind(messages: Sequence[Mapping[str, Any]], k: int) -> str | None:
    """ "user", "assistant" (an assistant message that is not a summary) or None, when the
    kept part may start at k without separating a tool pair."""
    if straddling(messages, k) or splits_turn(messages, k):
        return None
    if genuine_user_turn(messages[k]):
        return "user"
    if messages[k].get("role") == "assistant" and messages[k].get("isSummary") is not True:
        return "assistant"
    return None


def running_call(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The first message of the newest assistant turn (its assistant messages with only
    blank ones between), when one of its tool_use ids has no result after it."""
    kept = [k for k in range(len(messages)) if not _vanishes(messages[k])]
    last = next((k for k in reversed(kept) if _assistant(messages[k])), None)
    if last is None:
        return None
    first = last
    for k in range(last - 1, -1, -1):
        if _assistant(messages[k]) and not _vanishes(messages[k]):
            first = k
        elif not _vanishes(messages[k]):
            break
    uses = _ids(messages[first : last + 1], "tool_use", "id")
    answered = _ids(messages[first:], "tool_result", "tool_use_id")
    return first if uses - answered else None


TOOL_IDS = ("t0", "t1", "t2", "t3")
blocks = st.one_of(
    st.sampled_from(["hi", "ok", "done"]).map(text_block),
    st.sampled_from(TOOL_IDS).map(tool_use),
    st.sampled_from(TOOL_IDS).map(tool_result),
    st.just({"type": "image", "source": {"type": "base64", "data": "AA=="}}),
)
messages_strategy = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.one_of(st.text(max_size=30), st.lists(blocks, max_size=3)),
    }
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random roles, tool_use/tool_result pairs (in any order), maybe a summary at the head."""
    body = draw(st.lists(messages_strategy, max_size=30))
    messages = [make_message(i, m["role"], m["content"]) for i, m in enumerate(body, start=1)]
    if draw(st.booleans()):
        messages.insert(0, summary())
    return messages
