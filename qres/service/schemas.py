"""The service's request and response bodies, their OpenAPI descriptions, and how a body
is read: a bad one is a 400 (:class:`ApiError`) whose one sentence says what is wrong."""

import re
from typing import Annotated, Literal
from urllib.parse import unquote_to_bytes

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request

from qres.corpus.readers import (
    KNOWN_EXTRAS,
    MAX_FIELD_CHARS,
    MAX_ID_BYTES,
    Question,
    extras_of,
    id_problem,
    split_tags,
)
from qres.corpus.stackexchange import body_text
from qres.ranking.search import MODES

ID_RULE = f"a question id is 1 to {MAX_ID_BYTES} bytes of UTF-8 without control characters"


def whole_number_text(value):
    """A query string's whole number as written ("5", not "5.0" or "1e1"), as POST's JSON
    takes it."""
    if isinstance(value, str) and not re.fullmatch(r"-?[0-9]+", value):
        raise ValueError("must be a whole number")
    return value  # "-1" goes on to the range check: a whole number, below 1


class ApiError(HTTPException):
    """A client's mistake: its status code and one sentence."""


# -- request and response bodies -------------------------------------------------------------


def _extras(value):
    """A question's extras checked as the corpus readers check them (an object's only; null
    is none)."""
    if value is None:
        return {}
    return extras_of(value) if isinstance(value, dict) else value


def _tags(value):
    """Tags as a JSONL corpus line may give them: a list, a comma-separated string or null,
    each tag stripped and the empty ones left out."""
    return list(split_tags(value)) if value is None or isinstance(value, str | list) else value


def _held(text: str) -> str:
    """A body within :data:`MAX_FIELD_CHARS` (counted once HTML is its text)."""
    if len(text) > MAX_FIELD_CHARS:
        raise ValueError(f"string should have at most {MAX_FIELD_CHARS} characters")
    return text


def _null_as_empty(value):
    """A null title or body is an empty one, as in a JSONL corpus line."""
    return "" if value is None else value


def _top_level_display_fields(schema: dict) -> None:
    """OpenAPI: the display fields a body may give beside title (they go into extras)."""
    for key in KNOWN_EXTRAS:
        schema["properties"][key] = {
            "type": ["integer", "string", "null"],
            "description": "A display field, as a JSONL corpus line gives it: stored in extras.",
        }


class QuestionIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_top_level_display_fields)
    title: Annotated[str, BeforeValidator(_null_as_empty)] = Field(max_length=MAX_FIELD_CHARS)
    body: Annotated[  # HTML as its text, as a corpus line's, then held to the limit
        str, BeforeValidator(_null_as_empty), AfterValidator(body_text), AfterValidator(_held)
    ] = Field(
        default="",
        description=f"At most {MAX_FIELD_CHARS:,} characters once a body stored as HTML is "
        "read as its text.",
    )
    tags: Annotated[list[str], BeforeValidator(_tags)] = Field(default_factory=list, max_length=100)
    extras: Annotated[dict[str, int | str], BeforeValidator(_extras)] = Field(
        default_factory=dict,
        description="What the forum shows beside the question, stored, never searched: "
        "answer_count, score (whole numbers), accepted_answer_id, closed_date, or others; "
        "duplicate_of (space-separated ids) marks a question closed as a duplicate of "
        "those, which search then shows in its place. The named ones may also be given "
        "beside title, as in a JSONL corpus line (that value wins).",
    )

    @model_validator(mode="before")
    @classmethod
    def _as_a_corpus_line(cls, data):
        """The top-level display fields of a JSONL corpus line (answer_count, ...) go into
        extras as the corpus reader puts them; any other unknown field is refused by name."""
        if not isinstance(data, dict):
            return data
        for key in data:
            if key not in cls.model_fields and key not in KNOWN_EXTRAS:
                raise PydanticCustomError(
                    "unknown_field",
                    "{field}: unknown field (display fields go in extras)",
                    {"field": str(key)[:80]},
                )
        top = {key: data[key] for key in KNOWN_EXTRAS if key in data}
        extras = {} if data.get("extras") is None else data["extras"]
        if not top or not isinstance(extras, dict):  # a bad extras: its own error
            return data
        rest = {key: value for key, value in data.items() if key not in top}
        return {**rest, "extras": {**extras, **top}}


def _addressable(qid: str) -> str:
    """An id every backend can address (the corpus readers' rule), or a ValueError."""
    if id_problem(qid):
        raise ValueError(ID_RULE)
    return qid


def _id_text(value):
    """An id as a JSONL corpus line's: an integer as its digits (not true or false), a
    string stripped."""
    if isinstance(value, str):
        return value.strip()
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class QuestionLine(QuestionIn):
    id: Annotated[str, BeforeValidator(_id_text), AfterValidator(_addressable)]


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(max_length=MAX_FIELD_CHARS, description="The question's title.")
    body: Annotated[str, BeforeValidator(_null_as_empty)] = Field(  # null: none, as in a write
        default="", max_length=MAX_FIELD_CHARS, description="Its text, if any."
    )
    k: int = Field(default=10, ge=1, strict=True)  # not true, not 3.0
    mode: Literal[MODES] | None = None
    explain: bool = Field(default=False, strict=True)


class ErrorOut(BaseModel):
    error: str = Field(description="One sentence saying what is wrong.")


class HitOut(BaseModel):
    rank: int
    id: str
    title: str
    score: float = Field(
        description="The ranking score (fused in hybrid mode; for an original that several of "
        "its closed duplicates matched, raised by their votes)."
    )
    tags: list[str]
    snippet: str = Field(description="The question's body, its first words.")
    answer_count: int | None = Field(
        description="How many answers the question has, where the index holds it (null: not known)."
    )
    extras: dict[str, int | str] = Field(
        description="What the forum shows beside the question, as indexed (a StackExchange "
        "dump's score, answer_count, accepted_answer_id, closed_date); empty if none."
    )
    url: str | None = Field(
        default=None, description="The question's page (with `qres serve --question-url`)."
    )
    via: str | None = Field(
        default=None,
        description="The id of the question found, where the forum closed it as a duplicate "
        "of this one: this original is shown in its place (the best of its duplicates found).",
    )
    bm25: float | None = Field(default=None, description="With explain: the BM25 score.")
    cosine: float | None = Field(
        default=None,
        description="With explain: the cosine (with several models, weighed as the fusion "
        "weighs them: what dense mode ranks by).",
    )
    cosines: dict[str, float | None] | None = Field(
        default=None, description="With explain: each model's cosine, by model name."
    )


class SearchOut(BaseModel):
    query: str
    searched: str = Field(
        description="The text searched: the query, its last word completed where typing=true."
    )
    mode: Literal[MODES]
    k: int
    latency_ms: float
    results: list[HitOut]


class QuestionOut(BaseModel):
    id: str
    title: str
    body: str
    tags: list[str]
    extras: dict[str, int | str] = Field(description="Stored display fields; empty if none.")


class WrittenOut(BaseModel):
    id: str
    committed: bool


class BatchOut(BaseModel):
    upserted: int
    committed: bool


class DeletedOut(BaseModel):
    id: str
    deleted: bool
    committed: bool


class HealthOut(BaseModel):
    status: Literal["ok"]


class ModelOut(BaseModel):
    name: str
    fingerprint: str


class ReadyOut(BaseModel):
    status: Literal["ready"]
    backend: str
    questions: int
    models: list[ModelOut] = Field(description="Every model of the index, in fusion order.")
    model_set: str | None = Field(description="The model set the models make, if any.")
    default_mode: Literal[MODES]
    writes: bool = Field(description="Whether this server takes writes.")


def error_responses(*codes: int) -> dict:
    """OpenAPI ``responses`` for the errors a route can answer, all ``{"error": ...}``."""
    said = {
        400: "A bad request (one sentence says what).",
        401: "A missing or wrong API key.",
        403: "Writes are off: the server was started without QRES_API_KEY.",
        404: "No question with that id.",
        413: "The body or batch is too large.",
        500: "An unexpected failure (details in the server's log).",
        503: "The index cannot be reached, or this server takes no writes.",
    }
    return {code: {"model": ErrorOut, "description": said[code]} for code in (*codes, 500)}


def answers(model: type[BaseModel], *errors: int) -> dict:
    """OpenAPI ``responses``: ``model`` for 200, ``{"error": ...}`` for each error code."""
    return {200: {"model": model}, **error_responses(*errors)}


def json_lines_body() -> dict:
    """OpenAPI for POST /questions: JSON lines, each a question with its id."""
    line = QuestionLine.model_json_schema()
    return {
        "requestBody": {
            "required": True,
            "description": "One JSON object a line, each as the schema says (JSON lines).",
            "content": {
                "application/x-ndjson": {"schema": {"type": "string"}, "example": EXAMPLE_LINES},
                "application/json": {"schema": line},
            },
        }
    }


EXAMPLE_LINES = (
    '{"id": "q43", "title": "Wifi drops every hour", "tags": ["wifi"]}\n'
    '{"id": "q44", "title": "No sound over HDMI"}\n'
)


def json_body(model: type[BaseModel]) -> dict:
    """OpenAPI for a JSON body the endpoint parses itself (whatever its Content-Type)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def one_sentence(errors: list[dict], what: str = "the request body") -> str:
    """The first validation problem as one sentence, e.g. "k: input should be ... 100."."""
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    kind, message = first.get("type"), first.get("msg", "invalid value")
    message = message.removeprefix("Value error, ")  # pydantic's wording of a validator's own
    if kind == "unknown_field":  # its message names the field
        return f"{message}."
    if kind == "json_invalid":
        return f"{what} is not valid JSON."
    if kind in ("model_type", "model_attributes_type", "dict_type") and not where:
        return f"{what} must be a JSON object."
    if kind == "missing":
        return f"{where or what} is required."
    return f"{where or what}: {message[0].lower() + message[1:]}."


def parse_body(model: type[BaseModel], raw: bytes | str, what: str = "the request body"):
    """``raw`` JSON as ``model``, or a 400 saying what is wrong with it."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as err:
        raise ApiError(400, one_sentence(err.errors(), what)) from None


def check_id(qid: str) -> str:
    """A path's question id, stripped as a corpus line's is, or a 400 giving the id rule."""
    qid = qid.strip()
    if id_problem(qid):
        raise ApiError(400, f"{ID_RULE}.")
    return qid


class QuestionIdPath(Convertor):
    """A path's question id, newlines and all: Starlette's ``path`` (``.*``) stops at one, so
    ``/questions/a%0Ab`` matched no route (404, naming ``ab``) and ``/questions/ab%0A`` wrote
    ``ab``; here such an id meets :func:`check_id`'s rule."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("question_id", QuestionIdPath())


def check_path_utf8(request: Request) -> None:
    """Refuse a path whose %-escapes are not UTF-8: the decoded path has U+FFFD in their
    place, so ``/questions/%ff`` and ``/questions/%fe`` would write one question."""
    try:
        unquote_to_bytes(request.scope.get("raw_path") or b"").decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "the question id is not valid UTF-8 once %-decoded.") from None


def read_lines(raw: bytes, max_questions: int) -> list[Question]:
    """The questions of a JSON-lines body; the first bad line is a 400 naming it."""
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark, as the corpus reader takes
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not UTF-8 text.") from None
    questions: dict[str, Question] = {}  # a repeated id keeps its last version
    # Lines end at \n only: JSON strings may hold U+2028 and the other breaks splitlines() knows.
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            item = parse_body(QuestionLine, line, "the line")
        except ApiError as err:
            raise ApiError(400, f"line {n}: {err.detail}") from None
        if not (item.title.strip() or item.body.strip()):
            raise ApiError(400, f"line {n}: question {item.id!r} has an empty title and body.")
        questions[item.id] = Question(item.id, item.title, item.body, tuple(item.tags), item.extras)
        if len(questions) > max_questions:
            raise ApiError(413, f"more than {max_questions} questions in one request.")
    if not questions:
        raise ApiError(400, "the body holds no questions: send one JSON object per line.")
    return list(questions.values())
