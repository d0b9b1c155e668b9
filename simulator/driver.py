"""Drives an :class:`~simulator.engine.Engine` in real time on an asyncio loop.

Simulated time is ``(clock() - origin) * time_scale``; a wait of ``d`` simulated seconds really sleeps
``d / time_scale`` seconds, so latency a client measures is the model's latency divided by the scale.

:meth:`EngineDriver.admit` queues a request and returns once the engine has admitted it (cancellation
aborts it); :meth:`EngineDriver.submit` is its first half, for callers that answer before admission.
:meth:`EngineDriver.pace` then yields how many tokens became due at each wake-up: normally
one per inter-token gap, several when the process fell behind (the caller writes them in one go, so an
overloaded process batches writes instead of drifting). Every admitted sequence must end with
:meth:`EngineDriver.finish` or :meth:`EngineDriver.abort`; both reschedule the queue. After every
engine step the KV events the engine recorded (if any) go to ``publish`` as one batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence

from simulator.engine import Engine, Seq
from simulator.kv_events import KVEvent

__all__ = ["EngineDriver", "SimClock"]


class SimClock:
    """Simulated seconds since construction, advancing ``scale`` times faster than ``time_fn``."""

    __slots__ = ("_origin", "_time", "scale")

    def __init__(self, scale: float = 1.0, time_fn: Callable[[], float] = time.monotonic) -> None:
        self.scale = scale
        self._time = time_fn
        self._origin = time_fn()

    def now(self) -> float:
        return (self._time() - self._origin) * self.scale

    async def sleep(self, sim_seconds: float) -> None:
        if sim_seconds > 0:
            await asyncio.sleep(sim_seconds / self.scale)


class EngineDriver:
    """Owns the asyncio side of one engine: admission futures and token pacing."""

    __slots__ = ("clock", "engine", "inflight", "publish")

    def __init__(
        self, engine: Engine, clock: SimClock, publish: Callable[[list[KVEvent]], None] | None = None
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.inflight: set[Seq] = set()
        self.publish = publish  # receives each batch of KV events the engine recorded

    def _kick(self) -> None:
        self.engine.schedule(self.clock.now())
        self.flush_events()

    def flush_events(self) -> None:
        events = self.engine.kv.drain_events()
        if events and self.publish is not None:
            self.publish(events)

    def submit(
        self, request_id: str, prompt_ids: Sequence[int], output_tokens: int, lora: str | None
    ) -> tuple[Seq, asyncio.Future[None]]:
        """Queue a request now; the future resolves on admission. Raises the engine's refusals."""
        seq = self.engine.submit(request_id, prompt_ids, output_tokens, self.clock.now(), lora)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_admit(_: Seq) -> None:
            if not fut.done():
                fut.set_result(None)

        seq.on_admit = on_admit
        self.inflight.add(seq)
        self._kick()
        return seq, fut

    async def admit(
        self, request_id: str, prompt_ids: Sequence[int], output_tokens: int, lora: str | None
    ) -> Seq:
        """Submit and wait until admitted; raises the engine's errors (queue full, too large)."""
        seq, admitted = self.submit(request_id, prompt_ids, output_tokens, lora)
        try:
            await admitted
        except BaseException:
            self.abort(seq)
            raise
        return seq

    async def wait_first_token(self, seq: Seq) -> None:
        await self.clock.sleep(seq.first_token_at - self.clock.now())

    async def pace(self, seq: Seq) -> AsyncIterator[int]:
        """Yield counts of newly due tokens until ``seq.output_tokens`` have been yielded."""
        clock, engine = self.clock, self.engine
        total = seq.output_tokens
        due = seq.first_token_at
        done = 0
        while done < total:
            now = clock.now()
            if due > now:
                await asyncio.sleep((due - now) / clock.scale)
                now = max(clock.now(), due)  # loop timers may fire a hair early
            batch = 0
            while done < total and due <= now:
                done += 1
                batch += 1
                if done < total:
                    due += engine.inter_token()
            yield batch

    def decode_time(self, seq: Seq) -> float:
        """Total decode time (simulated) for a non-streamed request, drawn at its first token."""
        return sum(self.engine.inter_token() for _ in range(max(seq.output_tokens - 1, 0)))

    def finish(self, seq: Seq, finish_reason: str, generated: int) -> None:
        self.inflight.discard(seq)
        self.engine.finish(seq, self.clock.now(), finish_reason, generated)
        self._kick()

    def abort(self, seq: Seq, generated: int = 0) -> None:
        self.inflight.discard(seq)
        self.engine.abort(seq, self.clock.now(), generated)
        self._kick()

    def abort_all(self) -> None:
        for seq in list(self.inflight):
            self.abort(seq)
