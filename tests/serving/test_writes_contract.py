"""The write endpoints against the OpenAPI contract (issue 50 item 6): schemathesis runs every
phase, with all its checks, on a tiny bundle served with ``allow_writes``, in process; its
stateful phase follows the contract's links (``POST /documents`` → ``GET /search`` by the
upserted title → ``DELETE /documents/{id}`` of a hit → ``GET /search`` by the deleted id) with 0
failures, and the test asserts such a chain ran: an upsert answered 200, then a search, a
delete answered 200 and a search after it, within one scenario."""

from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema

from semsearch.serving import create_app

CONFIG: dict[str, Any] = {
    "suppress-health-check": ["too_slow", "filter_too_much"],
    "seed": 50,
    "generation": {"deterministic": True, "database": "none", "max-examples": 40},
    "operations": [
        {"include-path": "/documents", "generation": {"max-examples": 100}},
        {"include-path-regex": "^/documents/", "generation": {"max-examples": 60}},
        {"include-path": "/search", "generation": {"max-examples": 60}},
    ],
}
SEEN: list[tuple[str, str, str, int, str]] = []  # (phase, method, path, status, scenario)


@schemathesis.check
def record_writes(ctx: Any, response: Any, case: Any) -> bool | None:
    """Not a check: keeps each request's method, path and status (the chains below)."""
    SEEN.append(("", case.method.upper(), case.path, response.status_code, ""))
    return None


def test_writes_keep_the_contract_and_the_stateful_chain_passes(make_bundle, tmp_path):
    app = create_app(make_bundle(tmp_path / "b"), allow_writes=True, changes=tmp_path / "changes")
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_dict(CONFIG))
    schema = schema.include(path_regex="^/(documents|search)")
    failures: list[str] = []
    errors: list[str] = []
    stateful_chains: list[list[tuple[str, str, int]]] = []
    cases: dict[str, int] = {}
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            rec = event.recorder
            key = f"{event.phase.value} {rec.label}"
            cases[key] = cases.get(key, 0) + len(rec.cases)
            if event.phase.value == "stateful":
                chain = []
                for case_id, node in rec.cases.items():
                    resp = rec.interactions.get(case_id)
                    status = resp.response.status_code if resp is not None and resp.response is not None else 0
                    chain.append((node.value.method.upper(), node.value.path, status))
                stateful_chains.append(chain)
            for checks in rec.checks.values():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failures.append(
                            f"{rec.label} {check.name}: {check.failure_info.failure.title}\n"
                            f"{check.failure_info.failure.message}\n{check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError):
            errors.append(f"{event.label}: {event.info.format()}" if hasattr(event.info, "format") else repr(event))
        elif isinstance(event, events.FatalError):
            errors.append(repr(event.exception))
    print(cases)
    assert not errors, "\n\n".join(errors)
    assert not failures, f"{len(failures)} failed checks:\n\n" + "\n\n".join(dict.fromkeys(failures))
    assert any(k.startswith("stateful") for k in cases), cases

    def upsert_search_delete_search(chain: list[tuple[str, str, int]]) -> bool:
        steps = iter(chain)
        wanted = [
            ("POST", "/documents", 200),
            ("GET", "/search", None),
            ("DELETE", "/documents/{doc_id}", 200),
            ("GET", "/search", None),
        ]
        for method, path, status in wanted:
            if not any(m == method and p == path and (status is None or s == status) for m, p, s in steps):
                return False
        return True

    assert any(upsert_search_delete_search(c) for c in stateful_chains), stateful_chains[:5]
    assert any(m == "POST" and s == 422 for _, m, _p, s, _ in SEEN)  # invalid bodies were generated and refused
