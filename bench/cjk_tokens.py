"""Words inside runs of Chinese text: how each way of indexing them finds them.

The text is every message of the Traditional Chinese public sessions in
``tests/public_sessions`` (Claude Code, Codex CLI, Gemini CLI), repeated ``--copies``
times (each copy its own messages) so that timings are not of an empty table. The words
asked are ``--words`` substrings of 2, 3 and 4 characters of its CJK runs, drawn at
random (seeded): what a user types, since Chinese has no spaces to cut a word at. The
truth for a word is the messages whose text holds it (Python ``in``). Three indexes of
the same messages, each an FTS5 table in its own file, built in one transaction:

- ``unicode61``: memoryd's tokenizer before (``porter unicode61 remove_diacritics 2``): a
  CJK run is one token, so only a word that is a whole run is found.
- ``trigram``: FTS5's ``trigram`` tokenizer on the whole text (a second table beside the
  Latin one in practice); a query of fewer than 3 characters matches nothing.
- ``bigrams``: memoryd's way: the same tokenizer, plus a column of each run's overlapping
  character pairs; a word is the phrase of its pairs.

For each: recall (truth messages found), precision (found messages that hold the word),
index bytes, build seconds and the median query in ms.

    python bench/cjk_tokens.py [--copies 50] [--words 300] [--seed 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

sys.path.insert(0, str(common.REPO))

from memoryd.search.query import cjk_term
from memoryd.search.schema import TOKENIZER
from memoryd.search.sessions import claude, codex, gemini
from memoryd.search.sessions.record import Record
from memoryd.search.text import cjk_bigrams, cjk_run

PUBLIC = Path(__file__).resolve().parents[1] / "tests" / "public_sessions"
PARSERS = {".claude": claude.parse, ".codex": codex.parse, ".gemini": gemini.parse}


def texts() -> list[str]:
    """Every message text of the public sessions that holds a CJK run."""
    found = []
    for home, parse in PARSERS.items():
        for path in sorted((PUBLIC / home).rglob("*.json*")):
            data = path.read_bytes()
            records: list[Record] = (
                [parse(data)]
                if path.suffix == ".json"
                else [parse(line) for line in data.splitlines()]
            )
            found += [m.text for r in records for m in r.messages if cjk_run().search(m.text)]
    return found


def words(corpus: list[str], count: int, seed: int) -> list[str]:
    runs = [run for text in corpus for run in cjk_run().findall(text) if len(run) >= 4]
    pick = random.Random(seed)
    asked: dict[str, None] = {}
    while len(asked) < count:
        run = pick.choice(runs)
        size = pick.choice((2, 3, 4))
        at = pick.randrange(0, len(run) - size + 1)
        asked[run[at : at + size]] = None
    return list(asked)


def build(kind: str, rows: list[str], folder: Path) -> tuple[sqlite3.Connection, float, int]:
    path = folder / f"{kind}.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    began = time.perf_counter()
    if kind == "trigram":
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize = 'trigram')")
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t(body) VALUES (?)", [(text,) for text in rows])
    elif kind == "unicode61":
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize = '{TOKENIZER}')")
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t(body) VALUES (?)", [(text,) for text in rows])
    else:
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, pairs, tokenize = '{TOKENIZER}')")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO t(body, pairs) VALUES (?, ?)",
            [(text, cjk_bigrams(text)) for text in rows],
        )
    conn.execute("COMMIT")
    seconds = time.perf_counter() - began
    conn.execute("VACUUM")
    return conn, seconds, path.stat().st_size


def expression(kind: str, word: str) -> str | None:
    if kind == "bigrams":
        return f'"{word}" OR ({cjk_term(word)})'
    if kind == "trigram" and len(word) < 3:
        return None  # FTS5's trigram tokenizer matches nothing shorter than 3 characters
    return f'"{word}"'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    corpus = texts()
    rows = corpus * args.copies
    asked = words(corpus, args.words, args.seed)
    truth = {word: {i for i, text in enumerate(rows) if word in text} for word in asked}
    report: dict[str, Any] = {
        "messages": len(rows),
        "text_bytes": sum(len(text.encode()) for text in rows),
        "words": len(asked),
        "by_length": {n: sum(len(w) == n for w in asked) for n in (2, 3, 4)},
        "kinds": {},
    }
    kinds: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="memoryd-cjk-") as scratch:
        for kind in ("unicode61", "trigram", "bigrams"):
            conn, seconds, size = build(kind, rows, Path(scratch))
            found_all = relevant = returned = 0
            timings = []
            by_length: dict[int, list[int]] = {2: [0, 0], 3: [0, 0], 4: [0, 0]}
            for word in asked:
                match = expression(kind, word)
                began = time.perf_counter()
                got = (
                    {
                        r - 1
                        for (r,) in conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,))
                    }
                    if match
                    else set()
                )
                timings.append((time.perf_counter() - began) * 1000)
                want = truth[word]
                relevant += len(want & got)
                returned += len(got)
                whole = want <= got
                found_all += whole
                by_length[len(word)][0] += whole
                by_length[len(word)][1] += 1
            conn.close()
            kinds[kind] = {
                "recall": round(
                    sum(len(truth[w]) for w in asked)
                    and relevant / sum(len(truth[w]) for w in asked),
                    3,
                ),
                "precision": round(relevant / returned, 3) if returned else None,
                "words_fully_found": round(found_all / len(asked), 3),
                "fully_found_by_length": {
                    n: round(a / b, 3) for n, (a, b) in by_length.items() if b
                },
                "index_bytes": size,
                "build_s": round(seconds, 3),
                "query_ms_median": round(statistics.median(timings), 3),
            }
    report["kinds"] = kinds
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{report['messages']:,} messages, {report['text_bytes'] / 1e6:.1f} MB of text, "
        f"{report['words']} words asked (by length: {report['by_length']})"
    )
    columns = ("index", "recall", "precision", "words fully found (2 / 3 / 4 chars)")
    print("| " + " | ".join((*columns, "index MB", "build s", "query ms")) + " |")
    print("|---|---|---|---|---|---|---|")
    for kind, figures in kinds.items():
        assert isinstance(figures, dict)
        size = figures["index_bytes"]
        assert isinstance(size, int)
        lengths = " / ".join(str(v) for v in figures["fully_found_by_length"].values())
        print(
            f"| {kind} | {figures['recall']} | {figures['precision']} | "
            f"{figures['words_fully_found']} ({lengths}) | {size / 1e6:.1f} | "
            f"{figures['build_s']} | {figures['query_ms_median']} |"
        )


if __name__ == "__main__":
    main()
