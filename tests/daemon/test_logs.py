"""Log lines carry their syslog priority for journald only when the stream is the journal's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import logging, structlog
from memoryd.daemon.logs import configure_logging
configure_logging("json", "debug")
log = structlog.get_logger("probe")
log.debug("d_event"); log.info("i_event"); log.warning("w_event"); log.error("e_event")
logging.getLogger("watchdog").warning("w_stdlib")
"""


def run_probe(tmp_path: Path, journal: bool | str) -> list[str]:
    """Run the probe with stdout to a file; JOURNAL_STREAM names that file when ``journal``
    is True, another file's device:inode when it is "other", and is unset when False."""
    out_path = tmp_path / "out.log"
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    with out_path.open("wb") as out:
        if journal:
            target = out_path if journal is True else Path(sys.executable)
            st = os.stat(target)
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        subprocess.run([sys.executable, "-c", PROBE], stdout=out, env=env, timeout=60, check=True)
    return out_path.read_text().splitlines()


def test_under_journal_stream_every_line_starts_with_its_level_priority(tmp_path: Path) -> None:
    lines = run_probe(tmp_path, journal=True)
    expected = {"d_event": "<7>", "i_event": "<6>", "w_event": "<4>", "e_event": "<3>"}
    expected["w_stdlib"] = "<4>"
    assert len(lines) == len(expected)
    for line in lines:
        prefix, rest = line[:3], line[3:]
        event = json.loads(rest)["event"]
        assert prefix == expected[event], line


def test_without_journal_stream_lines_are_plain_json(tmp_path: Path) -> None:
    lines = run_probe(tmp_path, journal=False)
    assert len(lines) == 5
    assert all(json.loads(line)["event"] for line in lines)


def test_a_journal_stream_that_is_not_our_stdout_adds_no_prefix(tmp_path: Path) -> None:
    """A process whose output was redirected away from the journal writes plain lines."""
    lines = run_probe(tmp_path, journal="other")
    assert all(line.startswith("{") for line in lines)
