"""Every crash state a power cut could leave, per scenario, recovered and checked.

Records one real run of each scenario (tests/powerloss/powerloss_scenarios.py), builds its crash
states under the journaling file-system model (tests/powerloss/crash_states.py), and checks each
one after recovery and the next commands (tests/powerloss/powerloss_checks.py): all of them when
there are at most 50,000, else every cut's least and most and ``--samples`` seeded
samples. States that look alike on disk are checked once. Prints, per scenario, the ops
recorded, the crash states, how many were drawn and checked, and the violations (each
saved under bench/results/power_cut-failures/ for a replay).

Target: 0 violations.

    python bench/power_cut.py [--samples 10000] [--seed 22] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import sys
import time
from typing import Any

import _common as common
import structlog

sys.path.insert(0, str(common.REPO / "tests" / "powerloss"))
from crash_states import log_count
from powerloss_run import check_recording, record, scratch_folder
from powerloss_scenarios import SCENARIOS, job_settings


def main() -> int:
    """Check every scenario; exit 1 when a state is not recovered."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--scenario", action="append", help="only these (by name)")
    args = parser.parse_args()
    common.install_exit_handlers()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    failures = common.RESULTS / "power_cut-failures"
    shutil.rmtree(failures, ignore_errors=True)
    rows: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with common.scratch("power_cut") as fallback, scratch_folder(fallback) as scratch:
        (scratch / "config").mkdir()
        settings = job_settings(scratch / "config")
        for number, scenario in enumerate(chosen):
            folder = scratch / str(number)
            recorded = record(scenario, folder, settings)
            report = check_recording(
                scenario.name,
                recorded,
                folder,
                settings,
                samples=args.samples,
                seed=args.seed,
                failures=failures,
            )
            how = "all" if report.enumerated else f"sample, seed {args.seed}"
            rows.append(
                [
                    scenario.name,
                    report.ops,
                    log_count(report.states),
                    how,
                    report.drawn,
                    report.checked,
                    report.jobs,
                    len(report.violations),
                    report.seconds,
                ]
            )
            results.append({**dataclasses.asdict(report), "how": how})
            print(f"{scenario.name}: done in {report.seconds} s", file=sys.stderr, flush=True)
            for violation in report.violations[:5]:
                print(f"  VIOLATION {violation[:400]}", file=sys.stderr)
    headers = (
        "scenario",
        "ops",
        "crash states",
        "checked",
        "drawn",
        "distinct checked",
        "with a job",
        "violations",
        "s",
    )
    print(common.table(headers, rows))
    total = sum(len(r["violations"]) for r in results)
    print(f"\n{total} violations in {time.monotonic() - started:.0f} s")
    common.save("power_cut", {"samples": args.samples, "seed": args.seed, "scenarios": results})
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
