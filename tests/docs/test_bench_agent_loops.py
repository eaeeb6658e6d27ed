"""bench/agent_loops.py keeps working: its quick mode runs end to end on real workspaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_agent_loops_bench_runs_in_quick_mode_and_loses_no_line(tmp_path: Path) -> None:
    """Every strategy and shape is measured on 2 transcripts, each as written and with a
    running tool call; no original line is missing from the live file and the archive."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "bench/agent_loops.py", "--quick", "--json", "--dir", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    strategies = {"narrative", "rolling", "checkpoint"}
    shapes = {"autonomous", "interactive", "text"}
    assert set(report["cells"]) == {f"{s}/{shape}" for s in strategies for shape in shapes}
    for name, cell in report["cells"].items():
        assert cell["jobs"] == 4 and cell["running_jobs"] == 2, name
        assert cell["lost_lines"] == 0, name
        assert 0 <= cell["orphaned"] <= cell["running_jobs"], name
        for share in ("below_trigger", "api_valid", "task_kept", "facts_kept", "recall_at_5"):
            assert cell[share] is None or 0 <= cell[share] <= 1, (name, share)
        assert cell["job_over_yardstick"] > 0, name
    assert len(report["jobs"]) == 36
    assert list(tmp_path.iterdir()) == []
