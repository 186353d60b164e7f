"""The gateway and the garbage collector: a gateway leaves the collector alone."""

import gc
import weakref

from relight.gateway import Gateway
from relight.stores.memory import InMemoryStore


async def test_garbage_left_before_a_gateway_starts_is_collected_while_it_serves() -> None:
    """A gateway leaves the collector alone. A cycle that died before it started (an agent's HTTP client that
    was never closed, say) is collected, and finalized, while the gateway serves, its loop running. A gateway
    that gc.freeze()d its process at start (e6b44e8) handed such garbage back only when it stopped: it was
    finalized later, inside whatever ran then, and a client's sockets were reported unclosed in later tests."""
    store = InMemoryStore()
    async with Gateway(store, ["http://127.0.0.1:9/v1"]):  # the process has had a gateway before
        pass
    finalized: list[bool] = []

    class Cycle:
        def __init__(self) -> None:
            self.itself = self

    gc.disable()  # no automatic collection before the gateway starts: the cycle is still garbage then
    try:
        cycle = Cycle()
        weakref.finalize(cycle, finalized.append, True)
        del cycle
        async with Gateway(store, ["http://127.0.0.1:9/v1"]):
            gc.collect()
            assert finalized == [True]
    finally:
        gc.enable()
