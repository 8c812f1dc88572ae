"""The lexical part of taught questions: TF-IDF vectors, the word-level logistic regression, and
how teaching adds it to a question's blend only where it helps."""

from __future__ import annotations

import math
import random

import pytest
from test_teach import assert_answers_survive_reload, load_without_part, teach_twice_by_cli
from test_training import tiny_records
from tiny_models import make_model

torch = pytest.importorskip("torch")

FILLER = "the a my our this that please today now again here there some any more just about".split()
KEYWORDS = {"billing": ["refund", "invoice", "charged"], "shipping": ["parcel", "courier", "delivery"]}


def keyword_records(n: int, seed: int) -> list[dict]:
    """States of random filler words with one keyword that alone decides the label."""
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        label = rng.choice(sorted(KEYWORDS))
        words = [rng.choice(FILLER) for _ in range(14)]
        words.insert(rng.randrange(len(words) + 1), rng.choice(KEYWORDS[label]))
        records.append(
            {
                "state": " ".join(words),
                "questions": {
                    "dept": {
                        "type": "choice",
                        "instructions": "which department",
                        "criteria": {"billing": "payments", "shipping": "parcels"},
                    }
                },
                "labels": {"dept": label},
                "meta": {"dataset": "keywords", "split": "train", "source": "test"},
            }
        )
    return records


def test_vocabulary_keeps_terms_in_two_texts_with_smoothed_idf():
    from clef_agents.model.lexical import build_vocabulary

    vocabulary, idf = build_vocabulary(["Lost card", "lost phone", "card lost again", "x y"])
    assert vocabulary == ["card", "lost"]
    assert idf.tolist() == pytest.approx([math.log(5 / 3) + 1, math.log(5 / 4) + 1])
    assert build_vocabulary(["lost card", "lost phone", "lost wallet"], max_terms=0)[0] == []


def test_tfidf_rows_are_unit_vectors_over_known_terms():
    from clef_agents.model.lexical import LexicalModel

    model = LexicalModel(
        ["card", "lost", "lost card"], torch.tensor([1.0, 2.0, 3.0]), torch.zeros(2, 3), torch.zeros(2)
    )
    (columns, values), (empty_columns, empty_values) = model.vectors(["lost card card unknown", "nothing known"])
    assert columns.tolist() == [0, 1, 2]
    expected = torch.tensor([1 + math.log(2), 2.0, 3.0])
    assert values.tolist() == pytest.approx((expected / expected.norm()).tolist())
    assert len(empty_columns) == 0 and len(empty_values) == 0


def test_a_text_with_no_known_word_scores_its_bias():
    from clef_agents.model.lexical import LexicalModel

    model = LexicalModel(["refund"], torch.ones(1), torch.tensor([[3.0], [-3.0]]), torch.tensor([0.5, -0.5]))
    assert model.logits("where is my parcel").tolist() == [0.5, -0.5]
    assert model.logits("REFUND please").tolist() == [3.5, -3.5]


def test_mismatched_lexical_parts_are_a_clear_error():
    from clef_agents.model.lexical import LexicalModel

    with pytest.raises(ValueError, match="2 terms, 2 idf values and weights for 3 terms"):
        LexicalModel(["a", "b"], torch.ones(2), torch.zeros(2, 3), torch.zeros(2))


def test_the_word_model_learns_a_keyword_rule():
    from clef_agents.model.lexical import fit_lexical

    train, test = keyword_records(200, 0), keyword_records(100, 1)
    names = sorted(KEYWORDS)
    gold = torch.tensor([names.index(r["labels"]["dept"]) for r in train])
    model = fit_lexical([r["state"] for r in train], torch.ones(len(train), 2, dtype=torch.bool), gold, l2=1e-6)
    predicted = [names[int(model.logits(r["state"]).argmax())] for r in test]
    assert predicted == [r["labels"]["dept"] for r in test]


@pytest.fixture(scope="module")
def keyword_taught(encoder_dir):
    from clef_agents.train.teach import teach

    model = make_model(encoder_dir)
    reports = teach(model, keyword_records(160, 2), keyword_records(60, 3), progress=False)
    return model, reports


def test_teaching_adds_the_word_model_where_it_lowers_held_out_nll(keyword_taught):
    from clef_agents.train.teach import LEXICAL_MIN_GAIN

    model, reports = keyword_taught
    lexical = reports["which department"]["lexical"]
    assert lexical["kept"] is True
    assert lexical["held_out_with_lexical"]["nll"] <= lexical["held_out_without_lexical"]["nll"] * (
        1 - LEXICAL_MIN_GAIN
    )
    assert reports["which department"]["held_out_taught"] == lexical["held_out_with_lexical"]
    assert reports["which department"]["held_out_taught"]["accuracy"] >= 0.95
    entry = next(iter(model.engine.taught.questions.values()))
    assert entry.lexical is not None and entry.delta != 0.0
    assert set(KEYWORDS["billing"]) <= set(entry.lexical.vocabulary)


def test_the_word_model_is_kept_or_dropped_by_the_stated_rule(encoder_dir):
    from clef_agents.train.teach import LEXICAL_MIN_GAIN, teach

    model = make_model(encoder_dir)
    reports = teach(model, tiny_records(90, 30), tiny_records(40, 31), progress=False)
    for text, report in reports.items():
        lexical = report["lexical"]
        gain_met = lexical["held_out_with_lexical"]["nll"] <= lexical["held_out_without_lexical"]["nll"] * (
            1 - LEXICAL_MIN_GAIN
        )
        assert lexical["kept"] is gain_met
        entry = next(e for e in model.engine.taught.questions.values() if e.instructions == text)
        assert (entry.lexical is not None) is gain_met


def test_lexical_answers_survive_save_and_load(keyword_taught, tmp_path):
    model, _ = keyword_taught
    entry = assert_answers_survive_reload(model, tmp_path / "lexical", keyword_records(20, 4), "dept")
    assert "refund" in entry["lexical"]["vocabulary"] and entry["lexical"]["delta"] != 0.0


def test_a_file_missing_a_lexical_part_names_it(keyword_taught, tmp_path):
    model, _ = keyword_taught
    with pytest.raises(ValueError, match="lacks lexical_idf"):
        load_without_part(model, tmp_path / "partial", "lexical_idf")


def test_teaching_without_the_word_model(encoder_dir, tmp_path, capsys):
    printed, without, report = teach_twice_by_cli(
        encoder_dir, tmp_path, keyword_records(120, 5), ["--no-lexical"], capsys
    )
    assert "| which department | 120 | 12 | mean" in printed
    assert all(entry.lexical is None for entry in without.engine.taught.questions.values())
    assert without.config.data_card["taught"]["command"].endswith("--no-lexical")
    assert "lexical" not in report["which department"]


def test_a_lexical_question_needs_the_state_text(keyword_taught):
    model, _ = keyword_taught
    entry = next(iter(model.engine.taught.questions.values()))
    features = torch.zeros(entry.hidden_weight.shape[1])
    with pytest.raises(ValueError, match="reads the state text"):
        entry.logits(features, torch.zeros(2), entry.names)


def test_identifier_words_read_every_naming_style_as_the_same_words():
    from clef_agents.model.lexical import terms

    styles = [
        "listSharedLinks{}",
        "list_shared_links{}",
        "ListSharedLinks{}",
        "list-shared-links{}",
        "files.list.shared_links{}",
    ]
    assert all({"list", "shared", "links"} <= set(terms(s, identifier_words=True)) for s in styles)
    assert "listsharedlinks" in terms(styles[0]) and "list" not in terms(styles[0])  # the default reads the name whole


def _tool_records(style: str, n: int, seed: int) -> tuple[list[str], list[int]]:
    """Calls whose verb alone decides the label (0: read, 1: write), each tool name in one naming style."""
    rng = random.Random(seed)
    verbs, objects = (
        [("list", 0), ("get", 0), ("delete", 1), ("purge", 1)],
        ["user", "invoice", "bucket", "ticket", "order"],
    )
    texts, gold = [], []
    for _ in range(n):
        (verb, label), thing = rng.choice(verbs), rng.choice(objects)
        name = f"{verb}{thing.title()}" if style == "camel" else f"{verb}_{thing}"
        texts.append(f"Proposed tool call: {name}{{\"id\": {rng.randrange(99)}}}")
        gold.append(label)
    return texts, gold


def test_identifier_words_let_a_rule_learned_on_snake_case_names_read_camel_case_ones():
    from clef_agents.model.lexical import fit_lexical

    train, gold = _tool_records("snake", 200, 0)
    test, test_gold = _tool_records("camel", 100, 1)
    present = torch.ones(len(train), 2, dtype=torch.bool)
    for words, expected in ((True, 1.0), (False, None)):
        model = fit_lexical(train, present, torch.tensor(gold), l2=1e-6, identifier_words=words)
        accuracy = sum(int(model.logits(t).argmax()) == y for t, y in zip(test, test_gold)) / len(test)
        if expected is None:
            assert accuracy < 0.8  # whole names: the camel-case verbs were never seen
        else:
            assert accuracy == expected


def test_teaching_with_identifier_words_keeps_the_setting_through_save_and_load(encoder_dir, tmp_path, capsys):
    _, flagged, report = teach_twice_by_cli(
        encoder_dir, tmp_path, keyword_records(120, 6), ["--identifier-words"], capsys
    )
    assert flagged.config.data_card["taught"]["command"].endswith("--identifier-words")
    assert report["which department"]["lexical"]["identifier_words"] is True
    entries = list(flagged.engine.taught.questions.values())
    assert entries and all(e.lexical is None or e.lexical.identifier_words for e in entries)
    assert any(e.lexical is not None for e in entries)
