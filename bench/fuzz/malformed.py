"""Malformed and hostile requests for the fuzz bench: what a broken or malicious client sends.

Each generator returns a ``Probe``: the bytes to send, the headers, the statuses that are a correct
answer, and a category name for the report. ``probes(n, seed)`` mixes them with valid requests (which
must get 200), reproducibly.

Example:
    >>> [p.category for p in probes(3, seed=1)][:1]  # doctest: +SKIP
    ['surrogate']
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

JSON = {"content-type": "application/json"}
SURROGATES = ("\\ud800", "\\udbff", "\\udc00", "\\udfff")
NUMBERS = ("NaN", "Infinity", "-Infinity")


@dataclass
class Probe:
    """One request to send and what a correct server may answer."""

    category: str
    body: bytes
    allowed: tuple[int, ...]
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))
    method: str = "POST"
    path: str = "/v1/systemone"


def _valid(rng: random.Random) -> dict:
    kind = rng.choice(["noul", "choice", "score"])
    question: dict = {"type": kind, "instructions": rng.choice(["Is it urgent?", "Which team?", "How angry?", ""])}
    if kind == "choice":
        question["criteria"] = {f"opt{i}": rng.choice([None, f"option {i}"]) for i in range(rng.randint(2, 12))}
    elif kind == "score":
        question["criteria"] = [f"level {i}" for i in range(rng.randint(2, 10))]
    state = rng.choice(["my card was charged twice", {"ticket": "site down", "tags": ["prod", 1, 2.5, True, None]}, ["a", "b"]])
    return {"state": state, "questions": {f"q{rng.randint(0, 99)}": question}}


def _dump(body: object) -> bytes:
    return json.dumps(body, ensure_ascii=True).encode()


def valid(rng: random.Random) -> Probe:
    return Probe("valid", _dump(_valid(rng)), (200,))


def surrogate(rng: random.Random) -> Probe:
    lone = rng.choice(SURROGATES)
    body = json.dumps(_valid(rng))
    qid = next(iter(json.loads(body)["questions"]))
    where = rng.choice(["state", "instructions", "qid", "model", "extra"])
    if where == "state":
        body = body.replace('"state": ', f'"state": "x{lone}", "was_state": ', 1)
    elif where == "instructions":
        body = body.replace('"instructions": "', f'"instructions": "{lone}', 1)
    elif where == "qid":
        body = body.replace(f'"{qid}"', f'"{qid}{lone}"', 1)
    elif where == "model":
        body = body[:-1] + f', "model": "{lone}"}}'
    else:
        body = body[:-1] + f', "x_note": ["{lone}"]}}'
    return Probe("surrogate", body.encode(), (422,))


def non_finite(rng: random.Random) -> Probe:
    token = rng.choice(NUMBERS)
    body = json.dumps(_valid(rng))
    if rng.random() < 0.5:
        body = body.replace('"state": ', f'"state": {{"v": {token}}}, "was_state": ', 1)
    else:
        body = body[:-1] + f', "x_score": [{token}]}}'
    return Probe("nan-infinity", body.encode(), (422,))


def deep(rng: random.Random) -> Probe:
    depth = rng.choice([65, 100, 600, 800, 989, 990, 2000, 20000])
    nested = "[" * depth + "]" * depth
    where = rng.choice(["state", "instructions", "extra"])
    template = {
        "state": '{"state": %s, "questions": {"q": {"type": "noul"}}}',
        "instructions": '{"state": "x", "questions": {"q": {"type": "noul", "instructions": %s}}}',
        "extra": '{"state": "x", "x_deep": %s, "questions": {"q": {"type": "noul"}}}',
    }[where]
    return Probe("deep-nesting", (template % nested).encode(), (422, 413))


def too_much_work(rng: random.Random) -> Probe:
    kind = rng.choice(["questions", "options", "state"])
    if kind == "questions":
        n = rng.choice([65, 1000, 10000])
        body = {"state": "x", "questions": {str(i): {"type": "noul"} for i in range(n)}}
    elif kind == "options":
        body = {"state": "x", "questions": {f"c{j}": {"type": "choice", "instructions": "?", "criteria": {f"o{i}": None for i in range(255)}} for j in range(5)}}
    else:
        body = {"state": "x" * (256 * 1024 + 1), "questions": {"q": {"type": "noul"}}}
    return Probe("over-limits", json.dumps(body, separators=(",", ":")).encode(), (422, 413))


def broken_json(rng: random.Random) -> Probe:
    text = _dump(_valid(rng))
    choice = rng.randrange(6)
    if choice == 0:
        body = text[: rng.randrange(len(text))]
    elif choice == 1:
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    elif choice == 2:
        body = b"\xff\xfe" + text
    elif choice == 3:
        body = text.replace(b'"state"', b"'state'", 1)
    elif choice == 4:
        body = b""
    else:
        body = rng.choice([b"[]", b"null", b"1e999", b'"text"', b"{}", b"true"])
    return Probe("broken-json", body, (422,))


def wrong_shape(rng: random.Random) -> Probe:
    body = _valid(rng)
    qid, question = next(iter(body["questions"].items()))
    mutation = rng.randrange(9)
    if mutation == 0:
        body["questions"] = {"": question}
    elif mutation == 1:
        body["questions"][qid] = {"type": "score", "instructions": "?", "criteria": [None, "b"]}
    elif mutation == 2:
        body["questions"][qid] = {"type": "choice", "instructions": "?", "criteria": {"only": None}}
    elif mutation == 3:
        body["questions"][qid] = {"type": "choice", "instructions": "?", "criteria": {" ": None, "\u3000": None}}
    elif mutation == 4:
        body["questions"][qid] = {"type": rng.choice(["box", "bool", None, 7])}
    elif mutation == 5:
        body["state"] = rng.choice([None, 1, True, 2.5])
    elif mutation == 6:
        del body["questions"]
    elif mutation == 7:
        body["questions"][qid]["unknown"] = 1
    else:
        body["model"] = rng.choice([7, ["m"], {"m": 1}])
    return Probe("wrong-shape", _dump(body), (422,))


def wrong_request(rng: random.Random) -> Probe:
    choice = rng.randrange(5)
    good = _dump(_valid(rng))
    if choice == 0:
        return Probe("wrong-request", good, (415,), {"content-type": rng.choice(["text/plain", "application/x-www-form-urlencoded", "application/xml"])})
    if choice == 1:
        return Probe("wrong-request", _dump({**_valid(rng), "model": "no-such-model"}), (404,))
    if choice == 2:
        return Probe("wrong-request", b"", (405,), {}, method=rng.choice(["GET", "PUT", "DELETE"]))
    if choice == 3:
        return Probe("wrong-request", b"", (404,), {}, method="GET", path=rng.choice(["/v1/nothing", "/v2/systemone", "/%2e%2e/etc/passwd"]))
    return Probe("wrong-request", b'{"state": "' + b"x" * (600 * 1024) + b'"}', (413,))


GENERATORS: tuple[Callable[[random.Random], Probe], ...] = (
    valid, surrogate, non_finite, deep, too_much_work, broken_json, wrong_shape, wrong_request,
)


def probes(n: int, seed: int) -> list[Probe]:
    """``n`` probes, one generator after another in a seeded random order (every kind appears)."""
    rng = random.Random(seed)
    return [GENERATORS[i % len(GENERATORS)](rng) for i in rng.sample(range(n), n)]
