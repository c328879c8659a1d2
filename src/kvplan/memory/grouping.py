"""KV-cache groups and bytes per block, as ``vllm/v1/core/kv_cache_planning.py`` builds them.

All groups share one pool of block ids; a block id costs ``bytes_per_block`` on every rank (the
widest group's pages), and a request takes blocks from every group. A dense model has one group
of all its layers; a hybrid (sliding + full, attention + Mamba) is cut into groups of
``group_size`` layers, and short groups are padded.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from .kv_specs import AttentionSpec, KVCacheSpec, MambaSpec, SizingContext, cdiv


@dataclass(frozen=True)
class KVGroup:
    spec: KVCacheSpec  # one layer's spec (every layer of a group has the same page size)
    layers: tuple[int, ...]


@dataclass(frozen=True)
class KVLayout:
    groups: tuple[KVGroup, ...]
    group_size: int
    padding_layers: int
    bytes_per_block: tuple[int, ...]  # per pipeline stage (one rank of it)
    layer_pages: tuple[int, ...]  # page bytes of every layer, by layer index
    padding_by_bucket: tuple[tuple[int, int], ...] = ()  # (padding layers, real layers) per bucket

    @property
    def block_size(self) -> int:
        """vLLM sets cache_config.block_size to the smallest block size of its groups."""
        return min(g.spec.block_size for g in self.groups)

    def blocks_per_request(self, ctx: SizingContext, per_group_rounding: bool = True) -> int:
        if per_group_rounding:
            return sum(g.spec.blocks_per_request(ctx) for g in self.groups)
        # 0.11–0.21: cdiv(group_size · Σ_g max_mem(g), page · group_size)
        page = self.groups[0].spec.page_size_bytes
        total = sum(g.spec.max_memory_usage_bytes(ctx) for g in self.groups)
        return cdiv(total * self.group_size, page * self.group_size)

    def needed_bytes(self, ctx: SizingContext, rule: str, stage: range, stage_index: int) -> int:
        """KV bytes the admission check says one max-length request needs on one rank (see
        VllmSemantics.needed_memory_rule for the three historical rules)."""
        bpb = self.bytes_per_block[stage_index]
        if rule == "first_group":
            return bpb * self.groups[0].spec.blocks_per_request(ctx)
        if rule == "layers":
            on_stage = set(stage)
            return sum(g.spec.blocks_per_request(ctx) * g.spec.page_size_bytes * sum(1 for i in g.layers if i in on_stage)
                       for g in self.groups)
        return bpb * sum(g.spec.blocks_per_request(ctx) for g in self.groups)

    def padding_waste(self) -> float:
        """Worst bucket's padding / real layers: the figure vLLM's warning prints."""
        return max((pad / n for pad, n in self.padding_by_bucket if n), default=0.0)

    def padding_warnings(self) -> list[str]:
        """vLLM warns per bucket when padding exceeds 5% of its layers."""
        return [f"Add {pad} padding layers, may waste at most {pad / n * 100:.2f}% KV cache memory"
                for pad, n in self.padding_by_bucket if n and pad / n > 0.05]


def _unify_page_sizes(specs: list[KVCacheSpec]) -> list[KVCacheSpec]:
    """``unify_kv_cache_spec_page_size``: bring every page up to the largest one, by enlarging an
    attention layer's block size when the ratio is whole, else by padding the page."""
    biggest = max(s.page_size_bytes for s in specs)
    out = []
    for s in specs:
        page = s.page_size_bytes
        if page == biggest:
            out.append(s)
        elif isinstance(s, AttentionSpec) and biggest % page == 0 and s.page_size_padded is None:
            out.append(replace(s, block_size=s.block_size * (biggest // page)))
        else:
            out.append(replace(s, page_size_padded=biggest))
    return out


def build_layout(specs: Sequence[KVCacheSpec], stages: Sequence[range], threshold: float = 1.5) -> KVLayout:
    """Group per-layer specs (index = layer index) and size a block on each pipeline stage."""
    specs = list(specs)
    if not specs:
        raise ValueError("a model without KV-cache layers is attention-free: vLLM uses 1 block")
    distinct = list(dict.fromkeys(specs))
    if len(distinct) == 1 or all(type(s) is type(distinct[0]) and not isinstance(s, MambaSpec)
                                  for s in distinct):
        # Dense (or one attention type with differing shapes): one group, page = Σ pages.
        groups = (KVGroup(specs[0], tuple(range(len(specs)))),)
        group_size, padding = len(specs), 0
        by_bucket = []
    else:
        if len({s.page_size_bytes for s in distinct}) > 1:
            unified = dict(zip(distinct, _unify_page_sizes(distinct)))
            specs = [unified[s] for s in specs]
            distinct = list(dict.fromkeys(specs))
        buckets: dict[KVCacheSpec, list[int]] = {s: [] for s in distinct}
        for i, s in enumerate(specs):
            buckets[s].append(i)
        sizes = [len(v) for v in buckets.values()]
        lo, hi = min(sizes), max(sizes)
        group_size = hi if hi < threshold * lo else lo
        out: list[KVGroup] = []
        by_bucket = []
        for spec, layer_ids in buckets.items():
            n_groups = cdiv(len(layer_ids), group_size)
            for g in range(n_groups):
                out.append(KVGroup(spec, tuple(layer_ids[g::n_groups])))
            by_bucket.append((n_groups * group_size - len(layer_ids), len(layer_ids)))
        groups = tuple(out)
        padding = sum(p for p, _ in by_bucket)
    pages = tuple(s.page_size_bytes for s in specs)
    per_stage = []
    for stage in stages:
        on_stage = set(stage)
        per_stage.append(max(sum(pages[i] for i in g.layers if i in on_stage) for g in groups))
    return KVLayout(groups, group_size, padding, tuple(per_stage), pages, tuple(by_bucket))
