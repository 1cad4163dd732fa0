"""A writer's load on its table: bucket write requests in flight, their pace, their round trips.

See docs/on-unavailable.md "Overload". One `Load` per opened repository (its namespace scopes
share it, as they share the table), on the running event loop's clock (`clock`, seconds: the
clock the callers' deadlines run on, `asyncio.timeout`, so a loop with virtual time, as the
simulation's, moves both; tests may give it their own). Every bucket write a lane sends
takes a request slot first and gives it back with the answer (`ended`), which also measures its
round trip. Requests that wait, wait here, in order, where waiting costs nothing: requests
queued at the table make every caller late, and a debit that lands after its caller's deadline
is written and then refunded.

- *In flight*: at most `limit` requests. The limit grows by one per round trip of answers in
  time and is cut to 70 % of what is in flight (at most once a second) while the smoothed round
  trip is above `slow_ms` and twice the fastest answer of the last `BASE_SPAN_S` or more: the
  table's queue grew, not its own latency (one slow answer, a scheduling hiccup, cuts nothing).
- *Pace*: once the table has throttled at least half of what it was sent for a second without
  a pause (`THROTTLE_GAP_S`; the transport tells `throttled` of every throttled attempt; a
  throttle now and then is retried there and changes nothing here), calls take turns (`turn`):
  a call's writes go out together at its turn, spaced to `rate` writes a second, set as
  botocore's adaptive retry mode sets its rate (`CubicCalculator`): 70 % of what the table
  accepted over the last second, at most one cut a second, grown back along a cubic, never
  above twice what it accepts; dropped once it has grown `FREE_FACTOR` times past the rate that
  throttled. A call takes turns for the writes it adds (an item with a lane already goes out
  folded into that lane's next write, which takes a turn of its own: `lane_turns`); a call
  whose turn would come too late to be decided before its deadline takes none (`turn` raises
  `Overloaded`). Exit writes and refunds take no turn of their own: they are few, and must
  never wait behind calls.

Until the table throttles or slows down, a write pays a few comparisons and counters.
`wait_ms` estimates how long new requests wait for slots: with `lane_load.wait_ms` (what waits on
each item) and the turn, the admission answers at once a call that could not be decided within
its deadline.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from botocore.retries.throttling import CubicCalculator

from .values import Overloaded, Unavailable

#: Requests in flight at first, and at most.
START_LIMIT = 64.0
MAX_LIMIT = 256.0
#: What is left of the requests in flight after a cut.
CUT = 0.7
#: A round trip's weight in the smoothed round trip, and in its smoothed deviation (as TCP's
#: retransmission timer keeps them: RFC 6298).
SMOOTHING = 0.2
VAR_SMOOTHING = 0.25
#: The fastest answer is remembered over at least this long (and at most twice).
BASE_SPAN_S = 10
#: An answer slower than this share of the default deadline may cut the limit.
SLOW_SHARE = 0.25
#: Throttles over a second that start (or cut) the pace: at least this many, and at least as
#: many as the answers the table accepted.
MIN_THROTTLES = 5
#: A pause in throttling longer than this starts the second measured before a cut again: a
#: quiet spell between two bursts (a warm-up, then the load) must not be taken as what the
#: table accepts.
THROTTLE_GAP_S = 0.5
#: The slowest pace (writes a second), and how far past the rate that throttled it is dropped.
MIN_RATE = 1.0
FREE_FACTOR = 8.0


class Measured(Protocol):
    """What a lane keeps of its requests: when the one in flight was sent, its round trip."""

    sent_at: float | None
    rtt_ms: float


def loop_time() -> float:
    """The running event loop's clock (seconds); the monotonic clock outside a loop (the one
    asyncio's own loop uses)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return time.monotonic()
    if type(loop).time is _ASYNCIO_TIME:  # asyncio's loops: read it here, a call less
        return time.monotonic()
    return loop.time()


_ASYNCIO_TIME = asyncio.BaseEventLoop.time


class Load:
    """One writer's bucket write requests to its table (see the module docstring)."""

    def __init__(
        self, slow_ms: float | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        self.clock = clock or loop_time  # seconds
        self.limit = START_LIMIT
        self.inflight = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.rtt_ms = 0.0  # smoothed round trip; 0 until one was measured
        self.rtt_var_ms = 0.0  # its smoothed deviation
        self.slow_ms = slow_ms  # None: only throttling slows the writer down
        self.rate: float | None = None  # the pace (writes a second); None: not paced
        self._next_turn = 0.0  # ms: no turn before
        # answers of the current second and the one before: [second, accepted, throttled, ...]
        self._answers = [0, 0, 0, 0, 0]
        self._cubic: CubicCalculator | None = None
        self._cut_at = -math.inf  # ms: the last cut of the pace
        self._throttling_from: float | None = None  # since when half the answers are throttles
        self._throttled_at = -math.inf  # the last throttle that found half of them throttled
        self._calm_until = 0.0  # ms: no cut of the limit before (one per round trip)
        self._base = (math.inf, math.inf)  # fastest answer: this span, the one before
        self._base_from = 0.0
        # counters (get_cache_stats, the request hook, OpenTelemetry)
        self.shed = 0  # calls answered at once for overload
        self.writes = 0  # bucket write requests sent by the acquire path
        self.decided = 0  # calls admitted or refused (429)

    @classmethod
    def for_deadline(cls, timeout_s: float | None) -> Load:
        """A `Load` whose slow answers are judged against the default deadline."""
        return cls(None if timeout_s is None else timeout_s * 1000 * SLOW_SHARE)

    def now_ms(self) -> float:
        return self.clock() * 1000

    def slow_rtt_ms(self, rtt_ms: float) -> float:
        """A round trip of about `rtt_ms` on average, taken as slow as most answers come:
        plus twice the smoothed deviation (what the estimates count per round trip)."""
        return rtt_ms + 2 * self.rtt_var_ms

    # --- slots -----------------------------------------------------------------------------

    def take(self) -> bool:
        """A slot now, when one is free and nobody waits before."""
        if self.inflight < self.limit and not self.waiters:
            self.inflight += 1
            return True
        return False

    async def wait(self) -> None:
        """A slot, in order (cancelling the wait gives back a slot handed over)."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed over as the caller left
            elif turn in self.waiters:
                self.waiters.remove(turn)
            raise

    def ended(self, lane: Measured, now: float, failure: BaseException | None) -> None:
        """A lane's request in flight ended at `now` (`clock()`: answered, or `failure`): it is
        counted, its slot given back, and its round trip measured for the writer and the lane
        (unless its caller's cancellation cut it). Inline: every warm write passes here."""
        sent = lane.sent_at
        assert sent is not None
        lane.sent_at = None
        self.writes += 1
        if isinstance(failure, asyncio.CancelledError):
            self._release()
            return
        rtt = (now - sent) * 1000
        lane.rtt_ms += (rtt - lane.rtt_ms) * SMOOTHING if lane.rtt_ms else rtt
        if self.rtt_ms:
            self.rtt_var_ms += (abs(rtt - self.rtt_ms) - self.rtt_var_ms) * VAR_SMOOTHING
            self.rtt_ms += (rtt - self.rtt_ms) * SMOOTHING
        else:  # the first round trip (RFC 6298)
            self.rtt_ms, self.rtt_var_ms = rtt, rtt / 2
        throttled = isinstance(failure, Unavailable) and failure.throttled
        if throttled:
            self.throttled(now)
        else:
            answers = self._answers
            if int(now) != answers[0]:
                self._next_second(now)
            answers[1] += 1
            if self.rate is not None:
                self._paced_ok(now)
        if now - self._base_from >= BASE_SPAN_S:  # the fastest answer, over two spans
            self._base = (math.inf, self._base[0])
            self._base_from = now
        fastest, earlier = self._base
        if rtt < fastest:
            self._base = (rtt, earlier)
        slow_ms, smooth = self.slow_ms, self.rtt_ms
        if slow_ms is not None and smooth > slow_ms and smooth > 2 * min(fastest, earlier, rtt):
            if now * 1000 >= self._calm_until:  # the table's queue grew: fewer in flight
                self.limit = max(1.0, self.inflight * CUT)
                self._calm_until = now * 1000 + max(smooth, 1000)
        elif not throttled and self.inflight + len(self.waiters) >= self.limit:  # it binds
            self.limit = min(MAX_LIMIT, self.limit + 1 / self.limit)
        self.inflight -= 1
        if self.waiters:
            self._hand_over()

    # --- the pace --------------------------------------------------------------------------

    def throttled(self, now: float | None = None) -> None:
        """The table throttled a request (`now`: `clock()`). Starts or cuts the pace when at
        least half of the last second's answers were throttles (and `MIN_THROTTLES`)."""
        now = self.clock() if now is None else now
        answers = self._answers
        if int(now) != answers[0]:
            self._next_second(now)
        answers[2] += 1
        accepted, throttles = self._last_second(now)
        if throttles < max(MIN_THROTTLES, accepted):
            self._throttling_from = None
            return
        if self._throttling_from is None or now - self._throttled_at > THROTTLE_GAP_S:
            self._throttling_from = now  # measure what the table accepts for a second first
        self._throttled_at = now
        if now - self._throttling_from < 1 or now * 1000 - self._cut_at < 1000:
            return
        if self._cubic is None:
            self._cubic = CubicCalculator(starting_max_rate=0, start_time=now)
        current = accepted if self.rate is None else min(accepted, self.rate)
        self.rate = max(MIN_RATE, self._cubic.error_received(max(current, MIN_RATE), now))
        self._cut_at = now * 1000

    def _paced_ok(self, now: float) -> None:
        assert self._cubic is not None
        grown = self._cubic.success_received(now)
        if grown > FREE_FACTOR * self._cubic.get_params_snapshot().w_max:
            self.rate = self._cubic = None  # far past where it throttled: no pace
            return
        self.rate = max(MIN_RATE, min(grown, 2 * self._last_second(now)[0]))

    def _next_second(self, now: float) -> None:
        answers = self._answers
        second = int(now)
        before = answers[1:3] if second == answers[0] + 1 else [0, 0]
        self._answers = [second, 0, 0, *before]

    def _last_second(self, now: float) -> tuple[float, float]:
        """(accepted, throttled) over the last second: this one, and the part of the one
        before that the last second still covers."""
        second, accepted, throttles, accepted_before, throttles_before = self._answers
        weight = 1 - (now - second)
        return accepted + accepted_before * weight, throttles + throttles_before * weight

    def turn(self, writes: int, now: float, latest: float | None) -> float:
        """While paced: reserve the turn of a call's `writes` (all sent together, after it) and
        return how long to wait for it (ms; 0 when not paced). `now` and `latest`: ms of
        `clock()`. Raises `Overloaded`, reserving nothing, when the turn would come after
        `latest` (None: whenever it comes)."""
        if self.rate is None:
            return 0.0
        start = max(now, self._next_turn)
        if latest is not None and start > latest:
            raise Overloaded(start - now, latest - now)
        self._next_turn = start + writes * 1000 / self.rate
        return start - now

    # --- slots given back ------------------------------------------------------------------

    def _release(self) -> None:
        self.inflight -= 1
        self._hand_over()

    def _hand_over(self) -> None:
        waiters = self.waiters
        while waiters and self.inflight < self.limit:
            turn = waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                self.inflight += 1

    # --- estimates and counters ------------------------------------------------------------

    def turn_ms(self, now: float) -> float:
        """How long a write paced now would wait for its turn (ms; 0 when not paced)."""
        return 0.0 if self.rate is None else max(0.0, self._next_turn - now)

    def wait_ms(self, requests: int) -> float:
        """How long `requests` more requests would wait for slots: each slot turns over once per
        round trip (ms)."""
        queued = self.inflight + len(self.waiters) + requests
        return max(0.0, (queued - self.limit) * self.slow_rtt_ms(self.rtt_ms) / self.limit)

    @property
    def writes_per_decided(self) -> float:
        return self.writes / self.decided if self.decided else 0.0

    def counters(self) -> tuple[int, float]:
        """(calls shed for overload, writes per decided call), which request hook events carry."""
        return self.shed, self.writes_per_decided
