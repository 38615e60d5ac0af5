"""Fuzz the HTTP API against its own OpenAPI document with schemathesis (4.x), over real HTTP.

Every operation of the document gets a bounded number of generated requests — schema-valid ones
and schema-violating ones — sent as the operator ``ops`` so that every route is reached. Checks:
no 5xx, every status code and content type is documented, every response body matches its
schema, and invalid requests are rejected with a 4xx.

(schemathesis' own pytest loader for fixtures does not run under pytest 9, so the operations
are driven with Hypothesis directly: one test per operation and generation mode.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.parameters import ParameterLocation

from http_api_support import auth, live_server, make_app, make_gateway
from toolgate import Gateway
from toolgate.serve.api import build_api

pytestmark = pytest.mark.slow

#: Generated requests per operation and mode: enough to reach each field's edge cases, few
#: enough to keep the whole module well under a minute on a loaded 2-core machine.
EXAMPLES = 25

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _operations() -> list[tuple[str, str, bool]]:
    """(method, path, whether it takes any input) of every documented operation."""
    with Gateway() as gateway:
        spec = build_api(gateway, authenticate=lambda request: "default").openapi()
    return [
        (
            method.upper(),
            path,
            bool(op.get("parameters") or op.get("requestBody") or op.get("security")),
        )
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    ]


OPERATIONS = _operations()
#: Schema-violating requests need something to violate (``/healthz`` takes nothing).
CASES = [
    pytest.param(method, path, mode, id=f"{method} {path} {mode}")
    for method, path, has_input in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if has_input or mode is GenerationMode.POSITIVE
]


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp_path: Path = tmp_path_factory.mktemp("fuzz")
    gateway = make_gateway(tmp_path)
    # Load the semantic model (toolgate[search]) before fuzzing: its first load can take longer
    # than a request's read timeout on a loaded machine, and cold start is not under test here.
    with contextlib.suppress(RuntimeError):
        gateway.search_tools("warm up", mode="semantic")
    with live_server(make_app(gateway)) as server:
        yield schemathesis.openapi.from_url(f"{server.url}/openapi.json")


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    served = {
        (result.ok().method.upper(), result.ok().path) for result in api_schema.get_all_operations()
    }
    assert served == {(method, path) for method, path, _ in OPERATIONS}


def _headers_for(case: Any) -> dict[str, str]:
    """The operator's key, unless the case's own headers are the schema violation under test.

    The document requires a bearer key, so a negative case may drop or garble ``Authorization``;
    adding the key back would turn that case valid again and the server would rightly accept it.
    """
    if case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER):
        return {}
    return auth("ops")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_the_api_conforms_to_its_own_openapi_document(
    api_schema: Any, method: str, path: str, mode: GenerationMode
) -> None:
    operation = api_schema[path][method]
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS

    @given(case=operation.as_strategy(mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=_headers_for(case), checks=checks)

    run()
