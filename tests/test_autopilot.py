"""The autopilot: it never acts before it is certified, certifies a learnable question from its teacher's
answers, never certifies a teacher that says one thing or answers at random, withdraws on drift, keeps every
label across a restart, asks no teacher twice for one item, and answers alone only on a certificate earned on the
current sample at settings as strict as the gate's (after a reset, a withdrawal during a retrain, a stricter target)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clef_agents.autopilot import Autopilot, LabelStore
from clef_agents.autopilot.certify import attempt_share
from clef_agents.autopilot.learner import Learner
from clef_agents.autopilot.pilot import AutopilotConfig
from clef_agents.autopilot.replay import Stream, replay
from clef_agents.autopilot.store import LabelledItem

QUESTION = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "tech": None, "sales": None}}
WORDS = (
    ["invoice", "refund", "charge", "payment"],
    ["crash", "error", "bug", "login"],
    ["price", "demo", "quote", "plan"],
)


def synthetic_stream(n: int, seed: int = 0, flip_at: int | None = None) -> Stream:
    """Texts whose words give their team away; after ``flip_at`` the teams' words swap (a drift)."""
    rng = np.random.default_rng(seed)
    texts, gold = [], []
    for i in range(n):
        label = int(rng.integers(3))
        words = WORDS[(label + 1) % 3 if flip_at is not None and i >= flip_at else label]
        filler = [f"w{int(x)}" for x in rng.integers(0, 400, 6)]
        texts.append(" ".join([*rng.choice(words, 2), *filler, f"#{i}"]))
        gold.append(label)
    return Stream(texts, np.full((n, 3), 1 / 3), np.array(gold))


def pilot(**settings) -> Autopilot:
    return Autopilot(":memory:", background=False, embeddings=False, **settings)


def test_nothing_is_automatic_before_certification_and_a_learnable_question_is_certified():
    stream = synthetic_stream(1500)
    ap = pilot()
    result = replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    first = result.summary()["first_automatic_item"]
    key = ap.store.questions()[0]["question_key"]
    certified = [v for v in ap.store.versions(key) if v.certified]
    assert certified, "a question whose words give the answer away must get certified"
    assert first is not None and first > certified[0].report["last_seq"] - 1
    assert not (result.lanes[:first] == "auto").any()
    summary = result.summary()
    assert summary["teacher_share_last"] < 0.3
    assert summary["automatic_agreement"] >= 0.95


@pytest.mark.parametrize("teacher_kind", ["always billing", "random"])
def test_a_teacher_that_says_one_thing_or_answers_at_random_never_gets_the_gate_certified(teacher_kind):
    stream = synthetic_stream(1200, seed=1)
    rng = np.random.default_rng(5)
    answers = np.zeros(len(stream), dtype=int) if teacher_kind == "always billing" else rng.integers(0, 3, len(stream))
    ap = pilot()
    result = replay(ap, QUESTION, stream, lambda i: int(answers[i]))
    assert not (result.lanes == "auto").any()
    key = ap.store.questions()[0]["question_key"]
    assert ap.store.versions(key) and not any(v.certified for v in ap.store.versions(key))


def test_drift_withdraws_automatic_answering_and_a_later_version_is_certified_again():
    stream = synthetic_stream(4000, seed=2, flip_at=2000)
    ap = pilot()
    result = replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    key = ap.store.questions()[0]["question_key"]
    withdrawn = [e["detail"]["seq"] for e in ap.store.events(key) if e["kind"] == "withdrawn"]
    assert withdrawn and 2000 < withdrawn[0] <= 2300
    after = [
        v.report["last_seq"] for v in ap.store.versions(key) if v.certified and v.report["last_seq"] > withdrawn[0]
    ]
    assert after, "the question must be certified again on labels after the change"
    assert (result.lanes[after[0] + 1 :] == "auto").any()


def test_an_automatic_answer_is_not_repeated_for_the_same_text_once_its_question_is_withdrawn():
    stream = synthetic_stream(2400, seed=2, flip_at=2000)
    ap = pilot()
    result = replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    status = ap.status()[0]
    assert status["state"] == "withdrawn (drift)", status
    answered_alone = stream.texts[int(np.nonzero(result.lanes[:2000] == "auto")[0][0])]
    again = ap.decide("replay", "q", QUESTION, answered_alone, [1 / 3] * 3)
    assert again.lane == "teacher" and "since withdrawn" in again.reason
    assert ap.record_label(again.item_key, 0, "gold")  # the teacher's answer now labels it


def test_labels_versions_and_decisions_survive_a_restart(tmp_path):
    path = tmp_path / "autopilot.sqlite"
    stream = synthetic_stream(900, seed=3)
    first = Autopilot(path, background=False, embeddings=False)
    replay(first, QUESTION, stream, lambda i: int(stream.gold[i]))
    key = first.store.questions()[0]["question_key"]
    labelled = {i.item_key: i.label for i in first.store.labelled(key)}
    serving = first.serving("replay", "q", QUESTION)
    first.store.close()

    again = Autopilot(path, background=False, embeddings=False)
    assert {i.item_key: i.label for i in again.store.labelled(key)} == labelled
    assert again.serving("replay", "q", QUESTION).version == serving.version
    assert again.serving("replay", "q", QUESTION).threshold == serving.threshold
    # an item the teacher labelled before the restart is not asked again
    labelled_text = next(i.state_text for i in again.store.labelled(key))
    decision = again.decide("replay", "q", QUESTION, labelled_text, [1 / 3] * 3)
    assert decision.lane == "known" and decision.source == "gold"


def test_a_failed_teacher_answer_is_recorded_and_never_becomes_a_label():
    ap = pilot()
    decision = ap.decide("g", "q", QUESTION, "the invoice is wrong", [1 / 3] * 3)
    ap.record_failure(decision.item_key, "llm", "TimeoutError: no answer in 30 s")
    assert ap.store.label(decision.item_key) is None
    assert ap.store.counts(decision.question_key)["failures"] == 1
    with pytest.raises(ValueError, match="label source must be one of"):
        ap.record_label(decision.item_key, 0, "auto")
    with pytest.raises(ValueError, match="not an option index"):
        ap.record_label(decision.item_key, 3, "llm")


def test_the_same_item_decided_twice_gets_the_same_decision_and_the_first_label_stands():
    ap = pilot()
    once = ap.decide("g", "q", QUESTION, "refund my charge", [0.5, 0.3, 0.2])
    twice = ap.decide("g", "q", QUESTION, "refund my charge", [0.5, 0.3, 0.2])
    assert (once.item_key, once.lane, once.marked) == (twice.item_key, twice.lane, twice.marked)
    assert ap.record_label(once.item_key, 0, "human") is True
    assert ap.record_label(once.item_key, 1, "llm") is False
    assert ap.store.label(once.item_key) == (0, "human")


def test_background_retraining_swaps_a_certified_version_in_without_blocking_decisions():
    stream = synthetic_stream(1200, seed=4)
    ap = Autopilot(":memory:", background=True, embeddings=False)
    replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    assert ap.wait_idle(timeout=60)
    assert ap.serving("replay", "q", QUESTION).active
    ap.close()


def test_config_errors_say_what_is_allowed():
    with pytest.raises(ValueError, match=r"target must be in \[0.5, 1\)"):
        Autopilot(":memory:", target=1.0)
    with pytest.raises(ValueError, match=r"audit must be in \(0, 1\]"):
        Autopilot(":memory:", audit=0)
    with pytest.raises(ValueError, match="3 model probabilities for 2 options"):
        pilot().decide("g", "q", {"type": "noul", "instructions": "Spam?"}, "x", [0.2, 0.3, 0.5])


def test_store_refuses_a_label_for_an_item_it_never_routed(tmp_path):
    ap = Autopilot(LabelStore(tmp_path / "s.sqlite"), background=False, embeddings=False)
    with pytest.raises(KeyError, match="labels are kept only for items the autopilot routed"):
        ap.record_label("nope", 0, "llm")


def test_unknown_learner_kinds_are_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match="learner_kinds must be some of model, recalibrated, learned, embedding"):
        Autopilot(":memory:", learner_kinds=("forest",))


def test_a_retrain_in_a_child_process_is_stored_and_served(tmp_path):
    stream = synthetic_stream(900, seed=6)
    ap = Autopilot(tmp_path / "autopilot.sqlite", background="process", embeddings=False)
    assert ap.background == "process"
    replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    assert ap.wait_idle(timeout=300)
    key = ap.store.questions()[0]["question_key"]
    certified = [v for v in ap.store.versions(key) if v.certified]
    assert certified and ap.serving("replay", "q", QUESTION).version == certified[-1].version
    ap.close()
    with pytest.raises(ValueError, match="needs a store another process can open"):
        Autopilot(":memory:", background="process")
    with pytest.raises(ValueError, match="background must be"):
        Autopilot(":memory:", background="sometimes")


def _sample_with_sure_disagreements(n: int = 600) -> list[LabelledItem]:
    """Yes/no items whose model answer agrees with the teacher, but for the three surest ones."""
    rng = np.random.default_rng(0)
    p_yes = rng.uniform(0.0, 1.0, n)
    surest = set(np.argsort(-np.abs(p_yes - 0.5))[:3].tolist())
    items = []
    for k, p in enumerate(p_yes):
        label = int(p < 0.5) if k not in surest else int(p >= 0.5)
        items.append(sampled_item(k, p, label))
    return items


def sampled_item(seq: int, p_yes: float, label: int) -> LabelledItem:
    """A labelled yes/no item of the certification sample, the model saying p(yes) = ``p_yes``."""
    return LabelledItem(
        seq=seq,
        item_key=f"i{seq}",
        state_text="x",
        model_probs=[float(p_yes), float(1 - p_yes)],
        marked=True,
        eligible=False,
        auto_label=None,
        version=0,
        label=label,
        source="llm",
    )


def test_the_sequence_start_is_checked_and_used_by_certification():
    with pytest.raises(ValueError, match="unknown sequence start 'middle'; allowed: first, robust"):
        AutopilotConfig(sequence_start="middle")
    assert AutopilotConfig().sequence_start == "robust"
    sample, learner = _sample_with_sure_disagreements(), Learner.model_answer(2)
    first = Autopilot(":memory:", embeddings=False, background=False, sequence_start="first")
    robust = Autopilot(":memory:", embeddings=False, background=False)
    assert first.certify(learner, sample)["certified"] is False  # disagreements at the top end "first"
    assert robust.certify(learner, sample)["certified"] is True


def test_later_certification_attempts_on_the_same_sample_spend_less_of_the_error_budget():
    rng = np.random.default_rng(1)
    p_yes, wrong = rng.uniform(0, 1, 400), rng.random(400) < 0.02
    sample = [sampled_item(k, p, int((p < 0.5) != w)) for k, (p, w) in enumerate(zip(p_yes, wrong))]
    ap = Autopilot(":memory:", embeddings=False, background=False)
    first, tenth = ap.certify(Learner.model_answer(2), sample, 1), ap.certify(Learner.model_answer(2), sample, 10)
    assert first["certified"] and first["spent"] and first["delta"] == pytest.approx(0.1 * 6 / math.pi**2)
    assert not tenth["certified"] and tenth["delta"] == pytest.approx(first["delta"] / 100)
    assert sum(attempt_share(k) for k in range(1, 10_000)) < 1.0
    with pytest.raises(ValueError, match="attempt counts from 1, got 0"):
        attempt_share(0)


def test_a_reset_forgets_the_versions_and_the_next_certificate_is_earned_on_labels_after_it(tmp_path, capsys):
    from clef_agents.cli import main

    path = tmp_path / "autopilot.sqlite"
    stream = synthetic_stream(1500, seed=5)
    serving_process = Autopilot(path, background=False, embeddings=False, refresh_seconds=0.0)
    replay(serving_process, QUESTION, stream.ordered(np.arange(900)), lambda i: int(stream.gold[i]))
    key = serving_process.store.questions()[0]["question_key"]
    before = [v.version for v in serving_process.store.versions(key)]
    assert serving_process.serving("replay", "q", QUESTION).active, "the stream must certify before the reset"
    reset_at = serving_process.store.latest_seq(key)

    assert main(["autopilot", "reset", "--store", str(path), "--question", key]) == 0  # another process
    assert "versions forgotten" in capsys.readouterr().out

    # the serving process picks the reset up: nothing alone, and the old labels are kept
    decision = serving_process.decide("replay", "q", QUESTION, "refund for a charge #new", [1 / 3] * 3)
    assert decision.lane == "teacher" and serving_process.serving("replay", "q", QUESTION).threshold is None
    assert serving_process.store.label_count(key) > 0
    rest = stream.ordered(np.arange(900, 1500))
    replay(serving_process, QUESTION, rest, lambda i: int(rest.gold[i]))
    versions = serving_process.store.versions(key)
    assert min(v.version for v in versions) > max(before), "version numbers go on after a reset"
    certified = [v for v in versions if v.certified]
    assert certified, "a learnable question is certified again after a reset"
    labelled = {i.seq: i for i in serving_process.store.labelled(key)}
    first = certified[0]
    sample = [i for i in labelled.values() if i.marked and reset_at < i.seq <= first.report["last_seq"]]
    assert first.report["sample"] == len(sample), "the certificate after a reset is earned on a sample drawn after it"
    assert first.report["train"] > len([i for i in labelled.values() if not i.marked and i.seq > reset_at])


@pytest.mark.parametrize(("stricter", "value"), [("target", 0.99), ("confidence", 0.95)])
def test_a_version_certified_under_looser_settings_does_not_answer_alone_for_a_stricter_gate(
    tmp_path, capsys, stricter, value
):
    from clef_agents.cli import main

    path = tmp_path / "autopilot.sqlite"
    stream = synthetic_stream(900, seed=3)
    first = Autopilot(path, background=False, embeddings=False)
    replay(first, QUESTION, stream, lambda i: int(stream.gold[i]))
    certified = first.serving("replay", "q", QUESTION)
    assert certified.active, "the stream must certify at the default settings"
    first.store.close()
    assert main(["autopilot", "status", "--store", str(path)]) == 0
    assert "at 95 % agreement, 90 % confidence (test " in capsys.readouterr().out

    strict = Autopilot(path, background=False, embeddings=False, **{stricter: value})
    assert not strict.serving("replay", "q", QUESTION).active
    decision = strict.decide("replay", "q", QUESTION, "a refund for this invoice please #strict", [1 / 3] * 3)
    assert decision.lane == "teacher" and "not certified" in decision.reason
    strict.store.close()

    same = Autopilot(path, background=False, embeddings=False)
    assert same.serving("replay", "q", QUESTION).version == certified.version
    assert same.serving("replay", "q", QUESTION).active


def test_a_version_fitted_while_the_sample_restarted_is_not_served(tmp_path):
    path = tmp_path / "autopilot.sqlite"
    stream = synthetic_stream(900, seed=3)
    ap = Autopilot(path, background=False, embeddings=False, refresh_seconds=0.0)
    replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    key = ap.store.questions()[0]["question_key"]
    assert ap.serving("replay", "q", QUESTION).active

    certify = ap.certify

    def certify_while_another_process_resets(*args, **kwargs):
        result = certify(*args, **kwargs)
        ap.store.reset(key)  # lands between the test and the swap
        return result

    ap.certify = certify_while_another_process_resets
    record = ap.retrain(key)
    assert not record.certified and "restarted the sample" in record.report["certificate"]["reason"]
    decision = ap.decide("replay", "q", QUESTION, "a refund for this invoice please #late", [1 / 3] * 3)
    assert decision.lane == "teacher"

    # a version stored as certified on a sample that a later withdrawal closed never answers alone after a load
    again = synthetic_stream(900, seed=4)
    fresh = Autopilot(tmp_path / "second.sqlite", background=False, embeddings=False)
    replay(fresh, QUESTION, again, lambda i: int(again.gold[i]))
    second_key = fresh.store.questions()[0]["question_key"]
    assert fresh.serving("replay", "q", QUESTION).active
    later = fresh.store.latest_seq(second_key)
    fresh.store.add_event(second_key, "withdrawn", {"version": 0, "seq": later})  # another version's withdrawal
    loaded = Autopilot(tmp_path / "second.sqlite", background=False, embeddings=False)
    assert not loaded.serving("replay", "q", QUESTION).active
