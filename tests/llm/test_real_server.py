"""bench/real_server.py against a real llama.cpp ``llama-server`` and a GGUF model, when
the environment names both (``MEMORYD_LLAMA_SERVER``, ``MEMORYD_LLAMA_GGUF``): every
scenario ends as designed with 0 lines lost. CI has no binary, so there it is skipped
(docs/guides/local-models.md says how to run it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVER = os.environ.get("MEMORYD_LLAMA_SERVER", "")
GGUF = os.environ.get("MEMORYD_LLAMA_GGUF", "")


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    not (SERVER and GGUF), reason="no llama-server: set MEMORYD_LLAMA_SERVER and MEMORYD_LLAMA_GGUF"
)
def test_every_scenario_against_a_real_llama_server_ends_as_designed_losing_nothing() -> None:
    # The paths go as arguments: no MEMORYD_* variable reaches a test's processes.
    bench = [sys.executable, str(REPO / "bench" / "real_server.py"), "--json"]
    done = subprocess.run(
        [*bench, "--server", SERVER, "--gguf", GGUF],
        capture_output=True,
        text=True,
        timeout=3300,
        check=False,
    )
    assert done.stdout.startswith("["), done.stderr[-2000:]
    rows = json.loads(done.stdout)
    assert [row["name"] for row in rows] == [
        "summary",
        "learned-overflow",
        "shared-cache",
        "length-cut",
        "restart",
    ]
    for row in rows:
        assert row["lines_lost"] == 0, row
        assert row["as_designed"], row
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_bench_refuses_to_run_without_a_server_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYD_LLAMA_")}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "real_server.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "real_server: no llama-server binary or GGUF given "
        "(set MEMORYD_LLAMA_SERVER and MEMORYD_LLAMA_GGUF)\n"
    )
