"""Scheduler fidelity: the same bounded bursts against the real vLLM CPU server (a deliberately small
KV cache: 160 blocks of 32 tokens, 2,048-token budget per step) and through ``kvplan.sim.simulate``
with the plan of the same flags. Compared: the preemption count (``vllm:num_preemptions_total``
delta), the rejections (a prompt longer than max_model_len: HTTP 400 / SimResult.rejected), and the
order in which requests received their first token.

The bursts are built so that the scheduler's rules, not the clock, decide the answers:

* ``waves`` (tolerance: stated in the test): three "blocker" requests (1,500-token prompts, identical, so their arrival order does
  not matter) fill 141 of the 159 usable blocks and grow to 156 (160 output tokens: the most that keeps
  them at 52 blocks each, so that the queue has as long as the cache allows to form behind them; with
  120, the queue did not form in 7 of 25 runs on a 2-core host); six more requests, sent one by one
  while the blockers run (each once the server's gauges show the previous one queued), all need more
  blocks than are free (≥ 20 > 18), so they
  queue in send order however long a step takes; when the blockers finish, they are admitted as the
  freed blocks and the 2,048-token budget allow (chunked prefill of the 1,200-token head, waves of
  two or three), and as they grow past the cache some are preempted and recomputed. One more
  request with a 2,100-token prompt is rejected.
* ``identical``: N identical requests at once (their order cannot matter): the preemption count
  follows from the block arithmetic alone.

Each burst takes 10-40 s on the 2-core machine. The simulated first-token *times* are not compared
(that is the latency benchmark's job, benchmarks/sim_fidelity.py); the order and counts are.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import threading
import time
from typing import Optional

import pytest

from tests.vllm_server.client import model_name, random_prompt_ids, scrape_metrics, stream_completion, stream_sse
from tests.vllm_server.fixtures import SIM_FIDELITY

pytestmark = pytest.mark.vllm

BLOCK_SIZE, NUM_BLOCKS, MAX_MODEL_LEN = 32, 160, 2048
#: First tokens this close came out of one engine step (a step that admits a wave prefills
#: 700-2,000 tokens: 50-150 ms here; the client's threads see one step's chunks within a few ms).
WAVE_GAP_S = 0.02
#: How far apart in reverse the client may see two first tokens whose steps were in order (CI: 46 ms).
DELIVERY_JITTER_S = 0.1
#: vLLM's CPU default max_num_batched_tokens, the most prompt tokens one step prefills (asserted below).
BUDGET_TOKENS = 2048


@dataclasses.dataclass(frozen=True)
class Req:
    name: str
    at_s: float  # send offset from the burst's start
    prompt: int
    output: int


@dataclasses.dataclass
class Outcome:
    name: str
    ok: bool
    status_400: bool
    first_token_s: Optional[float]  # from the burst's start
    completion_tokens: Optional[int]
    error: Optional[str]


WAVES = (
    tuple(Req(f"B{i}", 0.0, 1500, 160) for i in range(3))
    + tuple(Req(f"W{i}", 0.3 + 0.04 * i, p, o) for i, (p, o) in enumerate(
        [(1200, 300), (700, 300), (1000, 200), (640, 400), (900, 300), (800, 250)]))
    + (Req("R", 0.3 + 0.04 * 6, 2100, 16),)
)
#: The waves burst's queue, sent one by one as the server shows each queued (run_burst).
QUEUE = tuple(r.name for r in WAVES if r.name.startswith("W"))
IDENTICAL = tuple(Req(f"I{i}", 0.0, 1000, 500) for i in range(4))


#: How long the gate of a queued request waits for the server to show it (one engine step of the
#: running blockers, 50-150 ms, updates the scheduler's gauges; far longer means the server is stuck).
QUEUE_GATE_TIMEOUT_S = 30.0


#: How often the waves burst is sent again when the host was too slow to put its queue in place
#: before the blockers finished (a fresh-clone CI run: W0-W2 queued, the blockers done before
#: the gauges showed W3; the idle host needs ~0.4 s for the queue against ~2.1 s of blockers; a
#: later CI run on a slower host broke all 3 tries, at W3, W1 and W0).
BURST_ATTEMPTS = 5


class PremiseBroken(Exception):
    """The burst's setup did not happen (the blockers finished before the queue was in place):
    nothing about the scheduler was measured, so the burst is sent again, not judged."""


def _wait_for(base_url: str, what: str, condition, timeout: float = QUEUE_GATE_TIMEOUT_S,
              broken=lambda: None) -> dict:
    """Poll the server's scheduler gauges until ``condition(running, waiting)`` holds; fail naming
    ``what`` and the last gauges when it does not within ``timeout``; raise PremiseBroken as soon
    as ``broken()`` names why the condition can no longer come."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape_metrics(base_url)
        gauges = {"running": m.get("vllm:num_requests_running"), "waiting": m.get("vllm:num_requests_waiting")}
        if condition(gauges["running"], gauges["waiting"]):
            return gauges
        why = broken()
        if why:
            raise PremiseBroken(f"{why} before the server showed {what} (last gauges: {gauges})")
        if time.monotonic() > deadline:
            pytest.fail(f"the server did not show {what} within {timeout} s (last gauges: {gauges})")
        # 40 scrapes a second: the gauges move once per engine step (50-150 ms); scraping every 5 ms
        # kept the API server, which also streams the blockers' tokens, busy on a 2-core host
        time.sleep(0.025)


def _wait_idle(base_url: str, timeout: float = 120.0) -> None:
    """Until the server runs and queues nothing (a broken burst's requests have all finished)."""
    _wait_for(base_url, "an idle scheduler", lambda running, waiting: running == 0 and waiting == 0, timeout)


def run_burst(base_url: str, reqs: tuple[Req, ...], seed: int = 7000, timeout: float = 150.0,
              queued: tuple[str, ...] = (), together: bool = False) -> tuple[list[Outcome], float, dict[str, float]]:
    """Send each request at its offset (one thread each), stream it, and return the outcomes, the
    server's preemption delta and each request's actual send offset.

    The requests named in ``queued`` are sent in that order, each only once the server's own
    gauges show the requests before it in place: the first once every earlier request is running
    and none waits, each next one once ``vllm:num_requests_waiting`` counts the previous one. Why:
    threads released 40 ms apart reach the scheduler out of order on a host whose cores other jobs
    hold (a fresh-clone run beside a busy loop saw W2 admitted before W1), and the test is about
    the scheduler's rules for a queue in a known order, not about thread timing. The simulator is
    fed that order (the requests' ``at_s``); the queue's arrival times do not matter to it because
    none of them fits before the blockers free their blocks.
    With ``together``, the burst's premise is that the server runs all of ``reqs`` at once: the
    coordinator watches the gauges for it and raises PremiseBroken when a request finishes first
    (a request that reaches the scheduler seconds late, after the others have grown into the
    blocks it needs, waits for them instead of being admitted: with the fourth identical request
    sent 4 s late, vLLM preempted nothing).
    Bounded: len(reqs) <= 16 requests, ``timeout`` per stream, QUEUE_GATE_TIMEOUT_S per gate."""
    assert len(reqs) <= 16
    model = model_name(base_url)
    before = scrape_metrics(base_url).get("vllm:num_preemptions_total")
    t0 = time.monotonic() + 0.2
    out: dict[str, Outcome] = {}
    sent_at: dict[str, float] = {}
    lock = threading.Lock()
    gates = {name: threading.Event() for name in queued}

    def one(i: int, r: Req) -> None:
        delay = t0 + r.at_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if r.name in gates and not gates[r.name].wait(timeout=len(queued) * QUEUE_GATE_TIMEOUT_S + 10):
            return  # the coordinator failed the test; nothing was sent
        start = time.monotonic()
        with lock:
            sent_at[r.name] = start - t0
        res = stream_completion(base_url, model, random_prompt_ids(r.prompt, seed + i), r.output, index=i,
                                timeout=timeout)
        first = None if res.first_token_s is None else start + res.first_token_s - t0
        with lock:
            out[r.name] = Outcome(r.name, res.ok, bool(res.error and "-> 400" in res.error), first,
                                  res.completion_tokens, res.error)

    broken: Optional[PremiseBroken] = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(reqs)) as pool:
        futs = [pool.submit(one, i, r) for i, r in enumerate(reqs)]
        try:
            if together:
                def any_done() -> Optional[str]:
                    with lock:
                        done = sorted(out)
                    return f"{', '.join(done)} finished" if done else None

                _wait_for(base_url, f"all {len(reqs)} requests running at once",
                          lambda running, waiting: running >= len(reqs), broken=any_done)
            if queued:
                first_queued = min(q.at_s for q in reqs if q.name in gates)
                ahead_names = [r.name for r in reqs if r.name not in gates and r.at_s <= first_queued]
                ahead = len(ahead_names)

                def blockers_done() -> Optional[str]:
                    with lock:
                        done = [n for n in ahead_names if n in out]
                    return f"{', '.join(done)} finished" if done else None

                _wait_for(base_url, f"the {ahead} requests ahead of the queue running",
                          lambda running, waiting: running >= ahead and waiting == 0, broken=blockers_done)
                for k, name in enumerate(queued):
                    gates[name].set()
                    _wait_for(base_url, f"{name} waiting (the queue's request {k + 1})",
                              lambda running, waiting, n=k + 1: waiting >= n, broken=blockers_done)
        except PremiseBroken as e:
            broken = e
        finally:
            for gate in gates.values():
                gate.set()  # never leave a thread parked (a failed gate fails the test above)
        concurrent.futures.wait(futs, timeout=timeout + 30)
        for f in futs:
            f.result(timeout=0)
    if broken is not None:
        _wait_idle(base_url)
        raise broken
    after = scrape_metrics(base_url).get("vllm:num_preemptions_total")
    return [out[r.name] for r in reqs], after - before, sent_at


def run_burst_in_place(base_url: str, reqs: tuple[Req, ...], attempts: int = BURST_ATTEMPTS,
                       **burst) -> tuple[list[Outcome], float, dict[str, float]]:
    """run_burst, sent again (at most ``attempts`` times in all) while its premise breaks; the
    reasons are printed so a CI log shows how often the host was too slow."""
    reasons = []
    for _ in range(attempts):
        try:
            return run_burst(base_url, reqs, **burst)
        except PremiseBroken as e:
            reasons.append(str(e))
            print(f"[sim fidelity] burst sent again: {e}")
    # Nothing about the scheduler was measured: a skip that says so, not a verdict. (One day's host broke
    # every try in 2 of 6 runs - once with the gauges at "0 running" while the blockers ran - and
    # needed no retry in 3 of the other 4.)
    pytest.skip(f"the burst's premise never held ({attempts} tries): "
                f"the host was too slow to set up what the test measures: {reasons}")


def real_first_token_order(outcomes: list[Outcome]) -> list[str]:
    return [o.name for o in sorted((o for o in outcomes if o.first_token_s is not None),
                                   key=lambda o: o.first_token_s)]


# --------------------------------------------------------------------------- the simulator's side
def plan_request(model_dir):
    """The PlanRequest of the served flags, as `kvplan plan --device cpu` builds it (see test_vllm_plan)."""
    from kvplan.hardware import custom_gpu, parse_size
    from kvplan.memory import PlanRequest
    from kvplan.models import load_model

    return PlanRequest(model=load_model(str(model_dir)), gpu=custom_gpu(parse_size("16GiB"), "CPU"), device="cpu",
                       dtype="float32", vllm_version="0.32", max_model_len=MAX_MODEL_LEN, block_size=BLOCK_SIZE,
                       num_gpu_blocks_override=NUM_BLOCKS, kv_cache_memory_bytes=parse_size("1GiB"))


def cpu_profile():
    """The step-time profile calibrated on the real CPU server's bench runs (tests/fixtures/bench_runs):
    step times only decide *when* things happen; the rules under test decide order and counts."""
    from pathlib import Path

    from kvplan.sim.calibrate import calibrate

    runs = Path(__file__).resolve().parents[1] / "fixtures" / "bench_runs"
    return calibrate(sorted(runs.glob("*.json")), device="CPU").profile


def simulate_burst(request, reqs: tuple[Req, ...], profile):
    from kvplan.sim import SimRequest, Trace, simulate

    trace = Trace(tuple(SimRequest(arrival_s=r.at_s, prompt_tokens=r.prompt, output_tokens=r.output, request_id=r.name)
                        for r in reqs), source="fidelity burst")
    # vLLM's CPU platform turns async scheduling off (vllm/platforms/cpu.py: async_scheduling = False)
    return simulate(request, trace, profile=profile, per_request=True, async_scheduling=False)


def sim_first_token_order(sim, reqs: tuple[Req, ...]) -> list[str]:
    return [reqs[i].name for i in sim.to_dict()["first_token_order"]]


def waves(named_times: list[tuple[str, float]], gap_s: float) -> list[list[str]]:
    """Requests whose first tokens came out together (within ``gap_s``: the same engine step), in
    time order; names sorted inside a wave (their order within one step is not the scheduler's)."""
    out: list[list[str]] = []
    last = None
    for name, t in sorted(named_times, key=lambda x: x[1]):
        if last is None or t - last > gap_s:
            out.append([])
        out[-1].append(name)
        last = t
    return [sorted(w) for w in out]


def wave_starts(ws: list[list[str]]) -> set[int]:
    """Positions in the flattened order where a new wave (engine step) begins."""
    out, n = set(), 0
    for w in ws:
        out.add(n)
        n += len(w)
    return out


def wave_disagreements(real_times: list[tuple[str, float]], sim_waves: list[list[str]]) -> list[str]:
    """What the real waves burst's first tokens, as the client saw them, contradict in the
    simulator's steps (empty: they agree within the stated tolerance).

    The client sees each request's first token on its own thread, after the API server's output
    loop, on a host whose two cores the engine also holds: one step's first tokens can reach it
    tens of ms apart in reverse (a CI run: W1 and W2, prefilled in one step, 46 ms apart), and
    several steps' first tokens can reach it together (a CI run: W0-W4, three simulated steps of
    1,200 + 1,700 + 1,540 prompt tokens, all within 22 ms, W3 2 ms before W2). What the scheduler
    decides is checked on what the client can observe:

    * FCFS across steps: no request gets its first token clearly (more than DELIVERY_JITTER_S)
      before one the simulator admitted in an earlier step;
    * the steps' boundaries where the client can see them. A real wave whose prompts add up to
      more than one step can prefill (the token budget, plus the one request a step may finish
      from chunks begun earlier) was several steps delivered together: the simulated boundaries
      inside it are not observable and are not counted as missing. Stated tolerance: at most one
      observable simulated boundary may be missing from the real run and at most two extra real
      ones may appear (one from the blockers' race, one from a step's first tokens delivered
      apart). Why the race: the three blockers are sent together, and whether vLLM admits them in
      two steps or three (a race between the API server and the first step) shifts when each
      finishes by a step, and so which step frees the blocks the queue's next request needs.
      Observed: equal in most runs, W3 | W4 split once.
    """
    problems: list[str] = []
    sim_step = {n: i for i, w in enumerate(sim_waves) for n in w}
    real_t = dict(real_times)
    for a in sim_step:
        for b in sim_step:
            if sim_step[a] < sim_step[b] and real_t[b] < real_t[a] - DELIVERY_JITTER_S:
                problems.append(f"{b} (simulated step {sim_step[b]}) got its first token "
                                f"{real_t[a] - real_t[b]:.3f} s before {a} (step {sim_step[a]})")
    real_waves = waves(real_times, WAVE_GAP_S)
    by_name = {r.name: r for r in WAVES}
    one_step_cap = BUDGET_TOKENS + max(r.prompt for r in WAVES if r.name.startswith("W"))
    flat = [n for w in real_waves for n in w]
    hidden = {k for w in real_waves if sum(by_name[n].prompt for n in w) > one_step_cap
              for k in range(flat.index(w[0]) + 1, flat.index(w[0]) + len(w))}
    real_starts, sim_starts = wave_starts(real_waves), wave_starts(sim_waves)
    missing, extra = (sim_starts - hidden) - real_starts, real_starts - sim_starts
    if len(missing) > 1 or len(extra) > 2 or len(missing) + len(extra) > 2:
        problems.append(f"step boundaries: simulated ones missing at {sorted(missing)}, "
                        f"extra real ones at {sorted(extra)} (not observable: {sorted(hidden)})")
    return problems


def completion_without_min_tokens(base_url: str, prompt: int, max_tokens: int, seed: int) -> dict:
    """A streamed completion with ignore_eos but no min_tokens, so vLLM may clamp max_tokens
    (client.stream_completion pins min_tokens = max_tokens, which turns a clamp into a 400)."""
    body = {"model": model_name(base_url), "prompt": random_prompt_ids(prompt, seed), "max_tokens": max_tokens,
            "temperature": 0.0, "ignore_eos": True, "stream_options": {"include_usage": True}}
    usage, finish = None, None
    for ev in stream_sse(base_url, "/v1/completions", body, timeout=120):
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or ():
            finish = ch.get("finish_reason") or finish
    return {"usage": usage, "finish_reason": finish}


# --------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def fidelity_server(vllm_servers):
    return vllm_servers.get(SIM_FIDELITY)


@pytest.fixture(scope="module")
def plan_and_profile(fidelity_server, tiny_llama_model):
    from kvplan.memory import plan

    req = plan_request(tiny_llama_model.path)
    res = plan(req, what_ifs=False)
    assert res.kv.num_gpu_blocks == NUM_BLOCKS and res.kv.block_size == BLOCK_SIZE
    assert res.flags.max_num_batched_tokens == BUDGET_TOKENS and res.flags.max_num_seqs == 128  # vLLM's CPU defaults
    return req, cpu_profile()


def test_waves_burst_matches_the_simulator(fidelity_server, plan_and_profile, capsys):
    req, profile = plan_and_profile
    outcomes, real_pre, sent_at = run_burst_in_place(fidelity_server.base_url, WAVES, queued=QUEUE)
    by = {o.name: o for o in outcomes}
    assert by["R"].status_400 and not by["R"].ok, by["R"]  # vLLM's API rejects a prompt over max_model_len
    served = [o for o in outcomes if o.name != "R"]
    assert all(o.ok for o in served), [o.error for o in served if not o.ok]
    assert all(o.completion_tokens == r.output for o, r in zip(served, WAVES))
    sim = simulate_burst(req, WAVES, profile)
    d = sim.to_dict()
    per = {WAVES[p["i"]].name: p for p in d["per_request"]}
    real_times = [(o.name, o.first_token_s) for o in served if o.name.startswith("W")]
    sim_waves = waves([(n, p["first_token"]) for n, p in per.items() if n.startswith("W")], 1e-9)
    real_waves = waves(real_times, WAVE_GAP_S)
    real_order, sim_order = real_first_token_order(outcomes), sim_first_token_order(sim, WAVES)
    with capsys.disabled():
        print("\n[sim fidelity] " + json.dumps({
            "burst": "waves", "real": {"waves": real_waves, "order": real_order, "preemptions": real_pre, "rejected": 1,
                                       "first_token_s": {o.name: round(o.first_token_s, 3) for o in served},
                                       "sent_s": {n: round(t, 3) for n, t in sent_at.items()}},
            "sim": {"waves": sim_waves, "order": sim_order, "preemptions": d["preemptions"],
                    "rejected": d["rejected"]}}))
    assert d["rejected"] == 1 and per["R"]["status"] == "rejected"
    # the blockers first (identical: any order among them), then the queue in send order, in the same waves
    assert sorted(real_order[:3]) == sorted(sim_order[:3]) == ["B0", "B1", "B2"]
    assert [n for w in sim_waves for n in w] == [f"W{i}" for i in range(6)]  # FCFS: nobody overtakes
    problems = wave_disagreements(real_times, sim_waves)
    assert not problems, (problems, real_waves, sim_waves)
    assert len(sim_waves) >= 3  # non-trivial: the freed blocks and the budget admit the queue in waves
    assert real_pre >= 1  # the burst overflows the cache
    assert d["preemptions"] == real_pre


def test_the_wave_check_allows_only_what_the_client_cannot_observe():
    """The tolerance of the waves test, pinned on the CI runs that shaped it (no server needed)."""
    sim = [["W0"], ["W1", "W2"], ["W3", "W4"], ["W5"]]
    ci_run_22 = [("W0", 5.933), ("W1", 5.936), ("W2", 5.945), ("W3", 5.943), ("W4", 5.955), ("W5", 10.768)]
    assert wave_disagreements(ci_run_22, sim) == []  # three steps delivered together, W3 2 ms early
    idle = [("W0", 4.016), ("W1", 4.155), ("W2", 4.155), ("W3", 4.271), ("W4", 4.271), ("W5", 9.787)]
    assert wave_disagreements(idle, sim) == []
    split = [("W0", 4.0), ("W1", 4.15), ("W2", 4.196), ("W3", 4.3), ("W4", 4.3), ("W5", 9.8)]
    assert wave_disagreements(split, sim) == []  # one step's first tokens 46 ms apart
    overtaken = [("W0", 4.0), ("W1", 4.15), ("W2", 4.15), ("W3", 4.3), ("W4", 4.3), ("W5", 4.1)]
    assert any("W5" in p and "before" in p for p in wave_disagreements(overtaken, sim))
    # W0 | W1 W2 merged into one wave the budget allows (1,900 tokens): an observable boundary
    # missing, with W3 | W4 split apart: one missing plus two extra is more than the tolerance
    wrong = [("W0", 4.0), ("W1", 4.005), ("W2", 4.3), ("W3", 4.5), ("W4", 4.7), ("W5", 9.8)]
    assert any("boundaries" in p for p in wave_disagreements(wrong, sim))


def test_rejection_and_clamping_match(fidelity_server, plan_and_profile):
    """A prompt of max_model_len tokens or more is refused (HTTP 400); a prompt that fits with a
    max_tokens that does not is clamped to max_model_len - prompt (vLLM's get_max_tokens)."""
    req, profile = plan_and_profile
    url = fidelity_server.base_url
    model = model_name(url)
    for i, prompt in enumerate((2100, MAX_MODEL_LEN)):
        res = stream_completion(url, model, random_prompt_ids(prompt, 500 + i), 16, timeout=60)
        assert not res.ok and "-> 400" in (res.error or ""), (prompt, res)
    clamped = completion_without_min_tokens(url, 2000, 100, seed=502)
    assert clamped["usage"]["completion_tokens"] == MAX_MODEL_LEN - 2000 and clamped["finish_reason"] == "length"
    limits = (Req("over", 0.0, 2100, 16), Req("equal", 0.0, MAX_MODEL_LEN, 16), Req("clamped", 0.0, 2000, 100))
    d = simulate_burst(req, limits, profile).to_dict()
    per = {limits[p["i"]].name: p for p in d["per_request"]}
    assert d["rejected"] == 2 and per["over"]["status"] == per["equal"]["status"] == "rejected"
    assert per["clamped"]["status"] == "completed" and per["clamped"]["output_tokens"] == MAX_MODEL_LEN - 2000


def test_identical_burst_preemptions_match(fidelity_server, plan_and_profile, capsys):
    req, profile = plan_and_profile
    outcomes, real_pre, _ = run_burst_in_place(fidelity_server.base_url, IDENTICAL, seed=9000, together=True)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    sim = simulate_burst(req, IDENTICAL, profile)
    d = sim.to_dict()
    with capsys.disabled():
        print("\n[sim fidelity] " + json.dumps({"burst": "identical", "real": {"preemptions": real_pre},
                                                 "sim": {"preemptions": d["preemptions"], "rejected": d["rejected"]}}))
    assert d["rejected"] == 0
    assert real_pre >= 1
    assert d["preemptions"] == real_pre
