"""The call paths of this tree beside those of another git ref (default ``main``), alternating.

    python bench/vs_ref.py                          # main vs this tree, OpenTelemetry off and on
    python bench/vs_ref.py --ref HEAD~3 --runs 5 --seconds 8

Two source trees cannot share one process, so this runs ``bench/run.py`` of each in turn — the
ref's (exported with ``git archive`` to a temporary folder and imported from there through
``PYTHONPATH``) with ``call_sync`` and ``gw_async``, then this tree's with the same rows plus
``otel_sync`` and ``otel_async`` (OpenTelemetry on) — ``--runs`` times, alternating, so that the
machine's drift hits both alike. Each row's figure is the median over the runs of the per-run
medians; the per-run medians are printed beside it. Both use this interpreter and its packages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_ROWS = ("call_sync", "gw_async")
OTEL_ROWS = ("otel_sync", "otel_async")


def _export(ref: str, into: Path) -> Path:
    """The tree of ``ref`` in ``into`` (via ``git archive``)."""
    archive = into / "ref.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", ref], cwd=ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def _medians(tree: Path, rows: tuple[str, ...], args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    command = [
        sys.executable,
        str(tree / "bench" / "run.py"),
        "--only",
        ",".join(rows),
        "--seconds",
        str(args.seconds),
        "--rounds",
        str(args.rounds),
        "--no-http",
        "--no-sandbox",
        "--json",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    return {row["key"]: row["median_us"] for row in report["scenarios"] if row["key"] in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--ref", default="main", help="the git ref to compare with (main)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each tree (3)")
    parser.add_argument("--seconds", type=float, default=6.0, help="µs budget per run (6)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per run (3)")
    args = parser.parse_args(argv)
    samples: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="toolgate-ref-") as folder:
        ref_tree = _export(args.ref, Path(folder))
        for run in range(1, args.runs + 1):
            print(f"run {run}/{args.runs} …", file=sys.stderr)
            for label, tree, rows in (
                (args.ref, ref_tree, BASE_ROWS),
                ("this tree", ROOT, BASE_ROWS + OTEL_ROWS),
            ):
                for key, median in _medians(tree, rows, args).items():
                    samples.setdefault((label, key), []).append(median)
    print(f"median µs per call (median of {args.runs} alternating runs; per run in brackets)")
    for key, on_key in zip(BASE_ROWS, OTEL_ROWS, strict=True):
        for label, row in (
            (args.ref, key),
            ("this tree, OTel off", key),
            ("this tree, OTel on", on_key),
        ):
            source = args.ref if label == args.ref else "this tree"
            values = samples.get((source, row), [])
            if not values:
                continue
            runs = ", ".join(f"{v:.2f}" for v in values)
            print(f"  {key:<10} {label:<20} {statistics.median(values):8.2f}   [{runs}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
