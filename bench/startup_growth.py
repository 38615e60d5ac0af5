"""What starting up costs as the catalog grows: ``toolgate tools list`` and ``toolgate serve``
at 100, 1,000 and 10,000 tools, beside their floors, for Python tools and for tool folders.

    python bench/startup_growth.py                          # ~3-5 min on a small machine
    python bench/startup_growth.py --sizes 100,1000 --runs 3 --kinds folders
    python bench/startup_growth.py --compare /tmp/main      # + another tree, alternating

Each catalog is written once into a temporary folder, with its own ``toolgate.yaml`` and
``$TOOLGATE_HOME`` (so the embedded SQLite stores live there too):

* ``python``: one ``.py`` file of N ``@tool`` functions (ten namespaces, three parameters, a
  docstring with argument descriptions), listed under ``python:``;
* ``folders``: N tool folders (``tool.md`` with input and output schemas, and a Python script),
  the folder listed under ``tool_folders:``.

Every figure is the wall time of a fresh subprocess (``python -m toolgate`` or ``python -c``),
the median of ``--runs`` rounds; in each round every column of every row is measured once, one
after the other, so load on the machine spreads over all of them:

* ``floor: import`` — ``python -c 'import toolgate'``: the interpreter and the library;
* ``floor: source`` — the catalog without toolgate: importing the same module with ``@tool``
  replaced by a decorator that returns the function (``python``), or listing the folders and
  reading every ``tool.md`` and parsing its front matter with PyYAML's C loader (``folders``);
* ``tools list`` — ``toolgate --config … tools list`` to its exit (status 0, every tool listed);
* ``serve → /healthz`` — ``toolgate --config … serve --port P`` started, ``GET /healthz`` polled
  every 5 ms until it answers 200; then ``GET /v1/tools?limit=200`` is asked and
  ``→ /v1/tools`` is the time from the start to that answer (what a first client waits for),
  then the server is stopped with SIGTERM.

``--compare TREE`` adds the same two toolgate columns for the ``src`` of another checkout
(``PYTHONPATH=TREE/src``), measured in the same rounds: a before/after pair from one run.
Absolute times depend on the machine and its load; compare the rows of one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OURS = Path(__file__).resolve().parents[1] / "src"
KINDS = ("python", "folders")
#: Seconds a server may take to answer /healthz before the row is given up.
SERVE_LIMIT = 300.0


# -- the catalogs -------------------------------------------------------------------------------


def _python_source(size: int, *, plain: bool) -> str:
    head = (
        ["def tool(**_options):", "    return lambda function: function"]
        if plain
        else ["from toolgate import tool"]
    )
    lines = [*head, ""]
    for index in range(size):
        lines += [
            f'@tool(namespace="area{index % 10}", effect="read_only")',
            f"def find_{index:05d}(query: str, limit: int = 10, exact: bool = False) -> list[str]:",
            f'    """Find records of kind {index} matching a query.',
            "",
            "    Args:",
            f"        query: Words to look for in records of kind {index}.",
            "        limit: How many records to return at most.",
            "        exact: Match the whole query only.",
            '    """',
            "    return [query][:limit]",
            "",
            "",
        ]
    return "\n".join(lines)


_TOOL_MD = """---
name: find_{index:05d}
script: run.py
runtime: python
timeout: 10000
requireApproval: false
dangerous: false
inputSchema:
  type: object
  properties:
    query:
      type: string
      description: "Words to look for in records of kind {index}"
    limit:
      type: integer
      minimum: 1
      default: 10
      description: "How many records to return at most"
  required:
    - query
  additionalProperties: false
outputSchema:
  type: object
  properties:
    records:
      type: array
      items:
        type: string
---

Find records of kind {index} matching a query.
"""

_SCRIPT = "import json, sys\nprint(json.dumps({'records': [json.load(sys.stdin)['query']]}))\n"


def make_catalog(kind: str, size: int, folder: Path) -> Path:
    """Write a catalog of ``size`` tools of ``kind`` into ``folder``; its toolgate.yaml."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "home").mkdir(exist_ok=True)
    if kind == "python":
        (folder / "tools.py").write_text(_python_source(size, plain=False))
        (folder / "plain_tools.py").write_text(_python_source(size, plain=True))
        (folder / "toolgate.yaml").write_text("python:\n  - tools.py\n")
    else:
        tools = folder / "tools"
        for index in range(size):
            one = tools / f"find_{index:05d}"
            one.mkdir(parents=True)
            (one / "tool.md").write_text(_TOOL_MD.format(index=index))
            (one / "run.py").write_text(_SCRIPT)
        config = "tool_folders:\n  - path: tools\n    namespace: files\n"
        (folder / "toolgate.yaml").write_text(config)
    return folder / "toolgate.yaml"


_FOLDERS_FLOOR = """
import sys, yaml
from pathlib import Path
count = 0
for folder in sorted(Path(sys.argv[1]).iterdir()):
    text = (folder / "tool.md").read_text()
    front = text.split("---\\n", 2)[1]
    count += len(yaml.load(front, Loader=yaml.CSafeLoader))
print(count)
"""


# -- timing one subprocess ---------------------------------------------------------------------


def _env(src: Path, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env["TOOLGATE_HOME"] = str(home)
    env.pop("OTEL_TRACES_EXPORTER", None)
    return env


def _run(command: list[str], env: dict[str, str], cwd: Path, expect: str | None) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or (expect is not None and expect not in done.stdout):
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}"
            f"{done.stdout[-500:]}"
        )
    return elapsed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _serve(config: Path, env: dict[str, str], size: int) -> tuple[float, float]:
    """Seconds from starting ``toolgate serve`` to its first /healthz 200, and to the answer
    of a first ``GET /v1/tools?limit=200`` asked right after."""
    port = _free_port()
    command = [sys.executable, "-m", "toolgate", "--config", str(config), "serve", "--port"]
    start = time.perf_counter()
    process = subprocess.Popen(
        [*command, str(port)],
        env=env,
        cwd=config.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        healthy = None
        while healthy is None:
            if process.poll() is not None:
                raise RuntimeError(f"serve exited {process.returncode}: {process.stderr.read()!r}")
            if time.perf_counter() - start > SERVE_LIMIT:
                raise RuntimeError("serve did not answer /healthz in time")
            try:
                status, _ = _get(port, "/healthz")
            except OSError:
                status = 0
            if status == 200:
                healthy = time.perf_counter() - start
            else:
                time.sleep(0.005)
        status, body = _get(port, "/v1/tools?limit=200")
        listed = time.perf_counter() - start
        if status != 200:
            raise RuntimeError(f"GET /v1/tools answered {status}: {body[:500]!r}")
        total = json.loads(body).get("total")
        if total is not None and total < size:
            raise RuntimeError(f"GET /v1/tools counted {total} tools, not {size}")
        return healthy, listed
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


# -- one catalog --------------------------------------------------------------------------------


class Row:
    """The samples of one catalog (kind, size) and the actions that take them."""

    def __init__(self, kind: str, size: int, folder: Path, trees: dict[str, Path]) -> None:
        self.kind, self.size, self.folder, self.trees = kind, size, folder, trees
        self.config = make_catalog(kind, size, folder)
        self.samples: dict[str, list[float]] = {}

    def _add(self, column: str, seconds: float) -> None:
        self.samples.setdefault(column, []).append(seconds)

    def actions(self) -> list[tuple[str, Callable[[], None]]]:
        python, home = sys.executable, self.folder / "home"
        any_env = _env(next(iter(self.trees.values())), home)
        steps: list[tuple[str, Callable[[], None]]] = [
            (
                "floor: import",
                lambda: self._add(
                    "floor: import",
                    _run([python, "-c", "import toolgate"], any_env, self.folder, None),
                ),
            )
        ]
        if self.kind == "python":
            source = [python, "-c", "import plain_tools"]
        else:
            source = [python, "-c", _FOLDERS_FLOOR, str(self.folder / "tools")]
        steps.append(
            (
                "floor: source",
                lambda: self._add("floor: source", _run(source, any_env, self.folder, None)),
            )
        )
        for name, src in self.trees.items():
            env = _env(src, home)
            listing = [python, "-m", "toolgate", "--config", str(self.config), "tools", "list"]
            expect = f"{self.size} tools"

            def list_once(
                name: str = name,
                env: dict[str, str] = env,
                listing: list[str] = listing,
                expect: str = expect,
            ) -> None:
                self._add(f"{name}: tools list", _run(listing, env, self.folder, expect))

            def serve_once(name: str = name, env: dict[str, str] = env) -> None:
                healthy, listed = _serve(self.config, env, self.size)
                self._add(f"{name}: serve → /healthz", healthy)
                self._add(f"{name}: serve → /v1/tools", listed)

            steps += [(f"{name}: tools list", list_once), (f"{name}: serve", serve_once)]
        return steps

    def medians(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "tools": self.size,
            **{
                column: {
                    "median": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                }
                for column, values in self.samples.items()
            },
        }


def _render(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = [
        "| kind | tools | " + " | ".join(columns) + " |",
        "|---|---:|" + "---:|" * len(columns),
    ]
    for row in rows:
        cells = [row["kind"], f"{row['tools']:,}"]
        for column in columns:
            figure = row.get(column)
            cells.append(
                "-"
                if figure is None
                else f"{figure['median']:.2f} s ({figure['min']:.2f}–{figure['max']:.2f})"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="catalog sizes, by commas")
    parser.add_argument("--kinds", default=",".join(KINDS), help="python, folders (by commas)")
    parser.add_argument("--runs", type=int, default=3, help="rounds (each figure: median)")
    parser.add_argument("--compare", type=Path, help="another checkout, timed alongside")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    options = parser.parse_args(argv)
    sizes = [int(part) for part in options.sizes.split(",") if part.strip()]
    kinds = [part.strip() for part in options.kinds.split(",") if part.strip()]
    trees = {"ours": OURS}
    if options.compare is not None:
        trees["compare"] = options.compare.resolve() / "src"
    with tempfile.TemporaryDirectory(prefix="toolgate-startup-") as scratch:
        rows = []
        for kind in kinds:
            for size in sizes:
                print(f"writing {size:,} {kind} tools…", file=sys.stderr, flush=True)
                rows.append(Row(kind, size, Path(scratch) / f"{kind}-{size}", trees))
        for round_number in range(options.runs):
            print(f"round {round_number + 1} of {options.runs}…", file=sys.stderr, flush=True)
            for row in rows:
                for _name, action in row.actions():
                    action()
        results = [row.medians() for row in rows]
    columns = ["floor: import", "floor: source"]
    for name in trees:
        columns += [f"{name}: {what}" for what in ("tools list", "serve → /healthz")]
        columns.append(f"{name}: serve → /v1/tools")
    print(json.dumps(results) if options.json else _render(results, columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
