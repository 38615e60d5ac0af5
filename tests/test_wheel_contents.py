"""The wheel carries what toolgate[search] needs: the search model and its tokenizer (issue 29).

The encoder ships inside toolgate (no model package, nothing fetched at run time), so a wheel
without it would install a gateway whose semantic search refuses every request.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from toolgate.search import embedder

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_the_wheel_ships_the_search_model_and_its_tokenizer(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("toolgate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        model = archive.read("toolgate/search/minilm_tools_int8.onnx")
        tokenizer = archive.read("toolgate/search/minilm_tokenizer.json")
    assert hashlib.sha256(model).hexdigest() == embedder.MODEL_SHA256
    assert tokenizer == embedder.TOKENIZER.read_bytes()
    # Nothing of the training or evaluation data, nor build output, goes into the wheel.
    assert not [n for n in names if n.startswith(("bench/", "tests/", ".venv/"))]
    # Exactly the package's tracked files: a stray file left in src/toolgate (a float32 export
    # of the model beside the int8 one, say) would ship too, as hatchling takes what git does
    # not ignore.
    if shutil.which("git") and (ROOT / ".git").exists():
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "src/toolgate"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        tracked = {name.removeprefix("src/") for name in listed}
        assert {n for n in names if n.startswith("toolgate/")} == tracked
