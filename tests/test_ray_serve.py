"""Ray Serve: two replicas of the System One app on a local Ray instance (CPU), fake model.

Skipped when ray[serve] is not installed (`pip install -e ".[ray]"`). Starting Ray takes ~10 s on
two cores (over a minute when the machine is busy), so everything is checked against one deployment.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install -e '.[ray]')")

from clef_agents.serve.app import ServerSettings  # noqa: E402
from clef_agents.serve.local import free_port  # noqa: E402
from clef_agents.serve.remote import RemoteDecisionModel  # noqa: E402
from clef_agents.testing import FakeDecisionModel  # noqa: E402

pytestmark = pytest.mark.timeout(300)  # ~15 s on an idle 2-core machine; Ray starts slowly when it is busy

QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Does the customer want money back?"},
    "team": {
        "type": "choice",
        "instructions": "Which team?",
        "criteria": {"billing": None, "tech": None, "sales": None},
    },
}


@pytest.fixture(scope="module")
def ray_url():
    from clef_agents.serve import ray_app

    settings = ServerSettings(max_batch_size=8, max_wait_ms=50, api_key="k")
    url = ray_app.start("fake", settings, port=free_port(), replicas=2, cpus_per_replica=0.5, num_cpus=2)
    try:
        yield url
    finally:
        ray_app.shutdown()


def test_two_replicas_answer_like_the_model_and_batch_concurrent_requests(ray_url: str) -> None:
    headers = {"Authorization": "Bearer k"}
    states = [f"ticket {i}: charged twice" for i in range(24)]

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=ray_url, headers=headers, timeout=60) as client:
            return await asyncio.gather(
                *(client.post("/v1/systemone", json={"state": s, "questions": QUESTIONS}) for s in states)
            )

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * len(states)
    local = FakeDecisionModel(model="fake")
    for state, response in zip(states, responses):
        expected = local.invoke({"state": state, "questions": QUESTIONS})
        assert response.json()["answers"]["team"]["probabilities"] == expected.choices["team"].probabilities

    seen: dict[str, dict] = {}
    for _ in range(20):
        stats = httpx.get(f"{ray_url}/v1/stats", headers=headers, timeout=30).json()
        seen[stats["replica"]] = stats
    assert sum(s["requests"] for s in seen.values()) <= len(states)
    assert max(s["mean_batch_size"] for s in seen.values()) > 1, seen


def test_same_validation_auth_and_client_as_the_single_server(ray_url: str) -> None:
    bad = httpx.post(
        f"{ray_url}/v1/systemone", content=b'{"state": ', headers={"Authorization": "Bearer k"}, timeout=30
    )
    no_key = httpx.post(f"{ray_url}/v1/systemone", json={"state": "x", "questions": QUESTIONS}, timeout=30)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][0] == "body"
    assert no_key.status_code == 401 and no_key.json()["detail"]["error_type"] == "authentication_error"
    with RemoteDecisionModel(base_url=ray_url, api_key="k") as remote:
        answer = remote.invoke({"state": "refund me", "questions": QUESTIONS})
    assert answer.model == "fake" and set(answer.answers) == {"refund", "team"}
