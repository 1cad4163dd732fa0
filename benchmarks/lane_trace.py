"""A diagnostic trace of ours' lanes in a bench worker: `ZAEL_BENCH_LANE_TRACE=path` (JSON lines).

Loaded by benchmarks/worker.py itself (benchmarks.run clears PYTHONPATH for its workers).
Records every send's outcome per item, each failure the lanes act on, and each backoff pause
with the function that took it: enough to see where an item's lane spent a run.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from typing import Any

_T0 = time.perf_counter()


def install(path: str) -> None:
    from zae_limiter.acquire import deadlines, lane_failures, lanes

    out = open(path, "a", buffering=1)  # noqa: SIM115 - the worker's life

    def emit(**fields: Any) -> None:
        fields["t"] = round(time.perf_counter() - _T0, 4)
        out.write(json.dumps(fields, default=str) + "\n")

    def key_of(lane: Any) -> str:
        return f"{lane.key[1]}/{lane.key[2]}/{lane.key[3]}"

    def counts(batch: Any) -> dict[str, int]:
        calls = batch.calls
        return {
            "n": len(calls),
            "settle": sum(1 for c in calls if c.settle),
            "done": sum(1 for c in calls if c.future.done()),
            "lost": batch.lost,
        }

    send = lanes._Lane._send

    @functools.wraps(send)
    async def traced_send(self: Any, batch: Any) -> Any:
        started = time.perf_counter()
        try:
            image = await send(self, batch)
        except BaseException as exc:
            emit(
                e="send",
                k=key_of(self),
                ms=round(1000 * (time.perf_counter() - started), 1),
                err=type(exc).__name__,
                thr=getattr(exc, "throttled", None),
                **counts(batch),
            )
            raise
        emit(
            e="send",
            k=key_of(self),
            ms=round(1000 * (time.perf_counter() - started), 1),
            err=None,
            **counts(batch),
        )
        return image

    lanes._Lane._send = traced_send  # type: ignore[method-assign]

    for name in ("_decide", "_unavailable", "_fence", "_condition_failed"):
        original = getattr(lane_failures.Failures, name)

        def wrap(original: Any, name: str) -> Any:
            @functools.wraps(original)
            async def traced(self: Any, batch: Any, *args: Any) -> Any:
                started = time.perf_counter()
                emit(e=name, k=key_of(self), **counts(batch))
                try:
                    return await original(self, batch, *args)
                finally:
                    emit(
                        e=name + ".end",
                        k=key_of(self),
                        ms=round(1000 * (time.perf_counter() - started), 1),
                    )

            return traced

        setattr(lane_failures.Failures, name, wrap(original, name))

    pause = deadlines.Backoff.pause

    @functools.wraps(pause)
    async def traced_pause(self: Any, seconds: float) -> None:
        caller = sys._getframe(1)
        lane = caller.f_locals.get("self")
        emit(
            e="pause",
            s=round(seconds, 3),
            by=caller.f_code.co_name,
            k=key_of(lane) if hasattr(lane, "key") else None,
        )
        await pause(self, seconds)

    deadlines.Backoff.pause = traced_pause  # type: ignore[method-assign]

    from zae_limiter.acquire import load as load_module

    throttled = load_module.Load.throttled

    def traced_throttled(self: Any, now: float | None = None) -> None:
        before = self.rate
        throttled(self, now)
        accepted, throttles = self._last_second(self.clock() if now is None else now)
        emit(
            e="throttled",
            acc=round(accepted, 1),
            thr=round(throttles, 1),
            since=self._throttling_from,
            rate=self.rate,
            was=before,
        )

    load_module.Load.throttled = traced_throttled  # type: ignore[method-assign]
    from zae_limiter.acquire import admission as admission_module
    from zae_limiter.acquire import lane_turns, planning

    when_shed = admission_module.Admission._refusal_when_shed

    def traced_when_shed(self: Any, targets: Any, now: int) -> Any:
        refusal = when_shed(self, targets, now)
        emit(
            e="shed" if refusal is None else "shed429",
            ts=[
                (t.entity_id, t.resource, now - t.seen_at, planning.refused_on_image(t, now))
                for t in targets
            ],
        )
        return refusal

    admission_module.Admission._refusal_when_shed = traced_when_shed  # type: ignore[method-assign]
    lane_shed = lane_turns._shed

    def traced_lane_shed(load: Any, calls: Any, error: Any) -> None:
        emit(e="lane_shed", n=len(calls), k=[c.target.entity_id for c in calls][:3])
        lane_shed(load, calls, error)

    lane_turns._shed = traced_lane_shed
    rejection = admission_module.Admission.rejection

    def traced_rejection(self: Any, targets: Any, now: int) -> Any:
        emit(e="429", ts=[(t.entity_id, now - t.seen_at, t.read_now) for t in targets])
        return rejection(self, targets, now)

    admission_module.Admission.rejection = traced_rejection  # type: ignore[method-assign]
    emit(e="installed")
