"""The shipped systemd user unit: its hardening, its optional drop-in, and the exposure
score systemd-analyze gives them (offline, from the files)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "memoryd.service"
DROP_IN = REPO / "systemd" / "memoryd.service.d" / "private-users.conf"

HARDENING = {
    "UMask": "0077",
    "SystemCallFilter": "@system-service",
    "SystemCallErrorNumber": "EPERM",
    "MemoryDenyWriteExecute": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "NoNewPrivileges": "yes",
}
# In a user unit these hide the notify socket: the start times out.
NEVER = ("ProtectKernelTunables", "ProtectControlGroups")


def settings(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    return found


def test_the_unit_ships_the_hardening_that_works_in_a_user_unit() -> None:
    unit = settings(UNIT)
    for key, value in HARDENING.items():
        assert unit.get(key) == value, key


def test_the_unit_gives_the_daemon_more_descriptors_than_the_default_1024() -> None:
    """systemd's default soft limit is 1,024: the metrics endpoint's bound and reserve
    keep the daemon working within it, the unit leaves it room for bursts."""
    assert int(settings(UNIT)["LimitNOFILE"]) >= 4096


def test_the_drop_in_holds_the_private_users_set_and_says_what_private_tmp_hides() -> None:
    drop_in = settings(DROP_IN)
    for key in ("PrivateUsers", "PrivateTmp", "PrivateDevices", "ProtectClock"):
        assert drop_in[key] == "yes", key
    assert drop_in["ProtectSystem"] == "full"
    assert "/tmp" in DROP_IN.read_text()


def test_neither_file_sets_what_breaks_a_user_unit() -> None:
    for path in (UNIT, DROP_IN):
        assert not set(NEVER) & set(settings(path)), path


def exposure(unit_dir: Path, tmp_path: Path) -> float:
    """systemd-analyze's overall exposure (0 safest .. 10) of memoryd.service in unit_dir,
    with its drop-ins there, and no other unit file or drop-in on the machine."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd): no score")
    home = tmp_path / "home"
    binary = home / ".local" / "bin" / "memoryd"
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(0o755)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    done = subprocess.run(
        [analyze, "security", "--offline=true", "--user", str(unit_dir / "memoryd.service")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for memoryd\.service: (\d+\.\d)", done.stdout)
    assert found is not None, done.stdout + done.stderr
    return float(found[1])


def test_the_unit_alone_scores_at_most_7(tmp_path: Path) -> None:
    """8.4 EXPOSED before the hardening; 6.6 with it (systemd 252, ``--offline=true``: the
    figure docs/guides/systemd.md gives)."""
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    shutil.copy(UNIT, unit_dir)
    assert exposure(unit_dir, tmp_path) <= 7.0


def test_the_unit_with_the_private_users_drop_in_scores_at_most_5(tmp_path: Path) -> None:
    unit_dir = tmp_path / "units"
    (unit_dir / "memoryd.service.d").mkdir(parents=True)
    shutil.copy(UNIT, unit_dir)
    shutil.copy(DROP_IN, unit_dir / "memoryd.service.d")
    assert exposure(unit_dir, tmp_path) <= 5.0


def test_the_units_comment_points_to_places_that_exist() -> None:
    """The unit's install comment names a README heading and a guide that are there."""
    comment = UNIT.read_text().splitlines()[1]
    heading = re.search(r'README\.md \("([^"]+)"\)', comment)
    assert heading is not None, comment
    assert f"\n## {heading[1]}\n" in (REPO / "README.md").read_text()
    guides = re.findall(r"docs/[\w/.-]+\.md", comment)
    assert guides and all((REPO / guide).is_file() for guide in guides)


def test_the_drop_ins_comment_gives_the_scores_the_guide_gives_and_systemd_measures(
    tmp_path: Path,
) -> None:
    """The drop-in's comment and docs/guides/systemd.md state the same two exposure
    scores (the unit alone, with the drop-in); with the systemd the guide names, they are
    what systemd-analyze measures."""
    comment = re.search(r"(\d+\.\d) instead of (\d+\.\d)", DROP_IN.read_text())
    assert comment is not None
    with_drop_in, alone = float(comment[1]), float(comment[2])
    guide = (REPO / "docs" / "guides" / "systemd.md").read_text()
    stated = re.search(
        r"the unit alone (\d+\.\d), with the drop-in (\d+\.\d), with systemd (\d+)", guide
    )
    assert stated is not None
    assert (float(stated[1]), float(stated[2])) == (alone, with_drop_in)
    assert f"systemd {stated[3]}" in DROP_IN.read_text()
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd): no score")
    version = subprocess.run([analyze, "--version"], capture_output=True, text=True, check=False)
    if not version.stdout.startswith(f"systemd {stated[3]} "):
        pytest.skip(f"the figures are systemd {stated[3]}'s; this is {version.stdout[:12]}")
    unit_dir = tmp_path / "units"
    (unit_dir / "memoryd.service.d").mkdir(parents=True)
    shutil.copy(UNIT, unit_dir)
    assert exposure(unit_dir, tmp_path / "alone") == alone
    shutil.copy(DROP_IN, unit_dir / "memoryd.service.d")
    assert exposure(unit_dir, tmp_path / "with") == with_drop_in
