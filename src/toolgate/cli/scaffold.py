"""``toolgate tools new``: the files of a new, working tool folder in any runtime.

Every scaffold is the same small tool: it reads ``{"name": ...}`` (plus ``workspacePath`` and
``sessionId``) as JSON on stdin and writes ``{"message": "Hello, <name>!"}`` to stdout, so it runs
as soon as it is created and shows the whole execution model of tool folders in a few lines.
"""

from __future__ import annotations

import json
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..worker_helpers import HELPERS

__all__ = ["SCAFFOLD_RUNTIMES", "WORKER_SCAFFOLDS", "Scaffold", "scaffold"]


@dataclass(frozen=True, slots=True)
class Scaffold:
    """The script of one runtime."""

    file_name: str
    code: str
    timeout_ms: int = 30_000
    executable: bool = False


_PYTHON = '''"""{name}: a toolgate tool (runtime python).

Reads one JSON object on stdin: the arguments declared in tool.md's inputSchema, plus
workspacePath (the folder to act on; also the current folder) and sessionId.
Writes one JSON object to stdout. To fail, write {{"error": "what went wrong"}} or exit non-zero.
Try it: python3 script.py < test-input.json
"""

import json
import sys


def main() -> None:
    request = json.load(sys.stdin)
    name = request.get("name") or "world"
    json.dump({{"message": f"Hello, {{name}}!"}}, sys.stdout)


if __name__ == "__main__":
    main()
'''

_NODE = """// {name}: a toolgate tool (runtime node).
//
// Reads one JSON object on stdin: the arguments declared in tool.md's inputSchema, plus
// workspacePath (the folder to act on; also the current folder) and sessionId.
// Writes one JSON object to stdout. To fail, write {{"error": "what went wrong"}} or exit non-zero.
// Try it: node script.js < test-input.json

const chunks = [];
process.stdin.on("data", (chunk) => chunks.push(chunk));
process.stdin.on("end", () => {{
  const request = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{{}}");
  const name = request.name || "world";
  process.stdout.write(JSON.stringify({{ message: `Hello, ${{name}}!` }}) + "\\n");
}});
"""

_BUN = """// {name}: a toolgate tool (runtime bun).
//
// Reads one JSON object on stdin: the arguments declared in tool.md's inputSchema, plus
// workspacePath (the folder to act on; also the current folder) and sessionId.
// Writes one JSON object to stdout. To fail, write {{"error": "what went wrong"}} or exit non-zero.
// Try it: bun run script.ts < test-input.json

const request = JSON.parse((await Bun.stdin.text()) || "{{}}");
const name: string = request.name || "world";
console.log(JSON.stringify({{ message: `Hello, ${{name}}!` }}));
"""

# Pure bash has no JSON parser: use jq when it is installed, else pick the "name" string out of
# the input. A JSON string copied verbatim (escapes included) is still a valid JSON string, so the
# fallback needs no escaping of its own.
_BASH_BODY = """\
# Reads one JSON object on stdin: the arguments declared in tool.md's inputSchema, plus
# workspacePath (the folder to act on; also the current folder) and sessionId.
# Writes one JSON object to stdout. To fail, write {{"error": "what went wrong"}} or exit non-zero.
set -euo pipefail

request=$(cat)

if command -v jq >/dev/null 2>&1; then
	printf '%s' "$request" | jq -c '{{message: ("Hello, " + (.name // "world") + "!")}}'
	exit 0
fi

# Without jq: copy the "name" string as written (it is already JSON-escaped).
name='world'
pattern='"name"[[:space:]]*:[[:space:]]*"(([^"\\\\]|\\\\.)*)"'
if [[ $request =~ $pattern ]]; then
	name=${{BASH_REMATCH[1]}}
fi
printf '{{"message": "Hello, %s!"}}\\n' "$name"
"""

_BASH = (
    "#!/usr/bin/env bash\n# {name}: a toolgate tool (runtime bash).\n"
    "# Try it: bash script.sh < test-input.json\n#\n" + _BASH_BODY
)

_BINARY = (
    "#!/usr/bin/env bash\n"
    "# {name}: a toolgate tool (runtime binary): toolgate runs this file directly.\n"
    "#\n"
    "# Replace this file with your executable (a compiled program, or any script with a #! line)\n"
    "# and keep it executable (chmod +x script). It must follow the same contract as this one.\n"
    "# Try it: ./script < test-input.json\n#\n" + _BASH_BODY
)

_GO = """// {name}: a toolgate tool (runtime go, run with `go run script.go`).
//
// Reads one JSON object on stdin: the arguments declared in tool.md's inputSchema, plus
// workspacePath (the folder to act on; also the current folder) and sessionId.
// Writes one JSON object to stdout. To fail, write {{"error": "what went wrong"}} or exit non-zero.
// Try it: go run script.go < test-input.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {{
	var request struct {{
		Name string `json:"name"`
	}}
	if err := json.NewDecoder(os.Stdin).Decode(&request); err != nil {{
		fmt.Fprintln(os.Stderr, "invalid input:", err)
		os.Exit(1)
	}}
	if request.Name == "" {{
		request.Name = "world"
	}}
	response := map[string]string{{"message": "Hello, " + request.Name + "!"}}
	json.NewEncoder(os.Stdout).Encode(response)
}}
"""

_POWERSHELL = """# {name}: a toolgate tool (runtime powershell, run with `pwsh -File script.ps1`).
#
# Reads one JSON object on stdin: the arguments declared in tool.md's inputSchema, plus
# workspacePath (the folder to act on; also the current folder) and sessionId.
# Writes one JSON object to stdout. To fail, write {{"error": "what went wrong"}} or exit non-zero.
# Try it: Get-Content test-input.json | pwsh -File script.ps1

$request = [Console]::In.ReadToEnd() | ConvertFrom-Json
$name = if ($request.name) {{ $request.name }} else {{ "world" }}
@{{ message = "Hello, $name!" }} | ConvertTo-Json -Compress
"""

#: The runtimes ``tools new`` can scaffold, with their script.
SCAFFOLD_RUNTIMES: dict[str, Scaffold] = {
    "python": Scaffold("script.py", _PYTHON),
    "node": Scaffold("script.js", _NODE),
    "bun": Scaffold("script.ts", _BUN),
    "bash": Scaffold("script.sh", _BASH),
    # ``go run`` compiles first; the first call can take a while.
    "go": Scaffold("script.go", _GO, timeout_ms=60_000),
    "binary": Scaffold("script", _BINARY, executable=True),
    "powershell": Scaffold("script.ps1", _POWERSHELL),
}

_PYTHON_WORKER = '''"""{name}: a toolgate worker tool (runtime python, protocol: worker).

The process stays up: toolgate_worker.serve reads one JSON line per call (the arguments declared
in tool.md's inputSchema, plus workspacePath and sessionId) and writes handle()'s answer as one
JSON line. Return {{"error": "what went wrong"}} (or raise) to fail a call. Imports and caches at
the top are paid once, not per call. Try it: echo '{{"name": "Ada"}}' | python3 script.py
"""

from toolgate_worker import serve


def handle(request: dict) -> dict:
    name = request.get("name") or "world"
    return {{"message": f"Hello, {{name}}!"}}


serve(handle)
'''

_JS_WORKER = """// {name}: a toolgate worker tool (runtime {runtime}, protocol: worker).
//
// The process stays up: serve() reads one JSON line per call (the arguments declared in
// tool.md's inputSchema, plus workspacePath and sessionId) and writes the handler's answer as
// one JSON line. Return {{ error: "what went wrong" }} (or throw) to fail a call. Start-up work
// at the top is paid once, not per call. Try it: echo '{{"name": "Ada"}}' | {runtime} {script}

import {{ serve }} from "./toolgate_worker.mjs";

serve(async (request) => {{
  const name = request.name || "world";
  return {{ message: `Hello, ${{name}}!` }};
}});
"""

#: The runtimes ``tools new --protocol worker`` can scaffold: the script, which uses the helper.
WORKER_SCAFFOLDS: dict[str, Scaffold] = {
    "python": Scaffold("script.py", _PYTHON_WORKER),
    "node": Scaffold("script.mjs", _JS_WORKER),
    "bun": Scaffold("script.mjs", _JS_WORKER),
}

_TOOL_MD = """---
# The declaration of the tool '{name}' (a tool folder). These comments are for you; the
# Markdown body below the closing '---' is the description the model reads.
name: {name_yaml:<19} # the tool's id is local:{name} once installed
script: {script:<17} # the file run for every call (inside this folder)
runtime: {runtime:<16} # bun, node, python, bash, go, binary or powershell
timeout: {timeout:<16} # milliseconds before the call is stopped
{protocol}requireApproval: false    # true: a person approves every call
dangerous: false          # true: the tool changes things; shown with a warning sign
hasSecurityCheck: false   # true: run securityScript (default security.ts) before each call
env: []                   # variables (from $TOOLGATE_HOME/.env) the script may read
inputSchema:              # JSON Schema of the arguments the model passes
  type: object
  properties:
    name:
      type: string
      description: "Who to greet"
  required:
    - name
outputSchema:             # JSON Schema of what the script writes to stdout
  type: object
  properties:
    message:
      type: string
    error:
      type: string
---

Greet someone by name: returns a message such as "Hello, Ada!".

Use it to check that the '{name}' tool runs. (Scaffolded by `toolgate tools new`: replace this
text with what your tool does, when to use it rather than another tool, and any constraints -
the model reads this text to decide when and how to call the tool. Then edit the schemas above
and the code in {script}.)
"""


def scaffold(folder: Path, name: str, runtime: str, *, worker: bool = False) -> list[Path]:
    """Write ``tool.md``, the script and ``test-input.json`` into the new ``folder`` (with
    ``worker``: a ``protocol: worker`` tool, and the worker helper next to its script).

    The folder must not exist. Returns the files written, in that order.
    """
    template = (WORKER_SCAFFOLDS if worker else SCAFFOLD_RUNTIMES)[runtime]
    protocol = (
        "protocol: worker          # one long-lived process answers a JSON line per call\n"
        if worker
        else ""
    )
    folder.mkdir(parents=True)
    tool_md = folder / "tool.md"
    tool_md.write_text(
        _TOOL_MD.format(
            name=name,
            name_yaml=json.dumps(name),
            script=template.file_name,
            runtime=runtime,
            timeout=template.timeout_ms,
            protocol=protocol,
        ),
        encoding="utf-8",
    )
    script = folder / template.file_name
    script.write_text(
        template.code.format(name=name, runtime=runtime, script=template.file_name),
        encoding="utf-8",
    )
    written = [tool_md, script]
    if worker:
        helper = HELPERS[runtime]
        copy = folder / helper.name
        shutil.copyfile(helper, copy)
        written.append(copy)
    if template.executable:
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    sample = folder / "test-input.json"
    sample.write_text(json.dumps({"name": "Ada"}) + "\n", encoding="utf-8")
    return [*written, sample]
