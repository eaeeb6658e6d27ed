"""Never worse than offline (pure): an LLM summary keeping fewer details than the offline
summary of the same input gives way to it, its lines that add a detail kept."""

from __future__ import annotations

from memoryd.summary.extractive import extractive_summary
from memoryd.summary.reconcile import LLM_LINES_HEADER, Floor, reconcile
from memoryd.summary.retention import extract_details, score

MESSAGES = [
    {"role": "user", "content": "Fix the flaky test in tests/pay/test_ledger.py."},
    {"role": "assistant", "content": "I ran `pytest tests/pay` and it failed with exit 1."},
    {"role": "user", "content": "We decided to pin requests to 2.31.0 for now."},
    {"role": "assistant", "content": "Pinned it in requirements.txt; the port is 8443."},
]
NOISE = (
    "- The next step is to provide the output of the conversation.\n- The response is structured."
)


def _floor(llm: str, offline: str) -> Floor | None:
    """The Floor the reconcile step chose for ``llm`` against ``offline``."""
    details = extract_details(MESSAGES)
    return reconcile(llm, details, None, 512, 0.9, offline=lambda: offline).floor


def test_a_summary_of_noise_gives_way_to_the_offline_items() -> None:
    offline = extractive_summary(MESSAGES, None, 512)
    floor = _floor(NOISE, offline)

    assert floor is not None
    assert floor.text == offline and floor.llm_lines == 0
    assert floor.llm_score < floor.offline_score
    assert (
        floor.note
        == f"llm summary kept {round(floor.llm_score * 100)}% of details: offline items used"
    )


def test_an_llm_line_that_adds_a_detail_stays_after_the_offline_items() -> None:
    details = extract_details(MESSAGES)
    offline = "- Task: fix the flaky test in tests/pay/test_ledger.py; ran `pytest tests/pay`."
    llm = f"{NOISE}\n- Pinned in requirements.txt."
    assert score(details, llm).score < score(details, offline).score

    floor = _floor(llm, offline)

    assert floor is not None and floor.llm_lines == 1
    assert floor.text == f"{offline}\n\n{LLM_LINES_HEADER}\n- Pinned in requirements.txt."


def test_an_llm_summary_at_least_as_good_is_left_alone() -> None:
    offline = extractive_summary(MESSAGES, None, 512)
    llm = "\n".join(f"- {message['content']}" for message in MESSAGES)

    assert _floor(llm, offline) is None
