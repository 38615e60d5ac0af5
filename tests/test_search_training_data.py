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
    # leaked_services compares every slice's services with both sets' by service_key; the
    # slices do hold services, so an empty answer is not an empty comparison.
    assert all(load_tools(part) for part in SLICES)
    assert train_encoder.leaked_services(train_encoder.TRAIN) == set()


@pytest.mark.parametrize(
    "spelling",
    ["googlemaps", "GoogleMaps", "aws_s3", "amazon-s3", "ms_teams", "microsoft_teams", "x"],
)
def test_an_evaluation_service_under_another_spelling_is_found(
    tmp_path: Path, spelling: str
) -> None:
    # The evaluation sets have google_maps, s3, teams and twitter.
    part = tmp_path / "leaky"
    part.mkdir()
    (part / "catalog_1.txt").write_text(f"## {spelling}\nsome_tool | Does a thing. | x\n")
    assert train_encoder.leaked_services(tmp_path)


def test_no_training_request_or_description_is_nearly_an_evaluation_sets() -> None:
    # A request equal but for a few words ("what have I been listening to lately? Last.fm user
    # jdoe88" against "what have I been listening to lately", "what address is at 48.8584,
    # 2.2945" against "... at latitude 48.8584 longitude 2.2945") escapes the equality above.
    copies = train_encoder.near_duplicates(train_encoder.TRAIN)
    assert not copies, f"{len(copies)} near an evaluation set's: {copies[:5]}"


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


@pytest.mark.parametrize(
    ("catalog", "request_line", "refusal"),
    [
        # A service of an evaluation set.
        (
            "## gmail\nsend_email | Send an email. | to, body\n",
            "gmail:send_email | mail my landlord about the rent\n",
            "training services that an evaluation set has: ['gmail']",
        ),
        # A request nearly one of an evaluation set's, for a service of its own.
        (
            "## deezer\nrecent | Recent tracks. | user\n",
            "deezer:recent | what have I been listening to lately?\n",
            "nearly an evaluation set's",
        ),
    ],
)
def test_training_refuses_data_that_meets_an_evaluation_set(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    catalog: str,
    request_line: str,
    refusal: str,
) -> None:
    # The checks run before torch is imported: they guard every run of the script.
    part = tmp_path / "slice"
    part.mkdir()
    (part / "catalog_1.txt").write_text(catalog)
    (part / "requests.txt").write_text(request_line)
    with pytest.raises(SystemExit) as raised:
        train_encoder.main(["--data", str(tmp_path), "--out", str(tmp_path / "out")])
    assert raised.value.code == 2
    assert refusal in capsys.readouterr().err
