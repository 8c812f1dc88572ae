"""The request–tool match part of taught yes/no questions: reading tool listings, the features,
how teaching adds the part where it helps, its storage, and the frozen-text cache it reads through."""

from __future__ import annotations

import json
import math
import random

import pytest
from test_teach import teach_twice_by_cli
from test_training import tiny_records
from tiny_models import make_model

torch = pytest.importorskip("torch")

TOPICS = {
    "refund": "refund money charged twice",
    "login": "login password reset account",
    "delivery": "order delivery late",
    "prize": "win prize free click",
    "billing": "billing payment failed",
    "crash": "bug crash production down",
}


def tool_line(name: str) -> str:
    return json.dumps({"name": name, "description": TOPICS[name], "parameters": {"type": "object"}})


def tool_records(n: int, seed: int) -> list[dict]:
    """States that list two or three tools and end with a request on one topic; a tool should be
    called exactly when one listed tool is about the request's topic. Every state holds the same
    kinds of words, so only how the request pairs with the listed tools tells the answer."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        listed = rng.sample(sorted(TOPICS), rng.choice([2, 3]))
        relevant = rng.random() < 0.5
        topic = rng.choice(listed) if relevant else rng.choice([t for t in TOPICS if t not in listed])
        request = "please help " + " ".join(rng.sample(TOPICS[topic].split(), 3))
        state = "Available tools:\n" + "\n".join(tool_line(t) for t in listed) + "\n\nConversation:\nuser: " + request
        records.append(
            {
                "state": state,
                "questions": {"call": {"type": "noul", "instructions": "should a listed tool be called"}},
                "labels": {"call": relevant},
                "meta": {"dataset": "tools", "split": "train", "source": "test"},
            }
        )
    return records


def test_a_listing_is_read_as_tools_and_the_request_after_them():
    from clef_agents.model.tool_match import lists_tools, split_tool_listing

    state = (
        "Available tools:\n"
        '{"description": "no name, not a tool"}\n'
        '{"name": "refund", "description": "Send money back."}\n'
        '{"name": "lookup"}\n'
        "{not json}\n"
        "\n"
        "Conversation:\n"
        "user: I was charged twice\n"
        "assistant: let me check"
    )
    tools, request = split_tool_listing(state)
    assert tools == ["refund: Send money back.", "lookup"]
    assert request == "{not json}\nConversation:\nuser: I was charged twice\nassistant: let me check"
    assert split_tool_listing('{"name": "a"}\nConversation:\nuser: hi') == (
        ["a"],
        "user: hi",
    )  # a header line is dropped
    assert split_tool_listing('{"name": "a"}\nuser: hi') == (["a"], "user: hi")
    assert split_tool_listing("just a question: what now") == ([], "just a question: what now")
    assert not lists_tools('["name", "a"]\n{"name": 3}') and lists_tools('  {"name": "a"}  ')


def test_the_features_are_the_best_and_mean_cosine_and_the_tool_count():
    from clef_agents.model.tool_match import match_features

    vectors = {"a: x": [1.0, 0.0], "b: y": [0.0, 2.0], "ask a": [3.0, 0.0], "ask b": [1.0, 1.0]}
    calls = []

    def embed(texts, cache):
        calls.append((list(texts), cache))
        return torch.tensor([vectors[t] for t in texts])

    texts = [
        '{"name": "a", "description": "x"}\n{"name": "b", "description": "y"}\nask a',
        "no tools at all",
        '{"name": "b", "description": "y"}\nask b',
    ]
    features = match_features(texts, embed)
    half = 2**-0.5
    expected = [[1.0, 0.5, math.log1p(2)], [0.0, 0.0, 0.0], [half, half, math.log1p(1)]]
    torch.testing.assert_close(features, torch.tensor(expected))
    assert calls == [(["a: x", "b: y"], True), (["ask a", "ask b"], False)]  # tools once each and cached; requests not
    assert match_features(["nothing listed"], embed).tolist() == [[0.0, 0.0, 0.0]]
    assert len(calls) == 2  # no tool listed: the encoder is not asked


def test_the_part_adds_standardised_features_to_its_option_and_checks_its_shape():
    from clef_agents.model.tool_match import ToolMatch

    part = ToolMatch("yes", weight=(2.0, -1.0, 0.5), bias=0.25, mean=(0.5, 0.25, 1.0), scale=(0.25, 0.25, 2.0))
    raw = torch.tensor([[1.0, 0.5, 3.0], [0.5, 0.25, 1.0]])
    assert part.logit(raw).tolist() == pytest.approx([2.0 * 2 - 1.0 * 1 + 0.5 * 1 + 0.25, 0.25])
    torch.testing.assert_close(part.logits(raw, option=0, n=2), torch.tensor([[3.75, 0.0], [0.25, 0.0]]))
    with pytest.raises(ValueError, match="need 3 values each"):
        ToolMatch("yes", weight=(1.0,), bias=0.0, mean=(0.0,) * 3, scale=(1.0,) * 3)
    with pytest.raises(ValueError, match="scales must be positive"):
        ToolMatch("yes", weight=(1.0,) * 3, bias=0.0, mean=(0.0,) * 3, scale=(1.0, 0.0, 1.0))


@pytest.fixture(scope="module")
def tool_taught(encoder_dir):
    from clef_agents.train.teach import teach

    model = make_model(encoder_dir)
    reports = teach(
        model, tool_records(300, 21), tool_records(160, 22), lexical=False, neighbours=False, progress=False
    )
    return model, reports


def test_teaching_adds_the_tool_match_where_the_request_pairs_with_a_listed_tool(tool_taught):
    from dataclasses import replace

    from clef_agents.train.teach import TOOL_MATCH_MIN_GAIN

    model, reports = tool_taught
    report = reports["should a listed tool be called"]
    part = report["tool_match"]
    assert part["kept"] is True and part["option"] == "yes" and part["held_out_listing_tools"] == 1.0
    by_kind = part["held_out_by_kind"]
    assert set(by_kind) == {"coverage", "cosine"} and by_kind[part["kind"]]["nll"] == min(
        k["nll"] for k in by_kind.values()
    )
    assert part["held_out_with_tool_match"]["nll"] <= part["held_out_without_tool_match"]["nll"] * (
        1 - TOOL_MATCH_MIN_GAIN
    )
    assert report["held_out_taught"] == part["held_out_with_tool_match"]
    ((key, entry),) = model.engine.taught.questions.items()
    assert entry.tool_match is not None and list(entry.tool_match.weight) == part["weight"]
    records = tool_records(200, 25)
    requests = [{"state": r["state"], "questions": r["questions"]} for r in records]

    def correct() -> int:
        return sum(
            (a.answers["call"].noul >= 0.5) == r["labels"]["call"] for a, r in zip(model.batch(requests), records)
        )

    with_part = correct()
    model.engine.taught.questions[key] = replace(entry, tool_match=None)
    try:
        without_part = correct()
    finally:
        model.engine.taught.questions[key] = entry
    assert (
        with_part >= without_part + 20
    )  # on fresh records: 10 points or more (measured 147 vs 107 of 200 on another seed)


def test_tool_match_answers_survive_save_and_load(tool_taught, tmp_path):
    from clef_agents.model import ClefDecisionModel

    model, _ = tool_taught
    folder = model.save_pretrained(tmp_path / "tools")
    (entry,) = json.loads((folder / "taught.json").read_text()).values()
    assert set(entry["tool_match"]) == {"option", "weight", "bias", "mean", "scale", "kind"}
    reloaded = ClefDecisionModel.from_pretrained(folder)
    records = tool_records(40, 23)
    requests = [{"state": r["state"], "questions": r["questions"]} for r in records]
    before, after = model.batch(requests), reloaded.batch(requests)
    for a, b in zip(before, after):
        assert b.extensions["x_taught"] == ["call"]
        assert a.answers["call"].noul == pytest.approx(
            b.answers["call"].noul, abs=1e-5
        )  # tool vectors embedded in other batches


def test_both_kinds_of_part_survive_save_and_load_and_old_parts_load_as_cosine(tool_taught, tmp_path):
    from dataclasses import replace

    from safetensors.torch import load_file

    from clef_agents.model.taught import TaughtQuestions
    from clef_agents.model.tool_match import ToolMatch

    model, _ = tool_taught
    ((key, entry),) = model.engine.taught.questions.items()
    idf = torch.tensor([0.5, 1.5, 2.0])
    coverage = ToolMatch("yes", (1.0, -0.5, 0.25, 2.0), 0.1, (0.5,) * 4, (0.2,) * 4, kind="coverage", idf=idf)
    cosine = ToolMatch("yes", (1.0, 0.0, -0.5), 0.2, (0.5, 0.4, 1.0), (0.1, 0.1, 0.5))
    for part in (coverage, cosine):
        folder = tmp_path / part.kind
        folder.mkdir()
        TaughtQuestions({key: replace(entry, tool_match=part)}).save(folder)
        loaded = TaughtQuestions.load(folder).questions[key].tool_match
        assert loaded == part and (loaded.idf is None) == (part.kind == "cosine")
        assert (f"{key}.tool_idf" in load_file(str(folder / "taught.safetensors"))) == (part.kind == "coverage")
    if loaded.idf is None:
        torch.testing.assert_close(TaughtQuestions.load(tmp_path / "coverage").questions[key].tool_match.idf, idf)
    index = json.loads((tmp_path / "cosine" / "taught.json").read_text())
    del index[key]["tool_match"]["kind"]  # as saved before the coverage kind existed
    (tmp_path / "cosine" / "taught.json").write_text(json.dumps(index))
    assert TaughtQuestions.load(tmp_path / "cosine").questions[key].tool_match.kind == "cosine"


def test_the_coverage_kind_checks_its_kind_and_needs_its_idf():
    from clef_agents.model.tool_match import ToolMatch

    with pytest.raises(ValueError, match="unknown kind 'jaccard'; allowed: cosine, coverage"):
        ToolMatch("yes", (1.0,) * 3, 0.0, (0.0,) * 3, (1.0,) * 3, kind="jaccard")
    with pytest.raises(ValueError, match="need 4 values each"):
        ToolMatch("yes", (1.0,) * 3, 0.0, (0.0,) * 3, (1.0,) * 3, kind="coverage", idf=torch.ones(3))
    with pytest.raises(ValueError, match="needs its token IDF weights"):
        ToolMatch("yes", (1.0,) * 4, 0.0, (0.0,) * 4, (1.0,) * 4, kind="coverage")


def test_coverage_features_weigh_request_tokens_by_idf_and_read_each_tool():
    from clef_agents.model.tool_match import (
        coverage_features,
        fit_token_idf,
        token_weights,
    )

    # token ids: 0 "the", 1 "circle", 2 "triangle", 3 "area"; one-hot vectors, so a token matches only itself
    vocabulary = {"the": 0, "circle": 1, "triangle": 2, "area": 3}
    calls = []

    def embed_tokens(texts, cache):
        calls.append(cache)
        out = []
        for text in texts:
            ids = torch.tensor([vocabulary[w] for w in text.replace(":", "").split() if w in vocabulary])
            out.append((ids, torch.eye(4)[ids]))
        return out

    states = [
        '{"name": "triangle", "description": "the area"}\nthe circle area',
        '{"name": "circle", "description": "the area"}\nthe circle area',
        "the circle area",
    ]
    idf = fit_token_idf(
        states, lambda texts: [[vocabulary[w] for w in t.replace(":", "").split() if w in vocabulary] for t in texts]
    )
    assert idf[0] < idf[1] and idf[0] < idf[2]  # "the" is in every document
    weights = token_weights(torch.tensor([0, 1, 3]), idf)
    assert weights.sum().item() == pytest.approx(1.0) and weights[0] < weights[1]
    features = coverage_features(states, embed_tokens, idf)
    assert features[2].tolist() == [0.0] * 4  # no tool listed
    assert features[1, 0].item() == pytest.approx(1.0) and features[1, 1].item() == pytest.approx(1.0)
    assert features[0, 0].item() == pytest.approx(
        1.0 - weights[1].item()
    )  # "circle" is not covered by the triangle tool
    assert calls == [True, False]  # tools cached, requests not


def test_the_token_cache_keeps_the_most_recent_tool_texts(encoder_dir, monkeypatch):
    import clef_agents.model.encoder as encoder_module

    engine = make_model(encoder_dir).engine
    engine.clear_caches()
    monkeypatch.setattr(encoder_module, "TOKEN_CACHE_SIZE", 2)
    first = engine.embed_tokens_frozen(["card lost", "refund money"])
    engine.embed_tokens_frozen(["card lost", "spam prize"])
    assert engine.encoder.cached_token_texts() == ["card lost", "spam prize"]
    ((ids, vectors),) = engine.embed_tokens_frozen(["refund money"], cache=False)
    torch.testing.assert_close(ids, first[1][0])
    torch.testing.assert_close(vectors, first[1][1], atol=2e-3, rtol=0)  # the cache keeps half precision
    assert ids.tolist() == engine.token_ids(["refund money"])[0]
    assert torch.linalg.vector_norm(vectors, dim=-1).tolist() == pytest.approx([1.0] * len(ids), abs=1e-5)


def test_the_part_is_tried_only_on_yes_no_questions_whose_states_list_tools(encoder_dir):
    from clef_agents.train.teach import teach

    model = make_model(encoder_dir)
    reports = teach(model, tiny_records(60, 30), tiny_records(30, 31), lexical=False, neighbours=False, progress=False)
    assert not any("tool_match" in report for report in reports.values())
    mixed = tool_records(30, 32) + [
        {**r, "state": "please help " + r["state"].rsplit("please help ", 1)[1]} for r in tool_records(50, 33)
    ]
    (report,) = teach(make_model(encoder_dir), mixed, lexical=False, neighbours=False, progress=False).values()
    assert "tool_match" not in report  # under half of the records list tools


def test_a_tool_match_part_needs_the_text_the_encoder_and_a_known_option(tool_taught):
    from dataclasses import replace

    from clef_agents.model.tool_match import ToolMatch

    model, _ = tool_taught
    (entry,) = model.engine.taught.questions.values()
    features = torch.zeros(entry.hidden_weight.shape[1])
    with pytest.raises(ValueError, match="needs the state text and the encoder"):
        entry.logits(features, torch.zeros(2), ["yes", "no"], "some text")
    with pytest.raises(ValueError, match="its blend needs the tool features"):
        entry.blend(features, torch.zeros(2))
    with pytest.raises(ValueError, match="tool-match part on 'maybe' needs one of the options"):
        replace(entry, tool_match=ToolMatch("maybe", (1.0,) * 3, 0.0, (0.0,) * 3, (1.0,) * 3))


def test_cli_teaches_without_the_tool_match(encoder_dir, tmp_path, capsys):
    _, without, report = teach_twice_by_cli(encoder_dir, tmp_path, tool_records(200, 24), ["--no-tool-match"], capsys)
    defaults = json.loads((tmp_path / "defaults" / "teach_report.json").read_text())["should a listed tool be called"]
    assert defaults["tool_match"]["kept"] is True
    (entry,) = without.engine.taught.questions.values()
    assert entry.tool_match is None and "tool_match" not in report["should a listed tool be called"]
    assert without.config.data_card["taught"]["command"].endswith("--no-tool-match")


def test_the_frozen_text_cache_keeps_the_most_recent_texts(encoder_dir, monkeypatch):
    import clef_agents.model.encoder as encoder_module

    engine = make_model(encoder_dir).engine
    engine.clear_caches()
    monkeypatch.setattr(encoder_module, "TEXT_CACHE_SIZE", 3)
    first = engine.encode_texts(["card lost", "refund money", "login error"])
    engine.encode_texts(["card lost", "spam prize"])  # "card lost" used again: "refund money" is the oldest
    assert engine.encoder.cached_texts() == ["login error", "card lost", "spam prize"]
    torch.testing.assert_close(engine.encode_texts(["refund money"])[0], first[1])  # recomputed alike
    torch.testing.assert_close(engine.embed_frozen(["refund money", "login error"], cache=False), first[1:])
    assert engine.embed_frozen([], cache=False).shape == (0, engine.backbone.hidden_size)


def test_tools_state_lists_tools_the_way_the_part_reads_them():
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool

    from clef_agents.graph import TOOL_RELEVANCE_QUESTION, tools_state
    from clef_agents.model.taught import taught_key
    from clef_agents.model.tool_match import split_tool_listing
    from clef_agents.train.datasets import canonical_question
    from clef_agents.wire import validate_questions

    @tool
    def refund(order_id: str) -> str:
        """Send the money of an order back to the customer."""
        return "done"

    schema = {
        "type": "function",
        "function": {"name": "track", "description": "Where a parcel is now.", "parameters": {}},
    }
    state = tools_state(
        [refund, schema], [HumanMessage("I was charged twice"), AIMessage("Which order?"), HumanMessage("order 12")]
    )
    tools, request = split_tool_listing(state)
    assert tools == ["refund: Send the money of an order back to the customer.", "track: Where a parcel is now."]
    assert request == "user: I was charged twice\nassistant: Which order?\nuser: order 12"
    assert tools_state([refund], "plain text request").endswith("Conversation:\nplain text request")
    with pytest.raises(ValueError, match="needs at least one tool"):
        tools_state([], "hello")
    # the question the shipped mini is taught on bfcl_relevance, so its taught weights answer it
    assert taught_key(TOOL_RELEVANCE_QUESTION) == taught_key(
        validate_questions({"q": canonical_question("bfcl_relevance")})["q"]
    )


def test_a_gate_asks_the_tool_question_of_the_rendered_listing():
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from clef_agents.graph import TOOL_RELEVANCE_QUESTION, DecisionNode, tools_state
    from clef_agents.model.tool_match import split_tool_listing
    from clef_agents.testing import FakeDecisionModel

    @tool
    def track(order_id: str) -> str:
        """Where a parcel is now."""
        return "on its way"

    seen = []

    def answer(state, questions):
        seen.append(state)
        tools, _ = split_tool_listing(state)
        return {"call_tool": 0.9 if tools else 0.1}

    gate = DecisionNode(
        FakeDecisionModel(answer_fn=answer),
        {"call_tool": TOOL_RELEVANCE_QUESTION},
        name="tools?",
        input=lambda state: tools_state([track], state["messages"]),
    )
    update = gate.invoke({"messages": [HumanMessage("where is order 7?")]})
    decision = update["decisions"]["tools?"]["route"]["call_tool"]
    assert decision["label"] is True and seen[0].endswith("user: where is order 7?")


def test_a_batch_encodes_all_its_requests_in_one_call_and_answers_as_one_by_one(tool_taught, monkeypatch):
    model, _ = tool_taught
    records = tool_records(10, 26)
    requests = [{"state": r["state"], "questions": r["questions"]} for r in records]
    one_by_one = [model.batch([request])[0].answers["call"].noul for request in requests]
    calls = []

    def counting(real):
        def wrapped(texts, cache=True):
            calls.append((len(texts), cache))
            return real(texts, cache)

        return wrapped

    encoder = model.engine.encoder
    monkeypatch.setattr(encoder, "embed_frozen", counting(encoder.embed_frozen))
    monkeypatch.setattr(encoder, "embed_tokens_frozen", counting(encoder.embed_tokens_frozen))
    together = [response.answers["call"].noul for response in model.batch(requests)]
    assert [call for call in calls if not call[1]] == [(10, False)]  # the ten requests, in one encoder call
    assert together == pytest.approx(one_by_one, abs=1e-4)  # padded together vs alone: float noise in every pass
