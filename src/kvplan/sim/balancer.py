"""How a stream of requests reaches data-parallel replicas: the load balancer in front of them.

``--data-parallel-size N`` makes N replicas; which replica a request lands on decides how evenly
they are loaded, and so the latency tail at a given rate. Four balancers, one per way a fleet is
run (``--load-balancer``):

- ``vllm``: ``vllm serve --data-parallel-size N``'s own balancer (``DPLBAsyncMPClient.
  get_core_engine_for_request`` in ``vllm/v1/engine/core_client.py``), whose rule changed with the
  version (:func:`vllm_rule`, each rule read in the wheels named there);
- ``round_robin``: request i goes to replica i mod N, in arrival order (nginx's default, Kubernetes
  Services in IPVS mode, most gateways);
- ``random``: each request to a replica drawn uniformly (kube-proxy's iptables mode picks a
  backend at random per connection; a fresh connection per request is assumed);
- ``least_outstanding``: the replica with the fewest requests in flight (sent, response not
  finished), ties taken in turn after the last choice (nginx ``least_conn``; Envoy's
  ``LEAST_REQUEST`` with every host scanned).

A rule is *static* when its choice depends only on the arrival order (round-robin, random, and
vLLM's balancer in the versions where it sees no engine state): the replicas are then independent
and each can be simulated apart - or one of them stands for all (symmetry). Otherwise the
replicas are simulated together and the rule sees their state when it chooses
(:mod:`kvplan.sim.fleet`).
"""
from __future__ import annotations

import random as _random
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import UsageError

BALANCERS = ("vllm", "round_robin", "random", "least_outstanding")
DEFAULT_BALANCER = "vllm"

#: vLLM's DP coordinator publishes the engines' request counts to the API servers at most every
#: 100 ms (``DPCoordinatorProc``'s ``min_stats_update_interval_ms``), and every 5 s when they have
#: not changed (``wait_for = ... else 5000``): read in 0.10.1.1 … 0.33.0 ``v1/engine/coordinator.py``.
STATS_INTERVAL_S = 0.1
UNCHANGED_PUBLISH_S = 5.0

_ALIASES = {"vllm": "vllm", "internal": "vllm", "round_robin": "round_robin", "round-robin": "round_robin",
            "rr": "round_robin", "random": "random", "least_outstanding": "least_outstanding",
            "least-outstanding": "least_outstanding", "least_request": "least_outstanding",
            "least-request": "least_outstanding", "least_conn": "least_outstanding"}


def parse_balancer(text: Optional[str]) -> str:
    """``--load-balancer`` value -> one of :data:`BALANCERS` (``None``: the default)."""
    if text is None or not str(text).strip():
        return DEFAULT_BALANCER
    key = str(text).strip().lower()
    if key not in _ALIASES:
        raise UsageError(f"--load-balancer must be one of {', '.join(BALANCERS)}, got {text!r}")
    return _ALIASES[key]


@dataclass(frozen=True)
class Rule:
    """One balancer as the simulator runs it: its name, what it does in words, where the rule was
    read, and the parameters of its choice."""

    balancer: str  # one of BALANCERS
    kind: str  # round_robin | random | least_outstanding | in_flight | snapshot | blind | inflight_floor
    text: str  # the rule in words
    source: str  # where it was read
    clients: int = 1  # API servers, each with its own view (vLLM's DPLBAsyncMPClient per API server)
    score: str = ""  # snapshot rules: "lexicographic" (0.9) or "4w+r" (0.10+)
    rotate: bool = False  # ties: the scan's start moves on after each choice
    seed: int = 0

    @property
    def static(self) -> bool:
        """The choice depends on the arrival order only: replicas are independent."""
        return self.kind in ("round_robin", "random", "blind")

    def to_dict(self) -> dict:
        return {"name": self.balancer, "rule": self.kind, "text": self.text, "source": self.source,
                "api_servers": self.clients, "static": self.static}


def rule_for(balancer: str, *, replicas: int, vllm_version: Optional[Sequence[int]] = None, moe: bool = False,
             seed: int = 0) -> Rule:
    """The :class:`Rule` of ``balancer`` for ``replicas`` replicas (vLLM's own depends on the version
    and on whether the model is a mixture of experts)."""
    balancer = parse_balancer(balancer)
    if balancer == "round_robin":
        return Rule("round_robin", "round_robin", "request i goes to replica i mod N, in arrival order",
                    "nginx upstream default; Kubernetes Service (IPVS rr)")
    if balancer == "random":
        return Rule("random", "random", "each request to a replica drawn uniformly at random",
                    "kube-proxy iptables mode (random per connection)", seed=seed)
    if balancer == "least_outstanding":
        return Rule("least_outstanding", "least_outstanding",
                    "the replica with the fewest requests in flight (sent, not finished); ties in turn",
                    "nginx least_conn; Envoy LEAST_REQUEST (all hosts scanned)")
    return vllm_rule(tuple(vllm_version or (0, 33)), replicas=replicas, moe=moe)


def vllm_rule(version: Sequence[int], *, replicas: int, moe: bool = False) -> Rule:
    """vLLM's internal DP balancer (``DPLBAsyncMPClient.get_core_engine_for_request``), per version.

    Read in the wheels 0.8.5, 0.9.2, 0.10.1.1, 0.11.0, 0.12.0-0.19.0, 0.22.0, 0.24.0, 0.26.0-0.29.0,
    0.32.0, 0.33.0
    (``v1/engine/core_client.py``, ``core.py``, ``coordinator.py``, ``entrypoints/cli/serve.py``):

    - up to 0.8: the engine with the fewest of this API server's requests in flight (exact, no
      coordinator); ties to the lowest rank;
    - 0.9: the coordinator's ``[waiting, running]`` snapshot (every 100 ms), the lexicographic
      minimum; the chosen engine's waiting (or, when 0, running) count +1 until the next snapshot;
    - 0.10-0.13: score ``4 × waiting + running`` on the snapshot, the chosen engine's waiting
      +``api_server_count`` until the next one; the scan starts at the API server's index;
    - 0.14 to 0.26, dense models: the ranks run as independent engines (``EngineCoreProc``), which
      never publish their counts (only ``DPEngineCoreProc``, for MoE, calls
      ``_maybe_publish_request_counts``; fixed by vllm-project/vllm#49204): the snapshot stays all
      zeros, republished every 5 s, so each API server's choice follows only its own increments - a
      round-robin blind to load, restarted every 5 s. MoE models keep the 0.10 rule. From 0.26
      (vllm#47420; not in 0.24.0) the scan's start moves on after each choice;
    - 0.27+ (vllm#49204; read in 0.27.0, 0.28.0, 0.29.0, 0.32.0, 0.33.0): score
      ``max(api_server_count × this server's in-flight, waiting + running)`` plus
      ``waiting × 6 × max(0, kv_cache_usage - 0.5)``, the scan's start rotating.

    ``--api-server-count`` defaults to 1 up to 0.14 and to the DP size from 0.15 (internal LB).
    """
    v = tuple(version[:2])
    clients = replicas if v >= (0, 15) else 1
    src = "vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request"
    if v < (0, 9):
        return Rule("vllm", "in_flight", "the engine with the fewest of this API server's requests in flight; ties to "
                    "the lowest rank", f"{src} (read in 0.8.5)", clients=1)
    if v < (0, 10):
        return Rule("vllm", "snapshot", "lexicographic minimum of the coordinator's [waiting, running] (100 ms), "
                    "+1 locally to the chosen engine", f"{src}, coordinator.py (read in 0.9.2)",
                    clients=1, score="lexicographic")
    rotate = v >= (0, 26)
    if v < (0, 14) or (moe and v < (0, 27)):
        return Rule("vllm", "snapshot", "lowest 4 x waiting + running on the coordinator's counts (100 ms), the "
                    "chosen engine's waiting + api_server_count locally", f"{src}, coordinator.py (read in "
                    "0.10.1.1-0.13.0; MoE to 0.26.0)", clients=clients, score="4w+r", rotate=rotate)
    if v < (0, 27):
        return Rule("vllm", "blind", "dense DP ranks never publish their counts: each API server turns through the "
                    "engines on its own increments (round-robin blind to load), restarting every 5 s",
                    f"{src}; core.py EngineCoreProc (read in 0.14.0-0.19.0, 0.26.0; fixed by vllm#49204)",
                    clients=clients, score="4w+r", rotate=rotate)
    return Rule("vllm", "inflight_floor", "lowest max(api_server_count x in-flight, waiting + running) + waiting x 6 "
                "x max(0, kv_cache_usage - 0.5), the scan's start rotating", f"{src} (read in 0.27.0-0.29.0, "
                "0.32.0, 0.33.0)", clients=clients, score="floor", rotate=True)


# ---- static rules: the assignment from the arrival order ---------------------------------------

def assign_static(rule: Rule, n_requests: int, replicas: int) -> list[int]:
    """The replica of each request, in arrival order, for a static rule."""
    if replicas <= 1:
        return [0] * n_requests
    if rule.kind == "round_robin":
        return [i % replicas for i in range(n_requests)]
    if rule.kind == "random":
        rng = _random.Random(rule.seed)
        return [rng.randrange(replicas) for _ in range(n_requests)]
    if rule.kind == "blind":
        raise UsageError("the blind vLLM rule needs arrival times: use assign_blind")
    raise ValueError(f"{rule.kind} is not a static rule")


def assign_blind(rule: Rule, arrivals: Sequence[float], replicas: int) -> list[int]:
    """vLLM 0.14-0.28 with a dense model: each API server's counts are all zeros at every publish
    (every 5 s from t = 0) plus its own increments (+api_server_count to the chosen engine's
    waiting, score 4 × waiting + running); requests reach the API servers in turn."""
    clients = max(1, rule.clients)
    counts = [[0] * replicas for _ in range(clients)]
    start = [(replicas * c) // clients for c in range(clients)]
    next_reset = UNCHANGED_PUBLISH_S
    out = []
    for k, t in enumerate(arrivals):
        while t >= next_reset:
            counts = [[0] * replicas for _ in range(clients)]
            next_reset += UNCHANGED_PUBLISH_S
        c = k % clients
        mine = counts[c]
        best, pick = None, 0
        for i in range(replicas):
            idx = (start[c] + i) % replicas
            if best is None or mine[idx] < best:
                best, pick = mine[idx], idx
        mine[pick] += 4 * clients  # waiting += client_count, scored 4 x waiting
        if rule.rotate:
            start[c] = (start[c] + 1) % replicas
        out.append(pick)
    return out


# ---- dynamic rules: the choice from the replicas' state ------------------------------------------

class Router:
    """A dynamic rule's state. ``publish`` (every :attr:`tick_s`, when set) hands it each replica's
    ``(waiting, running, kv_usage)``; ``choose`` picks the replica of request ``k`` from each
    replica's requests in flight (sent by the balancer, not finished)."""

    tick_s: Optional[float] = None

    def __init__(self, rule: Rule, replicas: int):
        self.rule = rule
        self.n = replicas

    def publish(self, stats: Sequence[tuple[int, int, float]]) -> None:  # pragma: no cover - overridden
        pass

    def choose(self, k: int, in_flight: Sequence[int]) -> int:  # pragma: no cover - overridden
        raise NotImplementedError


class LeastOutstanding(Router):
    """Fewest in flight; ties: the first at or after the replica following the last choice."""

    def __init__(self, rule: Rule, replicas: int):
        super().__init__(rule, replicas)
        self.last = -1

    def choose(self, k: int, in_flight: Sequence[int]) -> int:
        n = self.n
        best, pick = None, 0
        for i in range(n):
            idx = (self.last + 1 + i) % n
            v = in_flight[idx]
            if best is None or v < best:
                best, pick = v, idx
        self.last = pick
        return pick


class VllmInFlight(Router):
    """0.8: ``min(core_engines, key=num_reqs_in_flight)``: the first (lowest rank) of the least loaded."""

    def choose(self, k: int, in_flight: Sequence[int]) -> int:
        best, pick = None, 0
        for i, v in enumerate(in_flight):
            if best is None or v < best:
                best, pick = v, i
        return pick


class _Published(Router):
    """The coordinator's snapshot (every 100 ms, the same for every API server) and each API
    server's own increments since it (reset by the next snapshot)."""

    tick_s = STATS_INTERVAL_S

    def __init__(self, rule: Rule, replicas: int):
        super().__init__(rule, replicas)
        clients = max(1, rule.clients)
        self.snap: list[tuple[int, int, float]] = [(0, 0, 0.0)] * replicas
        self.epoch = 0
        self.seen = [-1] * clients  # the snapshot each API server's increments belong to
        self.local: list = [[0] * replicas for _ in range(clients)]
        self.start = [(replicas * c) // clients for c in range(clients)]

    def publish(self, stats: Sequence[tuple[int, int, float]]) -> None:
        self.snap = list(stats)
        self.epoch += 1

    def _mine(self, c: int) -> list[int]:
        if self.seen[c] != self.epoch:
            self.seen[c] = self.epoch
            self.local[c] = [0] * self.n
        return self.local[c]


class VllmSnapshot(_Published):
    """0.9-0.13 (and MoE to 0.26): the coordinator's counts every 100 ms, each API server's own
    increments in between; score lexicographic (0.9) or 4 × waiting + running (0.10+)."""

    def choose(self, k: int, in_flight: Sequence[int]) -> int:
        clients = len(self.seen)
        c = k % clients
        n = self.n
        if self.rule.score == "lexicographic":
            # 0.9: [waiting, running] copied from the snapshot, +1 to waiting (or running when 0)
            if self.seen[c] != self.epoch:
                self.seen[c] = self.epoch
                self.local[c] = [[w, r] for w, r, _kv in self.snap]
            view = self.local[c]
            best, pick = None, 0
            for i in range(n):
                idx = (self.start[c] + i) % n
                if best is None or view[idx] < best:
                    best, pick = view[idx], idx
            view[pick][0 if view[pick][0] else 1] += 1
            return pick
        mine, snap = self._mine(c), self.snap
        best, pick = None, 0
        for i in range(n):
            idx = (self.start[c] + i) % n
            w, r, _kv = snap[idx]
            score = 4 * (w + mine[idx]) + r
            if best is None or score < best:
                best, pick = score, idx
        mine[pick] += clients
        if self.rule.rotate:
            self.start[c] = (self.start[c] + 1) % n
        return pick


class VllmInflightFloor(_Published):
    """0.27+: ``max(client_count × in_flight, waiting + running) + waiting × 6 × max(0, kv - 0.5)``
    on the coordinator's counts (100 ms) and this API server's own in-flight count; the chosen
    engine's waiting + client_count locally; the scan's start rotates. With several API servers
    (requests reach them in turn) each one's in-flight count is taken as its share of the
    replica's (client_count × own ≈ the replica's total)."""

    def choose(self, k: int, in_flight: Sequence[int]) -> int:
        clients = len(self.seen)
        c = k % clients
        mine, snap, n = self._mine(c), self.snap, self.n
        best, pick = None, 0
        for i in range(n):
            idx = (self.start[c] + i) % n
            w, r, kv = snap[idx]
            w += mine[idx]
            score = float(max(in_flight[idx], w + r))
            if w and kv > 0.5:
                score += w * 6.0 * (kv - 0.5)
            if best is None or score < best:
                best, pick = score, idx
        mine[pick] += clients
        self.start[c] = (self.start[c] + 1) % n
        return pick


def router_for(rule: Rule, replicas: int) -> Router:
    kinds = {"least_outstanding": LeastOutstanding, "in_flight": VllmInFlight, "snapshot": VllmSnapshot,
             "inflight_floor": VllmInflightFloor}
    if rule.kind not in kinds:
        raise ValueError(f"{rule.kind} is a static rule")
    return kinds[rule.kind](rule, replicas)
