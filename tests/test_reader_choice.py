"""clef_agents.train.reader_choice: which knobs the reader's probe keeps, and where the report goes."""

from __future__ import annotations

import pytest

from clef_agents.train.reader_choice import kept_steps, main, report_stem


def folds(**criteria: float) -> list[dict]:
    """Two folds whose out-of-fold criterion per step is ``criteria`` (step names with spaces as underscores)."""
    names = {
        "probe_calibration": "probe calibration",
        "prior": "+ prior correction",
        "mixing": "+ head mixing",
        "calibration_mixing": "probe calibration + head mixing",
    }
    check = {names[k]: {"criterion": v} for k, v in criteria.items()}
    return [{"check": check}, {"check": check}]


def test_a_knob_is_kept_only_when_it_raises_the_out_of_fold_criterion():
    assert kept_steps(folds(probe_calibration=0.6, prior=0.62, mixing=0.65, calibration_mixing=0.5)) == (True, True)
    assert kept_steps(folds(probe_calibration=0.6, prior=0.62, mixing=0.61, calibration_mixing=0.7)) == (True, False)
    # without the correction, mixing is judged against the calibration alone
    assert kept_steps(folds(probe_calibration=0.6, prior=0.6, mixing=0.9, calibration_mixing=0.61)) == (False, True)


def test_one_fold_that_does_not_improve_keeps_nothing():
    one, other = folds(probe_calibration=0.6, prior=0.62, mixing=0.65, calibration_mixing=0.66)
    other = {
        "check": {
            **other["check"],
            "+ prior correction": {"criterion": 0.55},
            "probe calibration + head mixing": {"criterion": 0.5},
        }
    }
    assert kept_steps([one, other]) == (False, False)


def test_the_report_sits_beside_the_written_reader_unless_named():
    assert report_stem("runs/reader_probe", None).as_posix() == "runs/reader_probe"
    assert report_stem("runs/reader_probe", "reports/probe").as_posix() == "reports/probe"
    assert report_stem(None, None).as_posix() == "reader_probe"


def test_the_command_needs_candidate_readers():
    with pytest.raises(SystemExit):
        main(["--model", "mini"])
