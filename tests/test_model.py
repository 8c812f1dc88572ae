"""The local model on tiny random backbones: contract, invariance, batching, checkpoints, truncation."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
from langchain_core.decisions import Box, Choice, Noul, Score
from tiny_models import make_model

from clef_agents import wire

pytest.importorskip("torch")

TICKET = "my card is lost and I was charged twice please help"
OPTIONS = {"billing": "money charged payment", "security": "card lost stolen", "sales": "price order", "tech": None}


def questions() -> dict:
    return {
        "urgent": Noul(instructions="is this urgent", criteria={"true": "production down", "false": None}),
        "team": Choice(instructions="which team", criteria=dict(OPTIONS)),
        "anger": Score(instructions="how angry", criteria=["not angry", "angry", "very angry"]),
    }


@pytest.fixture(scope="module", params=["encoder", "decoder"])
def model(request, encoder_dir, decoder_dir):
    return make_model(encoder_dir if request.param == "encoder" else decoder_dir)


def test_every_answer_keeps_the_contract(model):
    response = model.invoke({"state": TICKET, "questions": questions()})
    assert set(response.answers) == {"urgent", "team", "anger"}
    urgent = response.nouls["urgent"].noul
    assert 0.0 <= urgent <= 1.0
    team = response.choices["team"]
    assert list(team.probabilities) == list(OPTIONS)
    assert sum(team.probabilities.values()) == pytest.approx(1.0, abs=1e-6)
    assert team.choice == max(team.probabilities, key=team.probabilities.get)
    n = len(OPTIONS)
    assert team.confidence == pytest.approx((max(team.probabilities.values()) - 1 / n) / (1 - 1 / n), abs=1e-9)
    anger = response.scores["anger"]
    assert list(anger.probabilities) == [0, 1, 2]
    assert sum(anger.probabilities.values()) == pytest.approx(1.0, abs=1e-6)
    assert anger.score == pytest.approx(sum(i * p for i, p in anger.probabilities.items()), abs=1e-9)
    assert anger.legend == {0: "not angry", 1: "angry", 2: "very angry"}
    mode = max(anger.probabilities, key=anger.probabilities.get)
    spread = sum(p * abs(i - mode) for i, p in anger.probabilities.items())
    uniform = sum(abs(i - 1) for i in range(3)) / 3
    assert anger.confidence == pytest.approx(max(0.0, 1 - spread / uniform), abs=1e-9)


def test_answers_do_not_depend_on_option_order_question_order_or_ids(model):
    base = model.invoke({"state": TICKET, "questions": questions()})
    rng = random.Random(3)
    shuffled = list(OPTIONS.items())
    rng.shuffle(shuffled)
    renamed = {
        "anger 🙂": questions()["anger"],
        "x.team": Choice(instructions="which team", criteria=dict(shuffled)),
        "u": questions()["urgent"],
    }
    other = model.invoke({"state": TICKET, "questions": renamed})
    assert other.nouls["u"].noul == pytest.approx(base.nouls["urgent"].noul, abs=1e-5)
    for name, p in base.choices["team"].probabilities.items():
        assert other.choices["x.team"].probabilities[name] == pytest.approx(p, abs=1e-5)
    for level, p in base.scores["anger"].probabilities.items():
        assert other.scores["anger 🙂"].probabilities[level] == pytest.approx(p, abs=1e-5)


def test_cross_question_attention_is_active_but_bounded(model):
    alone = model.invoke({"state": TICKET, "questions": {"team": questions()["team"]}})
    together = model.invoke({"state": TICKET, "questions": questions()})
    deltas = [abs(alone.choices["team"].probabilities[k] - together.choices["team"].probabilities[k]) for k in OPTIONS]
    assert max(deltas) < 0.05


def test_batch_equals_single_requests(model):
    states = [TICKET, "spam win a free prize click the link", "hello", "production down " * 5]
    single = [model.invoke({"state": s, "questions": questions()}) for s in states]
    batched = model.batch([{"state": s, "questions": questions()} for s in states])
    for a, b in zip(single, batched):
        for qid in a.answers:
            assert wire.answer_probabilities(b.answers[qid]) == pytest.approx(
                wire.answer_probabilities(a.answers[qid]), abs=1e-5
            )


async def test_abatch_and_ainvoke_match_invoke(model):
    request = {"state": TICKET, "questions": questions()}
    sync = model.invoke(request)
    (batched,) = await model.abatch([request])
    single = await model.ainvoke(request)
    for answer in (batched, single):
        assert answer.choices["team"].probabilities == pytest.approx(sync.choices["team"].probabilities, abs=1e-6)


def test_batch_returns_errors_per_request(model):
    good = {"state": TICKET, "questions": questions()}
    bad = {"state": TICKET, "questions": {"dept": Choice(instructions="x", criteria={"only": None})}}
    results = model.batch([good, bad], return_exceptions=True)
    assert results[0].choices["team"].choice in OPTIONS
    assert isinstance(results[1], wire.InvalidRequestError)
    assert str(results[1]) == "questions.dept: a choice needs 2 to 255 options, got 1"


def test_box_questions_are_refused_with_a_clear_message(model):
    with pytest.raises(wire.InvalidRequestError, match="questions.where: box questions need an image model"):
        model.invoke({"state": TICKET, "questions": {"where": Box(instructions="find the logo")}})


def test_save_then_load_gives_identical_probabilities(model, tmp_path):
    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning

    before = model.invoke({"state": TICKET, "questions": questions()})
    folder = model.save_pretrained(tmp_path / "ckpt")
    assert {p.name for p in folder.iterdir()} == {"config.json", "adapter", "head.safetensors"}
    assert not list(folder.rglob("*.bin")) and not list(folder.rglob("*.pt"))
    with pytest.warns(UntrainedModelWarning):
        loaded = ClefDecisionModel.from_pretrained(folder)
    after = loaded.invoke({"state": TICKET, "questions": questions()})
    for qid in before.answers:
        assert wire.answer_probabilities(after.answers[qid]) == pytest.approx(
            wire.answer_probabilities(before.answers[qid]), abs=1e-6
        )


def test_long_state_is_truncated_by_policy_and_reported(encoder_dir):
    model = make_model(encoder_dir, max_state_tokens=10)
    words = [
        "the",
        "a",
        "is",
        "my",
        "card",
        "lost",
        "stolen",
        "refund",
        "money",
        "charged",
        "twice",
        "production",
        "down",
        "urgent",
        "help",
        "please",
    ]
    response = model.invoke({"state": " ".join(words), "questions": questions()})
    report = response.extensions["x_truncation"]
    assert report == {
        "truncated": True,
        "policy": "head_tail",
        "state_tokens": 16,
        "kept_tokens": 8,
        "dropped_tokens": 8,
    }
    ids, _ = model.engine.tokenize_state(" ".join(words))
    tokenizer = model.engine.backbone.tokenizer
    kept = tokenizer.convert_ids_to_tokens(ids)
    assert kept[0] == "[CLS]" and kept[-1] == "[SEP]"
    assert kept[1:4] == words[:3] and kept[-6:-1] == words[-5:]
    short = model.invoke({"state": "hello", "questions": questions()})
    assert short.extensions["x_truncation"]["truncated"] is False


def test_schema_work_is_cached_across_requests(model, monkeypatch):
    model.invoke({"state": TICKET, "questions": questions()})
    calls = []
    encoder = model.engine.encoder
    original = encoder.frozen_hidden
    monkeypatch.setattr(
        encoder, "frozen_hidden", lambda texts, max_length: calls.append(texts) or original(texts, max_length)
    )
    model.invoke({"state": "another state entirely", "questions": questions()})
    assert calls == []


def test_untrained_model_warns_loudly(encoder_dir):
    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning

    with pytest.warns(UntrainedModelWarning, match="UNTRAINED head: its probabilities mean nothing"):
        model = ClefDecisionModel.from_backbone(str(encoder_dir))
    response = model.invoke({"state": "hello", "questions": {"q": Noul(instructions="greeting")}})
    assert response.extensions["x_untrained"] is True


def test_messages_and_objects_are_accepted_as_state(model):
    from langchain_core.messages import AIMessage, HumanMessage

    for state in ([HumanMessage("my card is lost"), AIMessage("which card")], {"ticket": TICKET, "tags": ["billing"]}):
        response = model.invoke({"state": state, "questions": questions()})
        assert set(response.answers) == {"urgent", "team", "anger"}


def test_unknown_checkpoint_errors_name_the_problem(tmp_path):
    from clef_agents.model import ClefDecisionModel

    with pytest.raises(FileNotFoundError, match="is not a clef_agents checkpoint: no config.json"):
        ClefDecisionModel.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="never downloads at run time"):
        ClefDecisionModel.from_backbone("no-such-org/no-such-model")


def test_import_clef_agents_stays_light():
    code = "import sys, clef_agents; print(' '.join(m for m in ('torch','transformers','peft') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_import_clef_agents_model_leaves_transformers_peft_and_safetensors_to_the_calls_that_need_them():
    """transformers' modelling code alone took seconds of ``import clef_agents.model``; only loading a backbone needs it."""
    code = (
        "import sys, clef_agents.model; "
        "print(' '.join(m for m in ('transformers','peft','safetensors','gguf','matplotlib','scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_option_outputs_are_cached_per_question_and_forgotten_when_training(encoder_dir):
    import torch

    model = make_model(encoder_dir)
    engine = model.engine
    engine.head_dtype = torch.float32  # the live (training) path always runs in float32
    questions = wire.validate_questions(
        {
            "team": {
                "type": "choice",
                "instructions": "which team",
                "criteria": {"billing": "money", "security": "card lost", "other": "else"},
            },
            "urgent": {"type": "noul", "instructions": "is it urgent"},
            "mood": {"type": "score", "instructions": "how happy", "criteria": ["sad", "flat", "glad"]},
        }
    )
    # two requests with different option counts, so the cached batch is padded
    request = [
        ("my card was stolen", [questions["team"], questions["urgent"]]),
        ("thanks, all good", [questions["mood"]]),
    ]
    with torch.no_grad():
        cached_batch = engine.encode(request)
        cached = engine.logits(cached_batch)
    live_batch = engine.encode(request)  # gradients on: computed live, nothing cached
    assert cached_batch.option_cache is not None and live_batch.option_cache is None
    valid = cached_batch.option_question >= 0
    assert not valid.all()
    assert torch.allclose(cached[valid], engine.logits(live_batch).detach()[valid], atol=1e-5)

    engine.train_mode(True)
    with torch.no_grad():
        engine.head.match_option[-1].weight.add_(0.5)
        engine.head.option_proj.weight.add_(0.5)
    engine.train_mode(False)
    with torch.no_grad():
        after = engine.logits(engine.encode(request))
    assert not torch.allclose(after[valid], cached[valid], atol=1e-4)
    assert torch.allclose(after[valid], engine.logits(engine.encode(request)).detach()[valid], atol=1e-5)


def test_a_bfloat16_head_answers_as_the_float32_one_within_a_few_thousandths(encoder_dir):
    import torch

    model = make_model(encoder_dir, device="cpu")  # head_precision is a CPU setting: CUDA always runs bfloat16
    many = {f"option_{i}": f"reason number {i} for writing" for i in range(40)}
    request = {
        "state": TICKET,
        "questions": {**questions(), "why": {"type": "choice", "instructions": "why", "criteria": many}},
    }
    model.engine.head_dtype = torch.float32
    exact = model.invoke(request)
    model.engine.head_dtype = torch.bfloat16
    fast = model.invoke(request)
    for qid, answer in exact.answers.items():
        p32, p16 = wire.answer_probabilities(answer), wire.answer_probabilities(fast.answers[qid])
        assert max(abs(a - b) for a, b in zip(p32, p16)) < 0.02
    batch = model.engine.encode([(TICKET, list(wire.validate_questions(request["questions"]).values()))])
    with torch.no_grad():
        z16 = model.engine.logits(batch)
        model.engine.head_dtype = torch.float32
        z32 = model.engine.logits(batch)
    assert z16.dtype == torch.float32 and not torch.equal(z16, z32)  # bfloat16 really ran, and handed back float32
    assert torch.allclose(z16, z32, atol=0.05)


def test_the_head_never_runs_in_bfloat16_while_training(encoder_dir):
    import torch

    engine = make_model(encoder_dir).engine
    engine.head_dtype = torch.bfloat16
    question = wire.validate_questions({"u": {"type": "noul", "instructions": "is it urgent"}})["u"]
    batch = engine.encode([(TICKET, [question])])
    logits = engine.logits(batch)  # gradients on
    assert logits.requires_grad and logits.dtype == torch.float32
    engine.head_dtype = torch.float32
    assert torch.equal(logits, engine.logits(engine.encode([(TICKET, [question])])))


def test_head_precision_names_and_the_environment_override(monkeypatch):
    import torch

    from clef_agents.model.scorer import cpu_has_native_bf16, head_dtype

    cpu = torch.device("cpu")
    assert head_dtype("float32", cpu) == torch.float32
    assert head_dtype("bfloat16", cpu) == torch.bfloat16
    assert head_dtype("auto", cpu) == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    monkeypatch.setenv("CLEF_AGENTS_HEAD_PRECISION", "float32")
    assert head_dtype(None, cpu) == torch.float32
    with pytest.raises(ValueError, match="'half' is not one of auto, float32, bfloat16"):
        head_dtype("half", cpu)


def test_a_checkpoint_without_the_match_path_gets_a_clear_message(model, tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    from clef_agents.model import ClefDecisionModel

    folder = model.save_pretrained(tmp_path / "old")
    weights = {k: v for k, v in load_file(str(folder / "head.safetensors")).items() if not k.startswith("match_")}
    save_file(weights, str(folder / "head.safetensors"))
    with pytest.raises(ValueError, match='lack match_option, match_scale, match_state .*"match": false'):
        ClefDecisionModel.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["head"]["match"] = False
    (folder / "config.json").write_text(json.dumps(config))
    assert ClefDecisionModel.from_pretrained(folder).config.head.match is False
