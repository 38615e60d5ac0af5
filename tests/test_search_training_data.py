"""The search encoder's training data stays apart from both evaluation sets (issue 29).

The shipped encoder was fine-tuned on bench/search/train; its quality is read on bench/search
(the tuning set) and bench/search/holdout (the test set). A service, a request or a tool
description shared between training and evaluation would make those figures measure memory.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "bench" / "search"
sys.path.insert(0, str(BENCH))
try:
    import train_encoder
    from dataset import HERE, HOLDOUT, load_requests, load_tools
finally:
    sys.path.remove(str(BENCH))

SLICES = sorted(p for p in train_encoder.TRAIN.iterdir() if p.is_dir())


def _normal(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _sets() -> Iterator[tuple[Path, list, list]]:
    for folder in (HERE, HOLDOUT):
        tools = load_tools(folder)
        yield folder, tools, load_requests({t.id for t in tools}, folder)


def test_the_training_data_loads_and_is_large_enough() -> None:
    pairs, tools = train_encoder.training_pairs(train_encoder.TRAIN)
    # Every slice parses with the evaluation sets' own loader (labels name known tools).
    assert len(SLICES) >= 6
    assert len(tools) >= 1000 and len(pairs) >= 5000


def test_no_training_service_is_in_an_evaluation_set() -> None:
    assert train_encoder.leaked_services(train_encoder.TRAIN) == set()
    evaluated = {
        re.sub(r"[^a-z0-9]", "", t.namespace.lower()) for _, tools, _ in _sets() for t in tools
    }
    trained = {
        re.sub(r"[^a-z0-9]", "", t.namespace.lower()) for part in SLICES for t in load_tools(part)
    }
    assert trained and not trained & evaluated


def test_no_request_or_description_is_shared_with_an_evaluation_set() -> None:
    evaluated_requests = {_normal(r.text) for _, _, requests in _sets() for r in requests}
    evaluated_descriptions = {_normal(t.description) for _, tools, _ in _sets() for t in tools}
    for part in SLICES:
        tools = load_tools(part)
        requests = load_requests({t.id for t in tools}, part)
        shared = {r.text for r in requests if _normal(r.text) in evaluated_requests}
        assert not shared, f"{part.name}: requests of an evaluation set: {sorted(shared)[:5]}"
        copied = {t.id for t in tools if _normal(t.description) in evaluated_descriptions}
        assert not copied, f"{part.name}: descriptions of an evaluation set: {sorted(copied)[:5]}"


def test_training_refuses_data_with_an_evaluation_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The check runs before torch is imported: it guards every run of the script.
    part = tmp_path / "leaky"
    part.mkdir()
    (part / "catalog_1.txt").write_text("## gmail\nsend_email | Send an email. | to, body\n")
    (part / "requests.txt").write_text("gmail:send_email | mail my landlord about the rent\n")
    with pytest.raises(SystemExit) as raised:
        train_encoder.main(["--data", str(tmp_path), "--out", str(tmp_path / "out")])
    assert raised.value.code == 2
    assert "training services that an evaluation set has: ['gmail']" in capsys.readouterr().err
