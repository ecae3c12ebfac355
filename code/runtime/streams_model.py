"""A discrete-event model of CUDA streams, engines and the host thread that feeds them.

The model keeps only the rules that decide *when* work may run:

1. the host issues operations one after another, in program order (each issue may cost a little
   host time); an operation that blocks the host (a synchronisation, or an "async" copy from
   pageable memory, which the driver stages through a pinned buffer before returning) stops the
   host until the operation has finished;
2. within one stream, an operation starts only after the previous operation of that stream ended;
3. an explicit dependency (`cudaStreamWaitEvent` on an event recorded after another operation)
   delays an operation until that operation ended;
4. the legacy default stream synchronises implicitly with every *blocking* stream: an operation on
   it waits for all earlier operations on blocking streams, and an operation on a blocking stream
   waits for all earlier operations on the legacy stream; non-blocking streams are exempt;
5. each engine (the H2D copy engine, the D2H copy engine, the SMs) runs one operation at a time;
   when it is free it takes, among the operations issued and ready, the one issued first.

Times are in any unit (the tests use milliseconds). It predicts a timeline, not a bandwidth:
the duration of each operation is an input.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# --8<-- [start:rules]
H2D, D2H, COMPUTE = "h2d", "d2h", "compute"


@dataclass
class Op:
    name: str
    stream: str             # stream name; "legacy" is the legacy default stream
    engine: str             # "h2d", "d2h" or "compute" (or any name: one op at a time per engine)
    duration: float
    blocks_host: bool = False          # pageable copy / synchronisation: host waits for the end
    after: tuple[str, ...] = ()        # names of ops this one waits for (wait_event)
    start: float = math.nan
    end: float = math.nan
    issued: float = math.nan


@dataclass
class Streams:
    """Program order is the order of `submit` calls. `blocking` names the streams created without
    cudaStreamNonBlocking (they synchronise with the legacy stream)."""
    blocking: set[str] = field(default_factory=set)
    issue_cost: float = 0.0
    ops: list[Op] = field(default_factory=list)

    def submit(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def _deps(self) -> list[set[int]]:
        """Indices each op must wait for: stream order, wait_event, legacy-stream rules."""
        index = {op.name: i for i, op in enumerate(self.ops)}
        deps: list[set[int]] = []
        last_in_stream: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            d = {index[n] for n in op.after}
            assert all(j < i for j in d), f"{op.name} waits for an op issued after it"
            if op.stream in last_in_stream:
                d.add(last_in_stream[op.stream])
            for j in range(i):
                other = self.ops[j].stream
                if op.stream == "legacy" and other in self.blocking:
                    d.add(j)
                if op.stream in self.blocking and other == "legacy":
                    d.add(j)
            last_in_stream[op.stream] = i
            deps.append(d)
        return deps

    # --8<-- [end:rules]
    # --8<-- [start:simulate]
    def simulate(self) -> float:
        """Fill in issued/start/end of every op; return the makespan (the last end)."""
        n = len(self.ops)
        deps = self._deps()
        for op in self.ops:
            op.issued = op.start = op.end = math.nan
        engine_free: dict[str, float] = {}
        host_t, nxt = 0.0, 0           # host clock, next op to issue
        waiting_on: int | None = None  # the op the host is blocked on
        t = 0.0
        while True:
            # 1. the host issues in program order until it blocks or runs ahead of t
            while waiting_on is None and nxt < n and host_t <= t:
                self.ops[nxt].issued = host_t
                host_t += self.issue_cost
                if self.ops[nxt].blocks_host:
                    waiting_on = nxt
                nxt += 1
            # 2. each free engine takes the earliest-issued op whose dependencies have ended
            for i, op in enumerate(self.ops):
                if not math.isnan(op.start) or math.isnan(op.issued) or engine_free.get(op.engine, 0.0) > t:
                    continue
                if all(self.ops[j].end <= t for j in deps[i]):  # NaN (not started) compares False
                    op.start, op.end = t, t + op.duration
                    engine_free[op.engine] = op.end
            # 3. a blocked host resumes when its op has ended
            if waiting_on is not None and self.ops[waiting_on].end <= t:
                host_t, waiting_on = t, None
                continue
            if nxt == n and all(not math.isnan(op.start) for op in self.ops):
                return max(op.end for op in self.ops)
            # 4. advance to the next moment something can change
            future = [op.end for op in self.ops if op.end > t]
            if waiting_on is None and nxt < n:
                future.append(host_t)
            if not future:
                raise RuntimeError("deadlock: an op waits for something that never runs")
            t = min(future)


# --8<-- [end:simulate]


# --8<-- [start:pipeline]
def chunked_pipeline(n_chunks: int, n_streams: int, t_h2d: float, t_compute: float, t_d2h: float,
                     pageable: bool = False, issue_cost: float = 0.0) -> Streams:
    """The lab's schedule: chunk i is issued depth-first (H2D, compute, D2H) on stream i % n_streams.
    `t_*` are per-chunk durations. Pageable copies block the host until they finish."""
    s = Streams(issue_cost=issue_cost)
    for i in range(n_chunks):
        stream = f"s{i % n_streams}"
        s.submit(Op(f"h2d{i}", stream, H2D, t_h2d, blocks_host=pageable))
        s.submit(Op(f"compute{i}", stream, COMPUTE, t_compute))
        s.submit(Op(f"d2h{i}", stream, D2H, t_d2h, blocks_host=pageable))
    return s


def flow_shop_makespan(n_chunks: int, stage_times: list[float]) -> float:
    """Closed form for identical chunks through stages that each run one chunk at a time:
    the first chunk goes through every stage, each later chunk adds the slowest stage."""
    return sum(stage_times) + (n_chunks - 1) * max(stage_times)


def overlap_intervals(ops: list[Op]) -> float:
    """Total time during which two or more ops run at once (the overlap a timeline shows)."""
    points = sorted([(op.start, 1) for op in ops] + [(op.end, -1) for op in ops], key=lambda p: (p[0], p[1]))
    active, last, total = 0, 0.0, 0.0
    for x, delta in points:
        if active >= 2:
            total += x - last
        active += delta
        last = x
    return total
# --8<-- [end:pipeline]


def intervals_overlap_time(intervals: list[tuple[float, float]]) -> float:
    """Same as overlap_intervals, for plain (start, end) pairs (the H200 record's timeline)."""
    return overlap_intervals([Op("x", "s", "e", b - a, start=a, end=b) for a, b in intervals])
