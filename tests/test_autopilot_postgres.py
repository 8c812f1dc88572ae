"""Two replicas share one PostgreSQL store (a real local server, started here): both write labels, one learns,
and the other serves the version it certified. Skips, with the reason, where no server can be started."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from clef_agents.autopilot import Autopilot, LabelStore

QUESTION = {"type": "noul", "instructions": "Is this about money?"}
MONEY = ["invoice", "refund", "charge", "payment", "price"]
OTHER = ["crash", "login", "error", "bug", "screen"]


def _postgres_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    return None


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    pytest.importorskip("psycopg", reason="psycopg is not installed (the postgres extra)")
    initdb, pg_ctl = _postgres_bin("initdb"), _postgres_bin("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    folder = tmp_path_factory.mktemp("pg")
    run_as: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        os.chmod(folder, 0o777)
        for parent in folder.parents:
            if parent == Path("/"):
                break
            os.chmod(parent, os.stat(parent).st_mode | 0o011)
        shutil.chown(folder, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    init = subprocess.run(
        [*run_as, initdb, "-D", str(data), "-U", "clef", "--auth=trust"], capture_output=True, text=True
    )
    if init.returncode != 0:
        pytest.skip(f"initdb failed: {init.stderr.strip()[-300:]}")
    started = subprocess.run(
        [
            *run_as,
            pg_ctl,
            "-D",
            str(data),
            "-l",
            str(folder / "log"),
            "-w",
            "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1",
            "start",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if started.returncode != 0:
        pytest.skip(f"the PostgreSQL server did not start: {started.stderr.strip()[-300:]}")
    try:
        yield f"postgresql://clef@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=60)


def texts(n: int, seed: int) -> list[tuple[str, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        money = bool(rng.integers(2))
        words = rng.choice(MONEY if money else OTHER, 2)
        out.append(
            (" ".join([*words, *(f"w{int(x)}" for x in rng.integers(0, 200, 4)), f"#{seed}-{i}"]), 0 if money else 1)
        )
    return out


def test_two_replicas_share_labels_and_the_learners_certified_version(postgres):
    learner = Autopilot(postgres, background=False, embeddings=False)
    replica = Autopilot(LabelStore(postgres), background=False, embeddings=False, learn=False, refresh_seconds=0.0)
    assert learner.store.dialect == "postgresql" and "clef@" not in repr(learner.store)
    # both replicas take traffic; each teacher answer lands in the shared store
    for i, (text, label) in enumerate(texts(700, seed=0)):
        pilot = learner if i % 2 else replica
        decision = pilot.decide("g", "money", QUESTION, text, [0.5, 0.5])
        if decision.lane == "teacher":
            pilot.record_label(decision.item_key, label, "llm")
    key = learner.store.questions()[0]["question_key"]
    counts = learner.store.counts(key)
    assert counts["items"] == 700 and sum(counts["labels"].values()) > 300
    versions = learner.store.versions(key)
    assert versions, "the learning replica fits on every replica's labels"
    certified = [v for v in versions if v.certified]
    assert certified
    # the replica that does not learn serves the newest certified version
    text, _ = texts(1, seed=9)[0]
    replica.decide("g", "money", QUESTION, text, [0.5, 0.5])
    assert replica.serving("g", "money", QUESTION).version == certified[-1].version
    # an item labelled through one replica is known to the other
    labelled = learner.store.labelled(key)[0]
    assert replica.decide("g", "money", QUESTION, labelled.state_text, [0.5, 0.5]).lane == "known"
