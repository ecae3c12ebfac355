"""A small LLM serving engine laid out the way vLLM V1 and TensorRT-LLM's PyExecutor are laid out.

Used by docs/framework/engine-architecture.md and tests/test_framework_engine_loop.py. Pure Python, no
GPU: the "model" is any function from a token sequence to the next token, so the loop, the queues, the
overlap of CPU and GPU work, the incremental detokeniser and the streaming format can be checked
exactly. Page sizes of KV blocks, sampling and attention live in block_manager.py, sampler.py and
serving_sim.py; this file is about processes and loops.
"""
from __future__ import annotations

import json
import queue
import runpy
import threading
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterable


# --8<-- [start:processes]
def process_count(tp: int = 1, pp: int = 1, dp: int = 1, api_servers: int | None = None) -> dict[str, int]:
    """Processes of one vLLM V1 deployment (docs/design/arch_overview.md, "Process Count Summary")."""
    a = dp if api_servers is None else api_servers  # API servers: one per DP rank by default
    counts = {
        "api_server": a,  # HTTP, tokenise, detokenise, stream
        "engine_core": dp,  # scheduler + KV cache manager, one busy loop per DP rank
        "gpu_worker": dp * pp * tp,  # one process per GPU
        "dp_coordinator": 1 if dp > 1 else 0,  # load balance and lock-step waves across DP ranks
    }
    counts["total"] = sum(counts.values())
    return counts
# --8<-- [end:processes]


# --8<-- [start:core]
@dataclass
class EngineCoreRequest:
    """What crosses the process boundary: token ids and limits, never text."""

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    eos_token_id: int | None = None


@dataclass
class Request:  # the engine core's state of one request
    req: EngineCoreRequest
    output: list[int] = field(default_factory=list)
    num_computed: int = 0  # tokens whose KV is (or is being) written
    in_flight: int = 0  # sampled on the "GPU" but not yet seen by the CPU (overlap scheduling)
    finish_reason: str | None = None

    @property
    def num_tokens(self) -> int:  # every token the model has produced or been given, seen or not
        return len(self.req.prompt_token_ids) + len(self.output) + self.in_flight


@dataclass
class EngineCoreOutput:
    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None


class EngineCore:
    """schedule -> execute -> update, the inner loop of vLLM's EngineCore and TensorRT-LLM's PyExecutor."""

    def __init__(self, model: Callable[[list[int]], int], max_num_seqs: int = 8,
                 max_num_batched_tokens: int = 32):
        self.model, self.max_num_seqs, self.budget = model, max_num_seqs, max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.done: dict[str, Request] = {}
        self.wasted_tokens = 0  # computed for a request that had already finished
        self.to_sample: set[str] = set()
        self.forward_tokens = 0  # tokens through the model, summed over steps

    def add_request(self, r: EngineCoreRequest) -> None:
        self.waiting.append(Request(r))

    def abort(self, request_id: str) -> None:
        for r in [*self.waiting, *self.running]:
            if r.req.request_id == request_id:
                (self.waiting if r in self.waiting else self.running).remove(r)
                r.finish_reason, self.done[request_id] = "abort", r

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> dict[str, int]:
        """Give each request some tokens this step: running ones first, then new ones, within the budget.

        Prefill, chunked prefill and decode are one rule: compute num_tokens - num_computed tokens,
        at most what the budget has left. A request that will stop by length is not scheduled again
        (its stop is predictable; vLLM's scheduler skips it the same way, SGLang's overlap loop does not);
        one that will stop at EOS cannot be known before its token is read.
        """
        budget, plan = self.budget, {}
        for r in self.running:
            if len(r.output) + r.in_flight >= r.req.max_tokens:
                continue
            n = min(r.num_tokens - r.num_computed, budget)
            if n > 0:
                plan[r.req.request_id], budget = n, budget - n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting.popleft()
            self.running.append(r)
            n = min(r.num_tokens, budget)
            plan[r.req.request_id], budget = n, budget - n
        sample = set()
        for r in self.running:  # advance at schedule time, as vLLM V1 does
            n = plan.get(r.req.request_id, 0)
            r.num_computed += n
            if n and r.num_computed == r.num_tokens:  # this step reaches the last token: it samples one
                r.in_flight += 1
                sample.add(r.req.request_id)
        self.to_sample = sample
        return plan

    def execute(self, plan: dict[str, int], device_tokens: dict[str, int] | None = None) -> dict[str, int]:
        """The GPU's part: one forward over the scheduled tokens, one sampled token per finishing row.

        device_tokens holds tokens sampled by the previous step that the CPU has not processed yet;
        the GPU reads them from its own memory (SGLang's future tokens), not from the request state.
        """
        device_tokens, sampled = device_tokens or {}, {}
        for r in self.running:
            rid = r.req.request_id
            self.forward_tokens += plan.get(rid, 0)
            if rid in self.to_sample:
                seq = r.req.prompt_token_ids + r.output + ([device_tokens[rid]] if rid in device_tokens else [])
                sampled[rid] = self.model(seq)
        return sampled

    def update(self, plan: dict[str, int], sampled: dict[str, int]) -> list[EngineCoreOutput]:
        """The CPU's part after the step: append tokens, check stop conditions, free finished requests."""
        outputs = []
        for rid, tok in sampled.items():
            r = next((x for x in self.running if x.req.request_id == rid), None) or self.done[rid]
            r.in_flight -= 1
            if r.finish_reason is not None:  # it stopped at the previous step: this token is thrown away
                self.wasted_tokens += 1
                continue
            r.output.append(tok)
            if tok == r.req.eos_token_id:
                r.finish_reason = "stop"
            elif len(r.output) >= r.req.max_tokens:
                r.finish_reason = "length"
            if r.finish_reason is not None:
                self.running.remove(r)
                self.done[rid] = r
            outputs.append(EngineCoreOutput(rid, [tok], r.finish_reason))
        return outputs

    def step(self) -> list[EngineCoreOutput]:
        plan = self.schedule()
        return self.update(plan, self.execute(plan))
# --8<-- [end:core]


# --8<-- [start:overlap]
def run_overlapped(core: EngineCore) -> list[EngineCoreOutput]:
    """Schedule and launch step n+1 before processing step n's results (TensorRT-LLM's overlap
    scheduler, SGLang's event_loop_overlap, vLLM's async scheduling)."""
    outputs, prev = [], None
    while core.has_unfinished() or prev is not None:
        plan = core.schedule()  # step n+1, scheduled without knowing which requests stopped at step n
        sampled = core.execute(plan, device_tokens=prev[1] if prev else None) if plan else {}
        if prev is not None:  # CPU: stop checks and outputs of step n while the GPU runs step n+1
            outputs += core.update(*prev)
        prev = (plan, sampled) if plan else None
    return outputs


def run_serial(core: EngineCore) -> list[EngineCoreOutput]:
    outputs = []
    while core.has_unfinished():
        outputs += core.step()
    return outputs
# --8<-- [end:overlap]


# --8<-- [start:des]
def step_loop_period(c_sched: int, gpu: int, c_post: int, detok: int, mode: str, steps: int = 40) -> Fraction:
    """Steady-state time per step of a loop of `steps` steps, by list scheduling a task graph.

    Each task runs on one resource ("cpu" = the engine core's Python thread, "gpu", "frontend" = the
    API server process) as soon as the resource is free and its inputs are done. Modes:
    serial   - one process: schedule, forward, process outputs and detokenise one after another;
    split    - detokenise/stream in another process (vLLM V1's API server);
    overlap  - split, and schedule step n+1 before processing step n (one step of look-ahead).
    """
    tasks = []  # (name, resource, duration, deps), listed in program order of each resource

    def add(name, res, dur, *deps):
        tasks.append((name, res, dur, deps))

    front = "cpu" if mode == "serial" else "frontend"
    for n in range(steps):
        if mode == "overlap":
            if n == 0:
                add(("s", 0), "cpu", c_sched)
                add(("g", 0), "gpu", gpu, ("s", 0))
            if n + 1 < steps:
                add(("s", n + 1), "cpu", c_sched)  # does not wait for ("p", n)
                add(("g", n + 1), "gpu", gpu, ("s", n + 1))  # its input tokens come from ("g", n) on the GPU
        else:
            add(("s", n), "cpu", c_sched)
            add(("g", n), "gpu", gpu, ("s", n))
        add(("p", n), "cpu", c_post, ("g", n))  # reading sampled tokens synchronises with the GPU
        add(("d", n), front, detok, ("p", n))
    free, finish = {}, {}
    for name, res, dur, deps in tasks:
        start = max([free.get(res, 0)] + [finish[d] for d in deps])
        finish[name] = free[res] = start + dur
    a, b = steps // 4, 3 * steps // 4  # away from the start-up and drain at both ends
    return Fraction(finish[("d", b)] - finish[("d", a)], b - a)
# --8<-- [end:des]


# --8<-- [start:detok]
class IncrementalDetokenizer:
    """Text deltas for a stream of token ids, never splitting a UTF-8 character (vLLM's slow path,
    `detokenize_incrementally`, from TGI). `decode` maps ids to text with invalid bytes as U+FFFD."""

    def __init__(self, decode: Callable[[list[int]], str], prompt_ids: Iterable[int] = (), lookback: int = 5):
        self.decode, self.ids = decode, list(prompt_ids)
        self.read = len(self.ids)  # everything before `read` has been emitted
        self.prefix = max(self.read - lookback, 0)  # a little context before it for the decoder

    def step(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix_text = self.decode(self.ids[self.prefix:self.read])
        new_text = self.decode(self.ids[self.prefix:])
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""  # an incomplete character: wait for the next token
        self.prefix, self.read = self.read, len(self.ids)
        return new_text[len(prefix_text):]


class StopStringBuffer:
    """Hold back len(longest stop string) - 1 characters so that a stop string is never half streamed."""

    def __init__(self, stop: Iterable[str] = ()):
        self.stop = list(stop)
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.text, self.sent, self.matched = "", 0, False

    def push(self, delta: str, flush: bool = False) -> str:
        self.text += delta
        for s in self.stop:
            i = self.text.find(s, max(0, len(self.text) - len(delta) - len(s) + 1))
            if i >= 0:  # cut the stop string and everything after it
                self.text, self.matched = self.text[:i], True
                break
        end = len(self.text) if (flush or self.matched) else max(self.sent, len(self.text) - self.hold)
        out, self.sent = self.text[self.sent:end], end
        return out


# --8<-- [end:detok]


# --8<-- [start:serving]
def apply_chat_template(messages: list[dict[str, str]]) -> str:
    """A chat template in the shape of a Jinja template from tokenizer_config.json."""
    body = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
    return body + "<|assistant|>"  # add_generation_prompt=True


def sse_chunk(request_id: str, model: str, delta: dict, finish_reason: str | None) -> str:
    obj = {"id": request_id, "object": "chat.completion.chunk", "model": model,
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class LLM:
    """Offline inference: the same EngineCore, driven in-process; all prompts at once, results at the end."""

    def __init__(self, encode, decode, model, **engine_kw):
        self.encode, self.decode = encode, decode
        self.core = EngineCore(model, **engine_kw)

    def generate(self, prompts: list[str], max_tokens: int, eos_token_id: int | None = None) -> list[str]:
        ids = [f"{i}" for i in range(len(prompts))]
        for rid, p in zip(ids, prompts):
            self.core.add_request(EngineCoreRequest(rid, self.encode(p), max_tokens, eos_token_id))
        run_serial(self.core)
        texts = []
        for rid in ids:
            out = self.core.done[rid].output
            out = out[:-1] if out and out[-1] == eos_token_id else out
            texts.append(self.decode(out))
        return texts


SHUTDOWN = "__shutdown__"


def run_busy_loop(core: EngineCore, inq: queue.Queue, outq: queue.Queue) -> None:
    """EngineCoreProc.run_busy_loop: block for work when idle, drain the input queue, step, push outputs.
    Messages are serialised (JSON here, msgpack in vLLM) as they would be on a ZMQ socket."""

    def handle(msg: str) -> bool:
        if msg == SHUTDOWN:
            return False
        m = json.loads(msg)
        core.abort(m["abort"]) if "abort" in m else core.add_request(EngineCoreRequest(**m))
        return True

    while True:
        while not core.has_unfinished():  # idle: block on the socket
            if not handle(inq.get(timeout=30)):
                return
        while True:  # busy: take whatever else arrived, without blocking
            try:
                msg = inq.get_nowait()
            except queue.Empty:
                break
            if not handle(msg):
                return
        outs = core.step()
        if outs:
            outq.put(json.dumps([o.__dict__ for o in outs]))


class OpenAIServer:
    """The API-server side: template, tokenise, send ids to the engine core, detokenise, stream SSE."""

    def __init__(self, encode, decode, model, model_name="tiny", **engine_kw):
        self.encode, self.decode, self.model_name = encode, decode, model_name
        self.inq, self.outq = queue.Queue(), queue.Queue()
        self.core = EngineCore(model, **engine_kw)
        self.thread = threading.Thread(target=run_busy_loop, args=(self.core, self.inq, self.outq), daemon=True)
        self.thread.start()  # a thread stands in for the EngineCore process

    def chat_completions(self, requests: dict[str, list[dict]], max_tokens: int, eos_token_id: int,
                         stop: Iterable[str] = ()) -> dict[str, list[str]]:
        """Serve several streaming chat requests at once; returns each request's SSE lines."""
        state = {}
        for rid, messages in requests.items():
            ids = self.encode(apply_chat_template(messages))
            state[rid] = (IncrementalDetokenizer(self.decode, ids), StopStringBuffer(stop),
                          [sse_chunk(rid, self.model_name, {"role": "assistant"}, None)])
            self.inq.put(json.dumps({"request_id": rid, "prompt_token_ids": ids, "max_tokens": max_tokens,
                                     "eos_token_id": eos_token_id}))
        live = set(requests)
        while live:
            for o in json.loads(self.outq.get(timeout=30)):
                rid = o["request_id"]
                if rid not in live:
                    continue
                detok, buf, lines = state[rid]
                delta = "".join(detok.step(t) for t in o["new_token_ids"] if t != eos_token_id)
                text = buf.push(delta, flush=o["finish_reason"] is not None)
                if text:
                    lines.append(sse_chunk(rid, self.model_name, {"content": text}, None))
                if buf.matched:  # a stop string: end the stream and free the request in the engine
                    self.inq.put(json.dumps({"abort": rid}))
                if buf.matched or o["finish_reason"]:
                    reason = "stop" if buf.matched else o["finish_reason"]
                    lines += [sse_chunk(rid, self.model_name, {}, reason), "data: [DONE]\n\n"]
                    live.discard(rid)
        return {rid: state[rid][2] for rid in requests}

    def shutdown(self) -> None:
        self.inq.put(SHUTDOWN)
        self.thread.join(timeout=10)
# --8<-- [end:serving]


# --8<-- [start:executor]
@dataclass
class Result:
    output_token_ids: list[int]
    is_final: bool


class Executor:
    """TensorRT-LLM's Executor API over the same loop: enqueue_request returns an id,
    await_responses returns Results, one per step when streaming, one at the end otherwise."""

    def __init__(self, core: EngineCore):
        self.core, self.next_id, self.streaming, self.pending = core, 0, {}, {}

    def enqueue_request(self, prompt: list[int], max_tokens: int, streaming: bool, eos: int | None = None) -> int:
        self.next_id += 1
        self.core.add_request(EngineCoreRequest(str(self.next_id), prompt, max_tokens, eos))
        self.streaming[self.next_id], self.pending[self.next_id] = streaming, []
        return self.next_id

    def await_responses(self) -> list[tuple[int, Result]]:
        """Runs one iteration of the loop (the real executor runs it in a background thread)."""
        responses = []
        for o in self.core.step():
            rid = int(o.request_id)
            final = o.finish_reason is not None
            if self.streaming[rid]:
                responses.append((rid, Result(o.new_token_ids, final)))
            else:
                self.pending[rid] += o.new_token_ids
                if final:
                    responses.append((rid, Result(self.pending[rid], True)))
        return responses
# --8<-- [end:executor]


# --8<-- [start:spawn]
def import_as_spawned_child(script_path: str, start_engine: Callable[[], object]) -> dict:
    """What a `spawn` or `forkserver` child does first: run the parent's main script again as the module
    `__mp_main__`, with the process marked as still bootstrapping. Code outside an
    `if __name__ == "__main__":` guard runs a second time; if it tries to start a process,
    multiprocessing refuses. The script's `start_engine` is injected, so nothing is ever started here."""
    import multiprocessing.process as mp_process

    me = mp_process.current_process()
    me._inheriting = True  # what multiprocessing.spawn.prepare() sets in a real child
    try:
        return runpy.run_path(script_path, init_globals={"start_engine": start_engine}, run_name="__mp_main__")
    finally:
        del me._inheriting


def start_engine_checked() -> dict:
    """The first thing Process.start() does under spawn/forkserver: collect the data the child needs.
    multiprocessing.spawn.get_preparation_data raises if this process is itself still bootstrapping."""
    import multiprocessing.spawn

    return multiprocessing.spawn.get_preparation_data("EngineCore")
# --8<-- [end:spawn]
