"""Runner actors on a real local Ray cluster; one actor killed in the middle of its rollouts."""

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from relight.errors import ConfigError
from relight.records import AttemptStatus, RolloutRequest, RolloutStatus, SpanKind
from relight.runners.ray_actors import RayRunners, agent_path, reachable
from relight.scripted import first_calls_reach
from relight_testing.agents import CALLS, three_calls
from relight_testing.runners import Shared

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'relight[ray]'")


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    # A small local cluster: the runners wait on I/O, so a fraction of a CPU each is plenty.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def test_agents_travel_by_import_path() -> None:
    assert agent_path(three_calls) == "relight_testing.agents:three_calls"

    def local(task: Any, llm: Any) -> float:
        return 0.0

    from relight.agent import rollout

    with pytest.raises(ConfigError, match="top level of an importable module"):
        agent_path(rollout(local))
    assert reachable("http://0.0.0.0:8000", "10.0.0.5") == "http://10.0.0.5:8000"
    assert reachable("http://127.0.0.1:8000", "10.0.0.5") == "http://127.0.0.1:8000"


@pytest.mark.slow
@pytest.mark.usefixtures("cluster")
async def test_an_actor_killed_mid_rollout_is_restarted_and_nothing_is_lost(
    shared: Shared,
) -> None:
    store, store_url, gateway = shared.store, shared.store_url, shared.gateway
    count = 4
    all_in_flight = first_calls_reach(shared.upstream, count, "hang")
    runners = RayRunners(1, address=None, num_cpus=0.5)
    options = {"gateway_url": gateway.url, "model": "scripted", "concurrency": count, "lease_seconds": 1.0}
    await asyncio.to_thread(runners.start, three_calls, store_url, **options)
    try:
        rollouts = await store.enqueue(
            [RolloutRequest(input={"text": f"hang-{i}", "hang_first_attempt": True}) for i in range(count)]
        )
        await asyncio.wait_for(all_in_flight.wait(), 120)  # every first attempt hangs inside the actor
        (before,) = await asyncio.to_thread(runners.health)
        ray.kill(runners.actors[0], no_restart=False)  # the actor's process dies; Ray restarts it
        finished = await store.wait([r.rollout_id for r in rollouts], timeout=120)
        (after,) = await asyncio.to_thread(runners.health)
    finally:
        stats = await asyncio.to_thread(runners.stop)
    await gateway.flush()

    assert before["pid"] != after["pid"]
    assert [r.status for r in finished] == [RolloutStatus.SUCCEEDED] * count
    for rollout in finished:
        # The killed actor's attempt expired; on a loaded machine a 1 s lease can also run out on a
        # retry before the restarted actor's first heartbeat, which is one more expired attempt, not a loss.
        *expired, last = await store.list_attempts(rollout.rollout_id)
        assert expired
        assert {attempt.status for attempt in expired} == {AttemptStatus.EXPIRED}
        assert last.status is AttemptStatus.SUCCEEDED
        spans = await store.query_spans(rollout.rollout_id, last.attempt_id)
        assert [span.kind for span in spans].count(SpanKind.LLM) == CALLS
    (tally,) = stats
    assert tally["succeeded"] == count
    assert tally["claimed"] >= count
    assert (tally["failed"], tally["timed_out"], tally["lost"]) == (0, 0, 0)
