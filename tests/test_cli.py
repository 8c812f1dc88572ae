"""The ``clef-agents`` command line as users meet it: the real parser (``clef_agents.cli.main``) and
the real entry point (a subprocess), errors as one line, and one meaning of every ``--model`` spec."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import clef_agents
from clef_agents.cli import build_parser, main
from clef_agents.loading import load_model, spec_kind
from clef_agents.serve.app import create_app
from clef_agents.serve.local import free_port, serve_in_thread

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``clef-agents ARGS`` in a fresh interpreter, as a shell user runs it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "clef_agents.cli", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def decide_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["decide", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


# --------------------------------------------------------------------------- the parser itself


def test_version_flag_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"clef-agents {clef_agents.__version__}"


def _options_without_help(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += _options_without_help(sub, f"{path} {name}")
        elif not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_of_every_command_has_help_text():
    assert _options_without_help(build_parser(), "clef-agents") == []


# --------------------------------------------------------------------------- errors are one line


def test_a_broken_yaml_file_is_one_error_line_naming_the_file_and_line(tmp_path):
    bad = tmp_path / "questions.yaml"
    bad.write_text("spam:\n  type: noul\n  instructions: [unclosed\n")
    result = run_cli("decide", "--model", "fake", "--state", "hi", "--questions", str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clef-agents decide: error: ")
    assert str(bad) in lines[0] and "not valid YAML at line" in lines[0]


def test_an_unreachable_model_url_is_one_error_line_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = run_cli("decide", "--model", url, "--state", "hi", "--noul", "q=Is it?")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot reach the System One server at {url}" in lines[0]


def test_traceback_flag_shows_the_full_trace():
    result = run_cli("--traceback", "decide", "--model", "fake", "--state", "hi", "--noul", "q=x", "--noul", "q=y")
    assert result.returncode == 1 and "Traceback (most recent call last)" in result.stderr


def test_a_missing_checkpoint_folder_names_it_and_the_allowed_specs(tmp_path, capsys):
    assert main(["decide", "--model", str(tmp_path / "nowhere"), "--state", "hi", "--noul", "q=Is it?"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "nowhere") in err and "'fake'" in err and "http(s)://" in err


# --------------------------------------------------------------------------- questions


def test_repeated_inline_flags_keep_every_question(capsys):
    out = decide_json(
        capsys,
        "--model",
        "fake",
        "--state",
        "hi",
        "--noul",
        "a=Is it a?",
        "--noul",
        "b=Is it b?",
        "--choice",
        "c=x,y",
        "--choice",
        "d=u,v",
        "--score",
        "e=lo|hi",
        "--score",
        "f=lo|mid|hi",
    )
    assert sorted(out["answers"]) == ["a", "b", "c", "d", "e", "f"]


@pytest.mark.parametrize(
    "flags",
    [
        ["--noul", "a=Is it?", "--noul", "a=Is it really?"],
        ["--noul", "a=Is it?", "--choice", "a=x,y"],
    ],
)
def test_a_question_id_given_twice_is_an_error(flags, capsys):
    assert main(["decide", "--model", "fake", "--state", "hi", *flags]) == 2
    assert "question id 'a' is given twice" in capsys.readouterr().err


def test_a_question_id_in_the_file_and_inline_is_an_error(tmp_path, capsys):
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"a": {"type": "noul", "instructions": "Is it?"}}))
    assert main(["decide", "--model", "fake", "--state", "hi", "--questions", str(path), "--noul", "a=Again?"]) == 2
    assert f"question id 'a' is given both in {path}" in capsys.readouterr().err


def test_no_questions_at_all_is_an_error(capsys):
    assert main(["decide", "--model", "fake", "--state", "hi"]) == 2
    assert "no questions" in capsys.readouterr().err


def test_the_shipped_questions_file_answers_the_readme_example(capsys, monkeypatch):
    """README: echo "free prize, click now" | clef-agents decide --questions examples/questions.yaml --json"""
    monkeypatch.setattr(sys, "stdin", io.StringIO("free prize, click now\n"))
    out = decide_json(capsys, "--model", "fake", "--questions", str(ROOT / "examples" / "questions.yaml"))
    assert {qid: answer["type"] for qid, answer in out["answers"].items()} == {
        "spam": "noul",
        "team": "choice",
        "urgency": "score",
    }
    assert set(out["answers"]["team"]["probabilities"]) == {"billing", "technical", "sales", "other"}
    assert len(out["answers"]["urgency"]["probabilities"]) == 4


def test_yaml_keys_are_read_as_written(tmp_path, capsys):
    """YAML would read ``true:``/``no:``/``1:`` keys as booleans and numbers; a questions file means names."""
    path = tmp_path / "q.yaml"
    path.write_text(
        "spam:\n  type: noul\n  instructions: Is it spam?\n  criteria: {true: an advert, false: a friend}\n"
        "agree:\n  type: choice\n  instructions: Does the user agree?\n  criteria: {yes: null, no: null, 1: maybe}\n"
    )
    out = decide_json(capsys, "--model", "fake", "--state", "free prize", "--questions", str(path))
    assert out["answers"]["spam"]["type"] == "noul"
    assert set(out["answers"]["agree"]["probabilities"]) == {"yes", "no", "1"}


# --------------------------------------------------------------------------- the table


def test_the_table_gives_one_number_per_answer_the_probability_of_the_answer_shown(capsys):
    """``p(answer)`` is the probability of the answer in its row, and the same number is in the distribution."""
    args = [
        "decide",
        "--model",
        "fake",
        "--state",
        "production is down!",
        "--noul",
        "urgent=Is this urgent?",
        "--choice",
        "team=billing,cards,fraud",
        "--score",
        "anger=calm|annoyed|furious",
    ]
    assert main([*args, "--json"]) == 0
    answers = json.loads(capsys.readouterr().out)["answers"]
    assert main(args) == 0
    header, _, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["question", "answer", "p(answer)"]
    table = {row.split()[0]: row for row in rows}
    p_yes = answers["urgent"]["noul"]
    urgent = "yes" if p_yes >= 0.5 else "no"
    assert table["urgent"].split()[1:3] == [urgent, f"{max(p_yes, 1 - p_yes):.3f}"]
    assert f"yes={p_yes:.3f}, no={1 - p_yes:.3f}" in table["urgent"]
    team = answers["team"]["choice"]
    assert table["team"].split()[1:4] == [
        team,
        f"{answers['team']['probabilities'][team]:.3f}",
        f"{team}={answers['team']['probabilities'][team]:.3f},",
    ]
    levels = answers["anger"]["probabilities"]
    level = max(levels, key=levels.get)
    assert table["anger"].split()[1:5] == [level, "(score", f"{answers['anger']['score']:.2f})", f"{levels[level]:.3f}"]


# --------------------------------------------------------------------------- the state, CLI and server alike


def test_an_empty_state_is_answered_by_the_cli_as_by_the_server(capsys):
    local = decide_json(capsys, "--model", "fake", "--state", "", "--noul", "q=Is it empty?")
    with serve_in_thread(create_app(loader=lambda: load_model("fake"))) as url:
        remote = decide_json(capsys, "--model", url, "--state", "", "--noul", "q=Is it empty?")
    assert local["model"] == remote["model"] == "fake"
    assert local["answers"] == remote["answers"]


def test_an_empty_stdin_is_an_empty_state():
    result = run_cli("decide", "--model", "fake", "--json", "--noul", "q=Is it empty?", stdin="")
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)["answers"]) == {"q"}
    assert "note: the state is empty" in result.stderr


def test_an_invalid_state_json_is_one_error_line(capsys):
    assert main(["decide", "--model", "fake", "--state", "{not json", "--state-json", "--noul", "q=x"]) == 2
    assert "--state-json: the state is not valid JSON" in capsys.readouterr().err


# --------------------------------------------------------------------------- one loader, one meaning


def test_load_model_is_exported_lazily_from_the_package():
    code = "import sys, clef_agents; m = clef_agents.load_model('fake'); print(m.model, 'torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out == ["fake", "False"]


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("fake", "fake"),
        ("fake-keywords", "fake-keywords"),
        ("http://127.0.0.1:8000", "remote"),
        ("https://decide.example.com", "remote"),
        ("backbone:minilm", "backbone"),
        ("mini", "checkpoint"),
        ("runs/mini/final", "checkpoint"),
    ],
)
def test_each_spec_has_one_kind(spec, kind):
    assert spec_kind(spec) == kind


@pytest.mark.parametrize("spec", ["", "backbone:"])
def test_an_empty_spec_is_refused(spec):
    with pytest.raises(ValueError):
        spec_kind(spec)


def test_fake_means_the_same_model_in_decide_serve_and_the_ready_graphs(capsys, monkeypatch):
    from clef_agents.graph.ready import load_decision_model
    from clef_agents.serve.models import load_model as serve_loader

    state, question = "refund my invoice please", {"type": "noul", "instructions": "Is money involved?"}
    by_decide = decide_json(capsys, "--model", "fake", "--state", state, "--noul", f"q={question['instructions']}")
    monkeypatch.setenv("CLEF_AGENTS_MODEL", "fake")
    request = {"state": state, "questions": {"q": question}}
    for model in (serve_loader("fake"), load_decision_model()):
        response = model.invoke(request)
        assert response.model == "fake"
        assert response.answers["q"].noul == pytest.approx(by_decide["answers"]["q"]["noul"])


def test_fake_keywords_is_the_ready_graphs_keyword_model_everywhere(capsys):
    from clef_agents.graph.ready import load_decision_model

    out = decide_json(
        capsys,
        "--model",
        "fake-keywords",
        "--state",
        "refund my invoice",
        "--choice",
        "department=billing,technical,sales,other",
    )
    assert out["model"] == "fake-keywords" and out["answers"]["department"]["choice"] == "billing"
    assert load_decision_model("fake-keywords").model == "fake-keywords"
