"""Decision records: JSONL round trip and the validator's exact messages and class balance."""

from __future__ import annotations

import json

from clef_agents.records import read_records, validate_record, validate_records, write_records


def _choice_record(label, dataset="demo"):
    return {
        "state": "my card has not arrived",
        "questions": {
            "intent": {
                "type": "choice",
                "instructions": "Which request is this?",
                "criteria": {"card_arrival": "Waiting for a card.", "lost_card": "The card is lost."},
            }
        },
        "labels": {"intent": label},
        "meta": {"dataset": dataset, "split": "train", "source": "hand"},
    }


def _noul_record(label):
    return {
        "state": {"sms": "WIN a prize"},
        "questions": {"spam": {"type": "noul", "instructions": "Is this spam?"}},
        "labels": {"spam": label},
        "meta": {"dataset": "demo", "split": "train", "source": "hand"},
    }


def _score_record(label):
    return {
        "state": "great film",
        "questions": {
            "sentiment": {"type": "score", "instructions": "How positive?", "criteria": ["bad", "ok", "good"]}
        },
        "labels": {"sentiment": label},
    }


def test_jsonl_round_trip_keeps_records_exactly(tmp_path):
    records = [_choice_record("card_arrival"), _noul_record(True), _score_record(2)]
    path = tmp_path / "sub" / "records.jsonl"
    assert write_records(path, records) == 3
    assert read_records(path) == records
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3


def test_read_records_names_file_and_line_of_bad_json(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_noul_record(True)) + "\n\n{oops\n", encoding="utf-8")
    try:
        read_records(path)
    except ValueError as exc:
        assert f"{path}:3: not valid JSON" in str(exc)
    else:
        raise AssertionError("a broken line must raise")


def test_valid_records_of_every_type_pass_and_are_counted():
    records = [
        _choice_record("card_arrival"),
        _choice_record("lost_card"),
        _choice_record("card_arrival"),
        _noul_record(True),
        _noul_record("no"),
        _score_record(2),
        _score_record("0"),
    ]
    report = validate_records(records)
    assert report.ok, report.format_errors()
    assert report.n_records == 7
    assert report.balance[("demo", "intent")] == {"card_arrival": 2, "lost_card": 1}
    assert report.balance[("demo", "spam")] == {"true": 1, "false": 1}
    assert report.balance[("(no dataset)", "sentiment")] == {"2": 1, "0": 1}


def test_illegal_choice_label_names_record_question_and_allowed_options():
    report = validate_records([_choice_record("card_arrival"), _choice_record("card_lost")])
    assert not report.ok
    assert report.invalid_records == [1]
    assert [str(e) for e in report.errors] == [
        "record 1, question 'intent': label 'card_lost' is not legal here; allowed: card_arrival, lost_card"
    ]
    assert report.balance[("demo", "intent")] == {"card_arrival": 1}


def test_illegal_noul_and_score_labels_list_what_is_allowed():
    errors = validate_records([_noul_record("maybe"), _score_record(3), _score_record(True)]).errors
    assert [str(e) for e in errors] == [
        "record 0, question 'spam': label 'maybe' is not legal here; allowed: true/false (or yes/no)",
        "record 1, question 'sentiment': label 3 is not legal here; allowed: 0, 1, 2",
        "record 2, question 'sentiment': label True is not legal here; allowed: 0, 1, 2",
    ]


def test_missing_label_and_label_for_unknown_question_are_errors():
    record = _choice_record("card_arrival")
    record["labels"] = {"topic": "x"}
    messages = [str(e) for e in validate_record(record)]
    assert messages == [
        "record 0, question 'intent': label missing; allowed: card_arrival, lost_card",
        "record 0, question 'topic': label for a question that is not asked; questions: intent",
    ]
    assert validate_records([record], require_all_labels=False).errors[0].question_id == "topic"


def test_invalid_question_and_shape_errors_come_from_the_wire_rules():
    one_option = _choice_record("card_arrival")
    one_option["questions"]["intent"]["criteria"] = {"card_arrival": None}
    messages = [str(e) for e in validate_records([one_option, {"state": 3}, "not a record"]).errors]
    assert messages == [
        "record 0, question 'intent': a choice needs 2 to 255 options, got 1",
        "record 1: field 'questions' missing; a record needs state, questions, labels",
        "record 1: field 'labels' missing; a record needs state, questions, labels",
        "record 1: state must be a string, object, array or LangChain messages, got int",
        "record 2: a record must be an object, got str",
    ]


def test_report_dict_and_table_show_balance():
    report = validate_records([_choice_record("card_arrival"), _choice_record("nope")])
    as_dict = report.to_dict()
    assert as_dict["n_records"] == 2 and as_dict["n_invalid"] == 1
    assert as_dict["balance"] == {"demo": {"intent": {"card_arrival": 1}}}
    table = report.format_balance()
    assert "demo" in table and "card_arrival=1 (100.0%)" in table


def test_cli_validate_prints_errors_and_balance_and_fails_on_invalid(tmp_path, capsys):
    from clef_agents.cli import main

    good = tmp_path / "good.jsonl"
    write_records(good, [_choice_record("card_arrival"), _choice_record("lost_card")])
    assert main(["data", "validate", str(good)]) == 0
    out = capsys.readouterr().out
    assert "2 records, 0 invalid" in out and "card_arrival=1 (50.0%)" in out

    bad = tmp_path / "bad.jsonl"
    write_records(bad, [_choice_record("card_arrival"), _choice_record("stolen")])
    assert main(["data", "validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "2 records, 1 invalid" in out
    assert "record 1, question 'intent': label 'stolen' is not legal here; allowed: card_arrival, lost_card" in out
