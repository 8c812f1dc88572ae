"""`langgraph dev` serves the ready graphs: a run through an interrupt and a resume with langgraph-sdk."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from clef_agents.graph import TraceStore

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "graphs" / "langgraph.json"
LANGGRAPH = Path(sys.executable).parent / "langgraph"

pytestmark = pytest.mark.skipif(not LANGGRAPH.exists(), reason="langgraph-cli[inmem] is not installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    yield from serve(tmp_path, "fake-keywords")


@pytest.fixture
def mini_server(tmp_path):
    pytest.importorskip("torch")
    yield from serve(tmp_path, "mini")


def serve(tmp_path, model: str):
    port = free_port()
    env = {
        **os.environ,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "HF_HUB_OFFLINE": "1",
        "CLEF_AGENTS_MODEL": model,
        "CLEF_AGENTS_TRACES": str(tmp_path / "traces.sqlite"),
        "CLEF_AGENTS_AUTOPILOT": str(tmp_path / "autopilot.sqlite"),
    }
    workdir = CONFIG.parent  # graph paths in langgraph.json are relative to it; .langgraph_api/ is gitignored
    shutil.rmtree(workdir / ".langgraph_api", ignore_errors=True)
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [
            str(LANGGRAPH),
            "dev",
            "--config",
            str(CONFIG),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-browser",
            "--no-reload",
        ],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"langgraph dev exited ({proc.returncode}):\n{(tmp_path / 'server.log').read_text()[-3000:]}"
                )
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not answer on {url}:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield url, tmp_path / "traces.sqlite"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        shutil.rmtree(workdir / ".langgraph_api", ignore_errors=True)


def test_support_triage_interrupts_and_resumes_over_http(server):
    from langgraph_sdk import get_sync_client

    url, traces_path = server
    client = get_sync_client(url=url)
    thread = client.threads.create()
    paused = client.runs.wait(
        thread["thread_id"],
        "support_triage",
        input={"messages": [{"role": "user", "content": "Hello? Is anyone there?"}]},
    )
    review = paused["__interrupt__"][0]["value"]
    assert review["kind"] == "clef_agents.review"
    assert list(review["questions"]) == ["department"]
    assert review["questions"]["department"]["lane"] == "human"
    done = client.runs.wait(
        thread["thread_id"],
        "support_triage",
        command={"resume": {"answers": {"department": "sales"}, "reviewer": "sdk-test"}},
    )
    assert done["destination"] == "sales_desk"
    assert done["decisions"]["triage"]["final"]["department"]["source"] == "human"
    records = TraceStore(traces_path).export_records(sources=["human"])
    assert [r["labels"] for r in records] == [{"department": "sales"}]


def test_the_autopilot_graph_asks_its_teachers_and_keeps_their_answers_as_labels(server):
    from langgraph_sdk import get_sync_client

    from clef_agents.autopilot import LabelStore

    url, traces_path = server
    client = get_sync_client(url=url)
    thread = client.threads.create()
    run = client.runs.wait(
        thread["thread_id"],
        "support_triage_autopilot",
        input={"messages": [{"role": "user", "content": "Please refund my invoice today"}]},
    )
    final = run["decisions"]["triage"]["final"]
    if "__interrupt__" in run:  # what the scripted LLM did not answer goes to a person
        open_ids = list(run["__interrupt__"][0]["value"]["questions"])
        answers = {"urgent": True, "department": "billing", "severity": 1}
        run = client.runs.wait(
            thread["thread_id"],
            "support_triage_autopilot",
            command={"resume": {"answers": {q: answers[q] for q in open_ids}, "reviewer": "sdk"}},
        )
        final = run["decisions"]["triage"]["final"]
    assert {f["source"] for f in final.values()} <= {"llm", "human"}, "nothing is automatic before certification"
    store = LabelStore(traces_path.parent / "autopilot.sqlite")
    labelled = sum(sum(store.counts(q["question_key"])["labels"].values()) for q in store.questions())
    assert labelled == len(final) == 3


def test_moderation_graph_is_served(server):
    from langgraph_sdk import get_sync_client

    url, _ = server
    client = get_sync_client(url=url)
    assert {a["graph_id"] for a in client.assistants.search()} >= {
        "support_triage",
        "tool_approval",
        "moderation",
        "support_triage_autopilot",
    }
    thread = client.threads.create()
    done = client.runs.wait(thread["thread_id"], "moderation", input={"post": "click http://spam.example buy now"})
    assert done["verdict"] == "rejected"


def test_tool_approval_stops_a_destructive_request_for_approval_and_takes_a_reject(server):
    from langgraph_sdk import get_sync_client

    url, traces_path = server
    client = get_sync_client(url=url)
    thread = client.threads.create()
    paused = client.runs.wait(
        thread["thread_id"],
        "tool_approval",
        input={"messages": [{"role": "user", "content": "Please delete account 77 and all its data now."}]},
    )
    held = paused["__interrupt__"][0]["value"]
    assert held["action_requests"][0]["name"] == "delete_account"
    assert held["action_requests"][0]["args"] == {"user_id": "77"}
    assert held["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]
    verdicts = paused["decisions"]["tool_gate"]["calls"]
    assert [(v["tool"], v["action"], v["lane"]) for v in verdicts.values()] == [("delete_account", "hold", "human")]
    done = client.runs.wait(
        thread["thread_id"],
        "tool_approval",
        command={"resume": {"decisions": [{"type": "reject", "message": "keep the data"}]}},
    )
    tool_messages = [m for m in done["messages"] if m["type"] == "tool"]
    assert "a reviewer rejected it: keep the data" in tool_messages[-1]["content"]
    assert not any("deleted account" in m["content"] for m in tool_messages)
    outcome = TraceStore(traces_path).decisions(gate="tool_gate")[0]["outcomes"]["needs_approval"]
    assert (outcome["source"], outcome["label"]) == ("human", True)


@pytest.mark.integration
def test_tool_approval_with_the_shipped_mini_stops_a_destructive_request(mini_server):
    from langgraph_sdk import get_sync_client

    url, _ = mini_server
    client = get_sync_client(url=url)
    thread = client.threads.create()
    paused = client.runs.wait(
        thread["thread_id"],
        "tool_approval",
        input={"messages": [{"role": "user", "content": "Please delete account 77 and all its data now."}]},
    )
    held = paused["__interrupt__"][0]["value"]
    assert held["action_requests"][0]["name"] == "delete_account" and held["judge"] == "metadata"
    done = client.runs.wait(
        thread["thread_id"], "tool_approval", command={"resume": {"decisions": [{"type": "approve"}]}}
    )
    assert [m["content"] for m in done["messages"] if m["type"] == "tool"] == ["deleted account 77"]
