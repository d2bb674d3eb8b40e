"""The service's OpenAPI document is true: every route's real answers, errors included,
validate against the schema it declares; writes are refused without the API key."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from tests.serving import build_demo_index

KEY = "the-key"


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory):
    return build_demo_index(tmp_path_factory.mktemp("openapi") / "index")


def make_app(index, monkeypatch, key: str | None = KEY, **settings):
    from qres.service import app as service

    if key is None:
        monkeypatch.delenv(service.API_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(service.API_KEY_ENV, key)
    return service.create_app(service.ServiceConfig(index_dir=str(index), **settings))


def call_all(app, requests: list[tuple]) -> list[httpx.Response]:
    """Each (method, path, keyword arguments) request, in order, through the ASGI app."""

    async def calls():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://qres") as http:
            return [await http.request(m, p, **kw) for m, p, kw in requests]

    try:
        return asyncio.run(calls())
    finally:
        app.state.service.close()


AUTH = {"headers": {"X-API-Key": KEY}}
COUNTED = {"answer_count": 2, "closed_date": "2013-05-01"}  # display fields, stored
LINES = b'{"id": "b1", "title": "axolotl wifi", "tags": ["wifi"]}\n{"id": "b2", "title": "t"}\n'
# (method, path, request, expected status): every route, and every error each can give
REQUESTS = [
    ("GET", "/search", {"params": {"q": "boot ubuntu from usb"}}, 200),
    ("GET", "/search", {"params": {"q": "boot from usb", "explain": "true", "k": 3}}, 200),
    ("GET", "/search", {"params": {"q": "usb", "mode": "bm25", "explain": "true"}}, 200),
    ("GET", "/search", {"params": {"q": "usb", "k": 0}}, 400),
    ("GET", "/search", {"params": {"q": "usb", "mode": "fuzzy"}}, 400),
    ("GET", "/search", {}, 400),
    ("POST", "/search", {"json": {"title": "usb boot", "body": "installer", "explain": True}}, 200),
    ("POST", "/search", {"json": {"body": "no title"}}, 400),
    ("POST", "/search", {"content": b"x" * 5000}, 413),
    ("GET", "/questions/d128", {}, 200),
    ("GET", "/questions/nope", {}, 404),
    ("GET", "/questions/%ff", {}, 400),
    ("PUT", "/questions/n1", {"json": {"title": "gecko firmware"}, **AUTH}, 200),
    ("PUT", "/questions/n1", {"json": {"title": "gecko firmware"}}, 401),
    ("PUT", "/questions/n1", {"json": {"title": 3}, **AUTH}, 400),
    ("PUT", "/questions/n2", {"json": {"title": "okapi", "extras": COUNTED}, **AUTH}, 200),
    ("GET", "/questions/n2", {}, 200),
    ("GET", "/search", {"params": {"q": "okapi"}}, 200),  # an answer_count, an extra
    ("PUT", "/questions/n1", {"json": {"title": "t", "extras": {"score": "high"}}, **AUTH}, 400),
    ("DELETE", "/questions/n2", AUTH, 200),
    ("POST", "/questions", {"content": LINES, **AUTH}, 200),
    ("POST", "/questions", {"content": b"{oops\n", **AUTH}, 400),
    ("POST", "/questions", {"content": LINES, "headers": {"X-API-Key": "wrong"}}, 401),
    ("DELETE", "/questions/n1", AUTH, 200),
    ("DELETE", "/questions/n1", AUTH, 404),
    ("GET", "/healthz", {}, 200),
    ("GET", "/readyz", {}, 200),
    ("GET", "/metrics", {}, 200),
]


def response_schema(spec: dict, method: str, path: str, status: int) -> tuple[dict, str]:
    """The schema and media type the spec gives for this answer (a path template matches)."""
    for template, item in spec["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in item:
            declared = item[method.lower()]["responses"]
            assert str(status) in declared, f"{method} {path}: {status} is not in the spec"
            ((media, content),) = declared[str(status)]["content"].items()
            return content["schema"], media
    raise AssertionError(f"{method} {path} is not in the spec")


def test_every_answer_and_error_validates_against_the_spec(demo_index, monkeypatch):
    app = make_app(demo_index, monkeypatch, max_body_bytes=4096)
    spec = app.openapi()
    validate(spec)  # a valid OpenAPI document
    answers = call_all(app, [(m, p, kw) for m, p, kw, _ in REQUESTS])
    for (method, path, _, status), answer in zip(REQUESTS, answers, strict=True):
        assert answer.status_code == status, (method, path, answer.text)
        schema, media = response_schema(spec, method, path, status)
        assert answer.headers["content-type"].startswith(media), (method, path)
        if media == "application/json":
            document = {**schema, "components": spec["components"]}
            errors = [e.message for e in Draft202012Validator(document).iter_errors(answer.json())]
            assert not errors, (method, path, status, errors)
    okapi = REQUESTS.index(("GET", "/search", {"params": {"q": "okapi"}}, 200))
    top = answers[okapi].json()["results"][0]  # the schema was checked on a count, not only null
    assert (top["id"], top["answer_count"], top["extras"]) == ("n2", 2, COUNTED)


def test_the_spec_declares_what_the_service_does(demo_index, monkeypatch):
    spec = make_app(demo_index, monkeypatch).openapi()
    text = str(spec)
    assert "422" not in spec["paths"]["/search"]["get"]["responses"]
    assert "HTTPValidationError" not in text
    for item in spec["paths"].values():
        for operation in item.values():
            assert "200" in operation["responses"]
            for status, declared in operation["responses"].items():
                if status.startswith(("4", "5")):
                    ref = declared["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/ErrorOut"
    batch = spec["paths"]["/questions"]["post"]["requestBody"]["content"]
    assert batch["application/json"]["schema"]["required"] == ["title", "id"]


def test_writes_are_refused_without_a_key_unless_open_writes(demo_index, monkeypatch):
    put = ("PUT", "/questions/x1", {"json": {"title": "okapi"}})
    delete = ("DELETE", "/questions/d128", {})
    batch = ("POST", "/questions", {"content": LINES})
    ready = ("GET", "/readyz", {})
    refused = call_all(make_app(demo_index, monkeypatch, key=None), [put, delete, batch, ready])
    assert [a.status_code for a in refused[:3]] == [403, 403, 403]
    assert "QRES_API_KEY" in refused[0].json()["error"]
    assert refused[3].json()["writes"] is False
    app = make_app(demo_index, monkeypatch, key=None, open_writes=True)
    opened = call_all(app, [put, ready])
    assert opened[0].status_code == 200 and opened[1].json()["writes"] is True


def test_a_wrong_key_is_refused(demo_index, monkeypatch):
    wrong = {"json": {"title": "okapi"}, "headers": {"X-API-Key": KEY + "x"}}
    bearer = {"json": {"title": "okapi"}, "headers": {"Authorization": "Bearer nope"}}
    answers = call_all(
        make_app(demo_index, monkeypatch),
        [("PUT", "/questions/x2", wrong), ("PUT", "/questions/x2", bearer)],
    )
    assert [a.status_code for a in answers] == [401, 401]


def test_results_carry_what_a_forum_shows_and_explain_names_each_model(demo_index, monkeypatch):
    app = make_app(demo_index, monkeypatch, question_url="https://forum.example.org/q/{id}")
    plain, explained, ready, page = call_all(
        app,
        [
            ("GET", "/search", {"params": {"q": "boot ubuntu from usb", "k": 1}}),
            ("GET", "/search", {"params": {"q": "boot ubuntu from usb", "explain": "true"}}),
            ("GET", "/readyz", {}),
            ("GET", "/", {}),
        ],
    )
    top = plain.json()["results"][0]
    assert top["id"] == "d128" and top["url"] == "https://forum.example.org/q/d128"
    assert top["title"] == "How do I boot Ubuntu from a USB stick?"
    assert top["tags"] and 0 < len(top["snippet"]) <= 201
    hit = explained.json()["results"][0]
    assert hit["cosines"] == {"gru": hit["cosine"]}  # the shipped GRU, named by what it is
    (model,) = ready.json()["models"]
    assert model["name"] == "gru" and len(model["fingerprint"]) == 64
    assert ready.json()["model_set"] is None
    assert 'data-qres-link="https://forum.example.org/q/{id}"' in page.text


def test_metrics_name_the_docs_routes_and_docs_load_nothing_from_elsewhere(demo_index, monkeypatch):
    app = make_app(demo_index, monkeypatch)
    docs, spec, js, css, metrics = call_all(
        app,
        [
            ("GET", "/docs", {}),
            ("GET", "/openapi.json", {}),
            ("GET", "/docs/swagger-ui-bundle.js", {}),
            ("GET", "/docs/swagger-ui.css", {}),
            ("GET", "/metrics", {}),
        ],
    )
    assert docs.status_code == spec.status_code == js.status_code == css.status_code == 200
    assert not re.findall(r"""(?:src|href)=["']?(?:https?:)?//""", docs.text), docs.text
    assert js.headers["content-type"].startswith("text/javascript") and len(js.content) > 100_000
    assert 'route="/docs"' in metrics.text and 'route="/openapi.json"' in metrics.text
    assert 'route="unmatched"' not in metrics.text
