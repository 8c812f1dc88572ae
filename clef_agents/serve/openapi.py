"""The OpenAPI 3.1 document of the System One server.

Question and answer schemas come from the ``langchain_core.decisions`` pydantic models, so the
document cannot drift from the types the server validates against.

Example:
    >>> doc = openapi_document()
    >>> sorted(doc["paths"])[:2]
    ['/healthz', '/openapi.json']
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

from langchain_core.decisions import Choice, ChoiceAnswer, Noul, NoulAnswer, Score, ScoreAnswer
from pydantic.json_schema import models_json_schema

import clef_agents
from clef_agents import wire

_REF = "#/components/schemas/{model}"


@lru_cache(maxsize=1)
def _model_schemas() -> dict[str, Any]:
    _, top = models_json_schema(
        [(m, "validation") for m in (Noul, Choice, Score, NoulAnswer, ChoiceAnswer, ScoreAnswer)],
        ref_template=_REF,
    )
    return dict(top.get("$defs", {}))


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


NON_NULL_JSON = {"type": ["string", "number", "boolean", "object", "array"]}
"""Any JSON value but null (a score level needs a description: the legend echoes it)."""
OPTION_NAME = {"type": "string", "minLength": 1, "pattern": wire.OPTION_NAME_PATTERN}
"""A choice option name: not empty, not only white space."""


def _question_schemas() -> dict[str, Any]:
    """The pydantic schemas of the question types, narrowed to what ``clef_agents.wire`` accepts."""
    schemas = copy.deepcopy(_model_schemas())
    noul, choice, score = schemas["Noul"], schemas["Choice"], schemas["Score"]
    for question in (noul, choice, score):
        question["required"] = sorted({"type", *question.get("required", [])})
    noul["required"] = ["type"]  # a noul without instructions is asked as it stands
    choice["properties"]["criteria"].update(
        minProperties=wire.MIN_CHOICE_OPTIONS, maxProperties=wire.MAX_CHOICE_OPTIONS, propertyNames=OPTION_NAME
    )
    score["properties"]["criteria"].update(
        minItems=wire.MIN_SCORE_LEVELS, maxItems=wire.MAX_SCORE_LEVELS, items=NON_NULL_JSON
    )
    return schemas


def _schemas(limits: wire.RequestLimits) -> dict[str, Any]:
    schemas = _question_schemas()
    schemas["SystemOneRequest"] = {
        "type": "object",
        "required": ["state", "questions"],
        "properties": {
            "model": {
                "type": ["string", "null"],
                "description": "Model name; the served name or an alias such as 'jev-latest' (null: the served model).",
            },
            "state": {
                "description": (
                    f"Text, a JSON object or a JSON array to decide about: at most {limits.max_state_chars} characters of text "
                    f"and {limits.max_depth} levels of nesting; no NaN/Infinity, no lone UTF-16 surrogates."
                ),
                "type": ["string", "object", "array"],
                "maxLength": limits.max_state_chars,
            },
            "questions": {
                "type": "object",
                "minProperties": 1,
                "maxProperties": limits.max_questions,
                "propertyNames": {"type": "string", "minLength": 1},
                "additionalProperties": {
                    "oneOf": [_ref("Noul"), _ref("Choice"), _ref("Score")],
                    "discriminator": {"propertyName": "type"},
                },
                "description": (
                    f"Question id → question, 1–{limits.max_questions} of them. A choice has {wire.MIN_CHOICE_OPTIONS}–"
                    f"{wire.MAX_CHOICE_OPTIONS} options, a score {wire.MIN_SCORE_LEVELS}–{wire.MAX_SCORE_LEVELS} levels; "
                    f"at most {limits.max_total_options} options over all questions (a noul counts 2) and "
                    f"{limits.max_question_chars} characters of question text."
                ),
            },
        },
        "additionalProperties": True,
    }
    schemas["SystemOneResponse"] = {
        "type": "object",
        "required": ["model", "answers", "usage"],
        "properties": {
            "model": {"type": "string"},
            "answers": {
                "type": "object",
                "additionalProperties": {"oneOf": [_ref("NoulAnswer"), _ref("ChoiceAnswer"), _ref("ScoreAnswer")]},
            },
            "usage": {
                "type": "object",
                "required": ["input_tokens", "output_tokens"],
                "properties": {
                    "input_tokens": {"type": "integer", "minimum": 0},
                    "output_tokens": {"type": "integer", "minimum": 0},
                },
            },
        },
        "patternProperties": {"^x_": {"description": "Extensions, e.g. x_truncation (how a long state was cut)."}},
    }
    schemas["ValidationError"] = {
        "type": "object",
        "required": ["detail"],
        "properties": {
            "detail": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["loc", "msg", "type"],
                    "properties": {
                        "loc": {"type": "array", "items": {"type": ["string", "integer"]}},
                        "msg": {"type": "string"},
                        "type": {"type": "string"},
                    },
                },
            }
        },
    }
    schemas["Error"] = {
        "type": "object",
        "required": ["detail"],
        "properties": {
            "detail": {
                "type": "object",
                "required": ["error_type", "message"],
                "properties": {"error_type": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    }
    schemas["ModelList"] = {
        "type": "object",
        "required": ["models"],
        "properties": {
            "models": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "description", "release_date"],
                    "properties": {
                        "name": {"type": "string"},
                        "description": {"type": "string"},
                        "release_date": {"type": "string"},
                    },
                },
            }
        },
    }
    return schemas


def _json(schema: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _error(description: str) -> dict[str, Any]:
    return _json("Error", description)


def _simple(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"type": "object"}}}}


def openapi_document(bearer: bool = False, limits: wire.RequestLimits = wire.DEFAULT_LIMITS) -> dict[str, Any]:
    """The OpenAPI 3.1 document; ``bearer=True`` marks ``/v1/*`` as needing a bearer key, and
    ``limits`` are the server's request limits (they bound the request schema).

    Example:
        >>> openapi_document()["openapi"]
        '3.1.0'
    """
    secured = {"security": [{"bearer": []}]} if bearer else {}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "clef_agents System One server",
            "version": clef_agents.__version__,
            "description": "Typed decisions (noul, choice, score) answered by a local decision model in one prefill pass.",
        },
        "paths": {
            "/v1/systemone": {
                "post": {
                    "operationId": "systemOne",
                    "summary": "Answer typed questions about a state",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("SystemOneRequest")}},
                    },
                    "responses": {
                        "200": _json("SystemOneResponse", "One answer per question id."),
                        "400": _error("The client disconnected before sending the whole body."),
                        "401": _error("Missing or wrong API key (authentication_error)."),
                        "404": _error("Unknown model name (not_found_error)."),
                        "408": _error(
                            "The body did not arrive in time, e.g. shorter than its Content-Length (request_timeout_error)."
                        ),
                        "413": _error("Body larger than the server's limit (request_too_large)."),
                        "415": _error("The body is not declared as JSON (unsupported_media_type_error)."),
                        "422": _json("ValidationError", "The request breaks a System One rule; detail[] names each."),
                        "503": _error("The model is loading or the queue is full; retry after Retry-After seconds."),
                        "504": _error("No answer within the request time limit (timeout_error)."),
                    },
                    **secured,
                }
            },
            "/v1/models": {
                "get": {
                    "operationId": "listModels",
                    "summary": "The served model and its aliases",
                    "responses": {"200": _json("ModelList", "Models."), "401": _error("Missing or wrong API key.")},
                    **secured,
                }
            },
            "/v1/stats": {
                "get": {
                    "operationId": "stats",
                    "summary": "Micro-batching counters",
                    "responses": {"200": _simple("Counters.")},
                    **secured,
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "health",
                    "summary": "Liveness",
                    "responses": {"200": _simple("The process is up.")},
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "ready",
                    "summary": "Readiness (the model is loaded)",
                    "responses": {"200": _simple("Ready."), "503": _error("Still loading, or loading failed.")},
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": {"200": _simple("OpenAPI 3.1.")},
                }
            },
        },
        "components": {"schemas": _schemas(limits)},
    }
    if bearer:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc
