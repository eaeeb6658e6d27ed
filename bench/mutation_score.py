"""The mutation score of each module of the pure core, from the results ``mutmut run``
left in ``mutants/`` (run from the repository root after it; see
docs/guides/development.md#mutation-testing).

A mutant is killed when a test failed or timed out with it; the score is killed over all
mutants of the module. The survivors are listed by name (``mutmut show NAME`` prints the
change).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memoryd import strict_json

KILLED = {1, 3, 24, -24, 36, 152, 255}
"""mutmut's exit codes of a mutant a test caught (a failure, or a timeout)."""
SURVIVED = 0
NO_TESTS = {5, 33}


def scores(mutants: Path) -> list[tuple[str, int, int, list[str], int, int]]:
    """(module, mutants, killed, survivors, reached by no test, not run yet) for each
    ``.meta`` file."""
    found = []
    for meta in sorted(mutants.rglob("*.py.meta")):
        data = strict_json.loads(meta.read_bytes())
        codes: dict[str, int | None] = data.get("exit_code_by_key", {})
        if not codes:
            continue
        module = str(meta.relative_to(mutants))[: -len(".meta")]
        killed = sum(1 for code in codes.values() if code in KILLED)
        survivors = sorted(name for name, code in codes.items() if code == SURVIVED)
        untested = sum(1 for code in codes.values() if code in NO_TESTS)
        pending = sum(1 for code in codes.values() if code is None)
        found.append((module, len(codes), killed, survivors, untested, pending))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"))
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants")
    args = parser.parse_args()
    if not args.mutants.is_dir():
        print(f"{args.mutants}: no mutmut results here (run mutmut first)", file=sys.stderr)
        return 2
    print(
        f"{'module':32} {'mutants':>7} {'killed':>6} {'survived':>8} {'no test':>7}"
        f" {'not run':>7} {'score':>6}"
    )
    for module, total, killed, survivors, untested, pending in scores(args.mutants):
        score = killed / total if total else 0.0
        print(
            f"{module:32} {total:7} {killed:6} {len(survivors):8} {untested:7} {pending:7}"
            f" {score:6.1%}"
        )
        if args.survivors:
            for name in survivors:
                print(f"    {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
