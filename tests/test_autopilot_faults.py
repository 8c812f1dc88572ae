"""kill -9 during a replay (mid-decision, mid-retrain, mid-swap): no label is lost, no teacher is asked again
about an item it already labelled, and every version that can serve is a whole, certified one.

Each kill lands after a random number of new teacher calls, so it falls mid-stream however fast the machine is.
The benchmark's 20-kill run is this test with ``CLEF_AUTOPILOT_KILLS=20`` (bench/autopilot/README.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from clef_agents.autopilot import Autopilot, LabelStore, Learner

KILLS = int(os.environ.get("CLEF_AUTOPILOT_KILLS", "3"))
QUESTION = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "tech": None, "sales": None}}
WORDS = (["invoice", "refund", "charge"], ["crash", "error", "login"], ["price", "demo", "quote"])


def write_records(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    with path.open("w") as fh:
        for i in range(n):
            team = int(rng.integers(3))
            text = " ".join([*rng.choice(WORDS[team], 2), *(f"w{int(x)}" for x in rng.integers(0, 300, 5)), f"#{i}"])
            label = list(QUESTION["criteria"])[team]
            fh.write(json.dumps({"state": text, "questions": {"team": QUESTION}, "labels": {"team": label}}) + "\n")


def replay_command(records: Path, store: Path, log: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "clef_agents.cli",
        "autopilot",
        "replay",
        "--records",
        str(records),
        "--store",
        str(store),
        "--model",
        "fake",
        "--no-embeddings",
        "--teacher-log",
        str(log),
        "--json",
    ]


def check_store(store_path: Path, log: Path, finished: bool) -> None:
    store = LabelStore(store_path)
    try:
        calls: dict[str, list[float]] = {}
        for line in log.read_text().splitlines() if log.exists() else []:
            key, at = line.split()
            calls.setdefault(key, []).append(float(at))
        keys = [q["question_key"] for q in store.questions()]
        labels = {i.item_key: i for key in keys for i in store.labelled(key)}
        for key, times in calls.items():
            if key in labels:  # no teacher call after the item's label was kept
                label_at = store._rows("SELECT created_at FROM labels WHERE item_key = ?", (key,))[0][0]  # noqa: SLF001
                assert max(times) <= label_at + 1e-6, f"teacher asked again about {key} after it was labelled"
            else:
                assert not finished, f"teacher answered {key} but its label was lost"
        assert set(labels) <= set(calls), "a label no teacher call gave"
        for key in keys:
            for version in store.versions(key):
                Learner.from_bytes(version.params)  # whole, never half-written
            serving = Autopilot(store, background=False, embeddings=False).serving("replay", "team", QUESTION)
            if serving.threshold is not None:
                assert any(v.version == serving.version and v.certified for v in store.versions(key))
    finally:
        store.close()


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_kill_9_during_a_replay_loses_no_label_and_repeats_no_teacher_call(tmp_path):
    records, store, log = tmp_path / "records.jsonl", tmp_path / "autopilot.sqlite", tmp_path / "teacher.log"
    write_records(records, 700)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rng = np.random.default_rng(1)
    for _ in range(KILLS):
        process = subprocess.Popen(
            replay_command(records, store, log), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        # kill after a random number of new teacher calls, however fast this machine is today
        target = _calls(log) + int(rng.integers(1, 60))
        deadline = time.monotonic() + 300
        while process.poll() is None and _calls(log) < target and time.monotonic() < deadline:
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
        process.wait()
        check_store(store, log, finished=False)
    done = subprocess.run(replay_command(records, store, log), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    check_store(store, log, finished=True)
    summary = json.loads(done.stdout)
    assert summary["items"] == 700
