"""Round trip: every start-up error text the planner writes (kvplan.memory.admission, vLLM's own
wording per version) is recognised by `kvplan doctor`'s signatures (kvplan.ops.doctor.signatures)
with the same numbers, for every vLLM version whose rules kvplan follows, and diagnosed as the
matching finding when it appears in a log line the way vLLM prints it."""
from __future__ import annotations

import inspect
import re

import pytest

from kvplan.memory import admission
from kvplan.memory.semantics import LATEST, VllmSemantics
from kvplan.ops.doctor import diagnose
from kvplan.ops.doctor import signatures as sig

GIB = 1 << 30

#: Every minor version kvplan follows (parse_version accepts 0.4 and newer, LATEST is the newest
#: read), the patch releases where a rule changed (semantics.py: 0.10.2, 0.20.1) and the engine
#: choice VLLM_USE_V1 gave on 0.7–0.10.
VERSIONS = ([VllmSemantics((0, m)) for m in range(4, LATEST[1] + 1)]
            + [VllmSemantics((0, 10, 2)), VllmSemantics((0, 20, 1))]
            + [VllmSemantics((0, m), engine) for m in (7, 8, 9, 10) for engine in ("V0", "V1")])


def _id(sem: VllmSemantics) -> str:
    return sem.label + (f"-{sem.engine_override}" if sem.engine_override else "")


def _logged(text: str) -> str:
    """One line as vLLM 0.x's engine core prints a start-up failure (prefix, level, location)."""
    return f"(EngineCore_DP0 pid=4242) ERROR 12-01 10:00:00 [core.py:708] ValueError: {text}"


def _findings(text: str):
    return diagnose([("vllm.log", "INFO 12-01 09:59:58 [api_server.py:1] vLLM API server version 0.0\n"
                      + _logged(text) + "\n")]).findings


@pytest.mark.parametrize("sem", VERSIONS, ids=_id)
@pytest.mark.parametrize("estimated", [20_480, 0])
def test_kv_cache_too_small_round_trip(sem, estimated):
    err = admission.max_model_len_too_large(sem, 32_768, needed_bytes=int(6.4 * GIB), available_bytes=4 * GIB,
                                            estimated=estimated, block_size=16, num_gpu_blocks=1_280)
    assert err.kind == "max_model_len_too_large"
    if sem.engine == "V0":
        m = sig.KV_TOO_SMALL_V0.search(err.message)
        assert m, err.message
        assert (sig.num(m.group("max_len")), sig.num(m.group("tokens"))) == (32_768, 16 * 1_280)
    else:
        m = sig.KV_TOO_SMALL_V1.search(err.message)
        assert m, err.message
        assert sig.num(m.group("max_len")) == 32_768
        assert (sig.num(m.group("needed")), sig.num(m.group("available"))) == (6.4, 4.0)
        # the estimate exists in the text from 0.9 on, only when vLLM found a fitting length
        has_estimate = estimated > 0 and sem.version >= (0, 9)
        assert sig.num(m.group("estimate")) == (estimated if has_estimate else None)
    findings = _findings(err.message)
    assert [f.id for f in findings] == ["kv_cache_too_small_for_max_model_len"]
    assert dict(findings[0].numbers)["max_model_len"] == 32_768


@pytest.mark.parametrize("sem", VERSIONS, ids=_id)
def test_no_memory_for_cache_blocks_round_trip(sem):
    err = admission.no_memory_for_cache_blocks(sem)
    assert sig.NO_BLOCKS.search(err.message), err.message
    assert [f.id for f in _findings(err.message)] == ["no_memory_for_cache_blocks"]


@pytest.mark.parametrize("sem", VERSIONS, ids=_id)
def test_free_memory_round_trip(sem):
    err = admission.free_memory_below_requested(sem, free=int(30.5 * GIB), total=80 * GIB, util=0.9,
                                                requested=72 * GIB)
    m = sig.FREE_MEMORY.search(err.message)
    assert m, err.message
    assert [sig.num(m.group(k)) for k in ("free", "total", "util", "requested")] == [30.5, 80.0, 0.9, 72.0]
    findings = _findings(err.message)
    assert [f.id for f in findings] == ["insufficient_free_memory"]
    assert dict(findings[0].numbers)["requested_gib"] == 72.0


@pytest.mark.parametrize("sem", VERSIONS, ids=_id)
def test_max_model_len_above_derived_round_trip(sem):
    err = admission.max_model_len_above_derived(sem, 8192, "max_position_embeddings", 4096.0, None)
    m = sig.MAX_LEN_ABOVE_DERIVED.search(err.message)
    assert m, err.message
    assert (sig.num(m.group("requested")), m.group("key"), sig.num(m.group("derived"))) == (
        8192, "max_position_embeddings", 4096.0)


def test_tp_heads_round_trip():
    err = admission.heads_not_divisible(64, 3)  # the same text in every version
    m = next(filter(None, (p.search(err.message) for p in sig.TP_NOT_DIVISIBLE)), None)
    assert m, err.message
    assert (m.group("what"), sig.num(m.group("value")), sig.num(m.group("tp"))) == ("attention heads", 64, 3)
    findings = _findings(err.message)
    assert [f.id for f in findings] == ["tp_not_divisible"]
    assert dict(findings[0].numbers)["tensor_parallel_size"] == 3


@pytest.mark.parametrize("device", ["cuda", "xpu"])
def test_weights_oom_round_trip(device):
    err = admission.weights_do_not_fit(150 * GIB, 80 * GIB, GIB // 2, tp=1, pp=1, device=device)
    assert sig.OOM.search(err.message), err.message
    # recognised as an out-of-memory error; the doctor does not (yet) read the load_model phase from it
    assert [f.id for f in _findings(err.message)] == ["cuda_oom_runtime"]


def test_uncharged_oom_round_trip():
    err = admission.uncharged_oom(4 * GIB, 72 * GIB, GIB // 2, 80 * GIB, "0.6.5")
    assert sig.OOM.search(err.message), err.message
    # an out-of-memory error like any other to the doctor; its numbers are kvplan's own explanation
    assert [f.id for f in _findings(err.message)] == ["cuda_oom_runtime"]


def test_every_startup_error_kind_is_covered():
    """A new kind of start-up error in admission.py needs its round trip here."""
    made = set(re.findall(r'StartupError\("(\w+)"', inspect.getsource(admission)))
    assert made == {"no_kv_memory", "max_model_len_too_large", "max_model_len_above_derived", "tp_heads", "free_memory",
                    "weights_oom", "kv_cache_oom", "scheduler_config", "block_size", "oom_uncharged"}


def test_every_error_template_reads_back_what_it_writes():
    """Each template of kvplan.memory.error_texts: the text it writes is found by its own pattern,
    every named field read back as written (whatever the alternative wording)."""
    from kvplan.memory import error_texts as et

    sample = {et.INT: 32_768, et.FLOAT: 6.4, et.WORD: "max_position_embeddings"}
    templates = [t for t in vars(et).values() if isinstance(t, et.Text)]
    assert len(templates) >= 7
    for t in templates:
        choices = {name: (list(kind) if isinstance(kind, tuple) else [""] if isinstance(kind, et.Raw)
                          else [sample[kind]]) for name, kind in t.kinds.items()}
        for i in range(max((len(c) for c in choices.values()), default=1)):
            values = {name: c[min(i, len(c) - 1)] for name, c in choices.items()}
            m = t.pattern.search(_logged(t.format(**values)))
            assert m, t.template
            for name, kind in t.kinds.items():
                if not isinstance(kind, (et.Alt, et.Raw)):
                    assert m.group(name) == str(values[name]), (t.template, name)


def test_scheduler_and_block_size_refusals_round_trip():
    """Issue 30 #1: what plan writes for vLLM's config checks, doctor reads back, with the fix."""
    from kvplan.memory.semantics import semantics

    cases = [
        (admission.scheduler_config_errors(10, 256, 4096, True)[0], "batch_below_seqs", "--max-num-batched-tokens 256"),
        (admission.scheduler_config_errors(100, 64, 4096, False)[0], "batch_below_len", "--enable-chunked-prefill"),
        (admission.block_size_refused(7, semantics("0.6.4")), "block_choice", "--block-size 8"),
        (admission.block_size_refused(7, semantics("0.19")), "block_kernel", "--block-size 16"),
        (admission.block_size_refused(7, semantics("0.33")), "block_kernel", "--block-size 16"),
    ]
    for err, check, first_fix in cases:
        findings = _findings(err.message)
        assert [f.id for f in findings] == ["config_refused"], err.message
        assert dict(findings[0].numbers)["check"] == check
        assert findings[0].fixes[0].change == first_fix


def test_a_kv_cache_too_big_for_the_gpu_reads_back_as_an_oom():
    err = admission.kv_cache_does_not_fit(60 * GIB, 33 * GIB, GIB // 2, 80 * GIB, "kv_cache_memory")
    assert [f.id for f in _findings(err.message)] == ["cuda_oom_runtime"]
