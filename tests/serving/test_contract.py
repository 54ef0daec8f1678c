"""The service against its own OpenAPI contract: schemathesis generates requests from /openapi.json
(valid and invalid ones, undeclared methods) and runs all its checks on the answers, in-process
through its ASGI loader (no network), on the tiny BM25 + CLSM bundle with an event log (so
``POST /events`` is checked too: generated clicks name no real search, and get 404 or 422).

It runs schemathesis's engine (what its CLI runs: examples, coverage, fuzzing and stateful
phases) rather than its pytest plugin, whose lazy fixture loader does not work with pytest 9."""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema
from schemathesis.specs.openapi.checks import positive_data_acceptance

from semsearch.serving import create_app
from semsearch.serving.app import MAX_K

MIN_CASES = 1000
DEFAULT_K = 10  # /search's k when the request has none

CONFIG: dict[str, Any] = {
    # Hypothesis (the engine sets deadline=None): reproducible in CI (derandomize), no example
    # database, no health-check failures for a CLSM explain taking ms on a loaded machine
    "suppress-health-check": ["too_slow", "filter_too_much"],
    "seed": 19,
    "generation": {"deterministic": True, "database": "none", "max-examples": 50},
    # every check on; a query longer than the limit answers 413 (documented), which schemathesis's
    # default list of rejection statuses lacks
    "checks": {"negative_data_rejection": {"expected-statuses": ["400", "404", "405", "413", "422"]}},
    # the endpoints with parameters get the examples; the others have one request to make
    "operations": [
        {
            "include-path": "/search",
            "generation": {"max-examples": 600},
            # replaced by paging_aware_acceptance below
            "checks": {"positive_data_acceptance": {"enabled": False}},
        },
        {"include-path": "/explain", "generation": {"max-examples": 400}},
        {"include-path": "/events", "generation": {"max-examples": 100}},
    ],
}
PAGING_CHECKS: list[int] = []


def past_the_depth_limit(query: dict[str, Any] | None) -> bool:
    """offset + k > MAX_K with both in their documented bounds (k absent: its default, 10): the
    documented 422 that per-parameter bounds cannot express (OpenAPI has no cross-parameter constraints)."""
    try:
        k, offset = int((query or {}).get("k", DEFAULT_K)), int((query or {})["offset"])
    except (KeyError, TypeError, ValueError):
        return False
    return 1 <= k <= MAX_K and 0 <= offset < MAX_K and offset + k > MAX_K


@schemathesis.check
def paging_aware_acceptance(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's positive_data_acceptance on /search, except the 422 for offset + k > MAX_K."""
    if case.path != "/search":
        return None
    PAGING_CHECKS.append(response.status_code)
    if response.status_code == 422 and past_the_depth_limit(case.query):
        return None
    return positive_data_acceptance(ctx, response, case)


def keep_offset_in_range(ctx: Any, query: dict[str, Any] | None) -> dict[str, Any] | None:
    """offset + k <= MAX_K, which per-parameter bounds cannot say (the server answers 422 past it,
    as documented): bring an in-range pair back in range, leave anything else as generated."""
    if query and isinstance(query.get("k", DEFAULT_K), int) and isinstance(query.get("offset"), int):
        k, offset = query.get("k", DEFAULT_K), query["offset"]
        if 1 <= k <= MAX_K and offset >= 0 and offset + k > MAX_K:
            query["offset"] = MAX_K - k
    return query


def test_the_service_keeps_its_openapi_contract(make_bundle, tmp_path):
    app = create_app(make_bundle(tmp_path / "b"), events=tmp_path / "events")  # with POST /events logging
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_dict(CONFIG))
    schema.hook("map_query")(keep_offset_in_range)
    cases: dict[str, int] = {}
    failures: list[str] = []
    errors: list[str] = []
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            rec = event.recorder
            cases[f"{event.phase.value} {rec.label}"] = cases.get(f"{event.phase.value} {rec.label}", 0) + len(
                rec.cases
            )
            for checks in rec.checks.values():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failures.append(
                            f"{rec.label} {check.name}: {check.failure_info.failure.title}\n"
                            f"{check.failure_info.failure.message}\n{check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError):
            errors.append(
                f"{event.label}: {event.info.format()}" if hasattr(event.info, "format") else repr(event.value)
            )
        elif isinstance(event, events.FatalError):
            errors.append(repr(event.exception))
    print(cases)
    assert not errors, "\n\n".join(errors)
    assert not failures, f"{len(failures)} failed checks:\n\n" + "\n\n".join(dict.fromkeys(failures))
    assert sum(cases.values()) >= MIN_CASES, cases
    assert 422 in PAGING_CHECKS and 200 in PAGING_CHECKS  # the replacement check ran
