"""Tensor liveness of vLLM 0.7.0's Mllama vision profile, replayed on the CPU: the evidence behind
docs/vllm-semantics.md's "what this reading cannot explain" (log 150, vLLM PR 12126's H100 run of
Llama-3.2-11B-Vision at 128 sequences).

A line-by-line replica of the code the V0 profile runs (``mllama.py`` in the 0.7.0 wheel):
``_parse_and_validate_image_input``'s float32 ``out_images``, ``MllamaVisionModel.forward`` (unfold +
linear patch embedding, the precomputed embeddings, the padding to 8, the aspect-ratio mask, 32 local
layers keeping 5 inputs, the stack, 8 gated global layers, the cat) and the projector, at the real
widths (1,280 / 5,120, 16 heads, 4 tiles of 1,601 patches padded to 1,608) with random weights.
Attention is replaced by what a memory-efficient kernel allocates (its output and a float32
logsumexp), as the 0.7.0 vision attention (``F.scaled_dot_product_attention`` with a mask) runs on
CUDA. Live bytes are counted per storage through a ``TorchDispatchMode`` (each aten op's outputs,
freed when the last tensor on the storage dies); the weights and the caller's per-sequence pixel
batch are not counted. Everything scales with the number of images, so one image gives the per-image
cost:

    .venv-vllm/bin/python benchmarks/mllama_v0_liveness.py 1     # torch from the CPU vLLM venv (~40 s)

Result (2026-12-05, torch 2.13 CPU): 0.444 GiB per four-tile image at the second global layer's GELU
(the mask, the float32 out_images and 23 units of 1,280 bf16 values per patch: the local output, its
five kept inputs and their ``torch.stack`` copy, the global transformer's input, and its second
layer's input, residual, normed input, fc1 and GELU outputs), plus 0.014 GiB of the caller's pixels: 58.6 GiB for 128 images, where vLLM printed
an activation peak of 36.63 GiB for the whole profile and kvplan plans 44.86 (its local-stage peak).
"""
import math
import sys
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

D, I, HEADS, LOCAL, GLOBAL, TILES, IMG, PATCH = 1280, 5120, 16, 32, 8, 4, 560, 14
KEPT = [3, 7, 15, 23, 30]
DT = torch.bfloat16


class Live(TorchDispatchMode):
    def __init__(self, external):
        super().__init__()
        self.external = external
        self.refs, self.sizes, self.cur, self.peak, self.where = {}, {}, 0, 0, ""
        self.tracked = set()
        self.label = ""

    def _dec(self, key, tid):
        self.tracked.discard(tid)
        self.refs[key] -= 1
        if self.refs[key] == 0:
            self.cur -= self.sizes.pop(key)
            del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or id(t) in self.tracked:
                continue
            key = t.untyped_storage()._cdata
            if key in self.external:
                continue
            if key not in self.refs:
                n = t.untyped_storage().nbytes()
                self.refs[key], self.sizes[key] = 0, n
                self.cur += n
                if self.cur > self.peak:
                    self.peak, self.where = self.cur, f"{self.label} {func}"
            self.refs[key] += 1
            self.tracked.add(id(t))
            weakref.finalize(t, self._dec, key, id(t))
        return out


MODE = None


def label(s):
    if MODE is not None:
        MODE.label = s


def sdpa_stand_in(q, k, v, attn_mask=None, dropout_p=0.0):
    # memory-efficient attention: the output and a float32 logsumexp, nothing quadratic
    out = torch.empty_like(q)
    torch.empty(q.shape[:-1], dtype=torch.float32)
    return out


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_proj = nn.Linear(D, 3 * D, bias=False)
        self.o_proj = nn.Linear(D, D, bias=False)
        self.hd = D // HEADS

    def forward(self, h, mask):
        qkv = self.qkv_proj(h)
        q, k, v = qkv.split([D, D, D], dim=-1)
        q = q.view(q.shape[0], q.shape[1], HEADS, self.hd).transpose(1, 2)
        k = k.view(k.shape[0], k.shape[1], HEADS, self.hd).transpose(1, 2)
        v = v.view(v.shape[0], v.shape[1], HEADS, self.hd).transpose(1, 2)
        o = sdpa_stand_in(q, k, v, attn_mask=mask)
        o = o.transpose(1, 2).contiguous()
        o = o.reshape(o.shape[0], o.shape[1], -1)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(D, I), nn.Linear(I, D), nn.GELU()

    def forward(self, h):
        h = self.fc1(h)
        h = self.act(h)
        return self.fc2(h)


class Layer(nn.Module):
    def __init__(self, gated):
        super().__init__()
        self.self_attn, self.mlp = Attn(), MLP()
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(D), nn.LayerNorm(D)
        self.is_gated = gated
        if gated:
            self.gate_attn = nn.Parameter(torch.ones(1) * math.pi / 4)
            self.gate_ffn = nn.Parameter(torch.ones(1) * math.pi / 4)

    def forward(self, hidden_state, attention_mask):
        residual = hidden_state
        hidden_state = self.input_layernorm(hidden_state)
        hidden_state = self.self_attn(hidden_state, attention_mask)
        gate_attn = 1 if not self.is_gated else self.gate_attn.tanh()
        hidden_state = residual + gate_attn * hidden_state
        residual = hidden_state
        hidden_state = self.post_attention_layernorm(hidden_state)
        hidden_state = self.mlp(hidden_state)
        gate_ffn = 1 if not self.is_gated else self.gate_ffn.tanh()
        hidden_state = residual + gate_ffn * hidden_state
        return hidden_state


class Encoder(nn.Module):
    def __init__(self, n, gated, kept):
        super().__init__()
        self.layers = nn.ModuleList([Layer(gated) for _ in range(n)])
        self.output_hidden_states = kept or []
        self.name = "global" if gated else "local"

    def forward(self, hidden_states, attention_mask=None):
        encoder_states = ()
        for i, layer in enumerate(self.layers):
            label(f"{self.name} layer {i}")
            if i in self.output_hidden_states:
                encoder_states = encoder_states + (hidden_states,)
            hidden_states = layer(hidden_states, attention_mask)
        if len(self.layers) - 1 in self.output_hidden_states:
            encoder_states = encoder_states + (hidden_states,)
        return hidden_states, encoder_states


def prepare_mask(aspect_ratio_mask, num_patches, target_length, dtype):
    batch_size, max_num_tiles = aspect_ratio_mask.shape
    m = aspect_ratio_mask.view(batch_size, max_num_tiles, 1, 1).to(dtype)
    m = m.repeat(1, 1, target_length, 1)
    pad_patches = target_length - num_patches
    m[:, :, -pad_patches:] = 0
    m = 1 - m
    m = m.reshape(batch_size, max_num_tiles * target_length, 1)
    m = m @ m.transpose(-1, -2) * torch.finfo(dtype).min
    return m.unsqueeze(1)


class Vision(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_patches = (IMG // PATCH) ** 2 + 1
        self.unfold = nn.Unfold(kernel_size=(PATCH, PATCH), stride=PATCH)
        self.patch_linear = nn.Linear(3 * PATCH * PATCH, D, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(D))
        self.pos_gate = nn.Parameter(torch.zeros(1))
        self.pos_embedding = nn.Parameter(torch.randn(self.num_patches, D))
        self.tile_embedding = nn.Embedding(9, TILES * self.num_patches * D)
        self.pre_tile = nn.Embedding(9, TILES * D)
        self.post_tile = nn.Embedding(9, TILES * D)
        self.pre_gate, self.post_gate = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
        self.layernorm_pre, self.layernorm_post = nn.LayerNorm(D), nn.LayerNorm(D)
        self.transformer = Encoder(LOCAL, False, KEPT)
        self.global_transformer = Encoder(GLOBAL, True, None)

    def aspect(self, h, ids, emb, gate):
        e = emb(ids).reshape(-1, TILES, 1, D)
        e = e * gate.tanh()
        return h + e

    def forward(self, pixel_values, aspect_ratio_ids, aspect_ratio_mask):
        label("patch embedding")
        b, media, tiles, c, hh, ww = pixel_values.shape
        pixel_values = pixel_values.reshape(b * media * tiles, c, hh, ww)
        aspect_ratio_ids = aspect_ratio_ids.reshape(b * media, -1)
        x = self.unfold(pixel_values.to(DT))
        x = x.permute(0, 2, 1)
        hidden_state = self.patch_linear(x)
        del x
        _, num_patches, dim = hidden_state.shape
        hidden_state = hidden_state.reshape(b * media, tiles, -1, dim)
        hidden_state = self.aspect(hidden_state, aspect_ratio_ids, self.pre_tile, self.pre_gate)
        hidden_state = hidden_state.reshape(b * media * tiles, num_patches, dim)
        cls = self.class_embedding.expand(hidden_state.shape[0], 1, dim)
        hidden_state = torch.cat([cls, hidden_state], dim=1)
        num_patches += 1
        hidden_state = hidden_state.reshape(b * media, tiles, num_patches, dim)
        gated = (1 - self.pos_gate.tanh()) * self.pos_embedding
        hidden_state = hidden_state + gated.view(1, 1, self.num_patches, D)
        tpe = self.tile_embedding(aspect_ratio_ids).reshape(hidden_state.shape[0], TILES, self.num_patches, D)
        hidden_state = hidden_state + self.pos_gate.tanh() * tpe
        del tpe, gated
        hidden_state = self.layernorm_pre(hidden_state)
        pad = (8 - (hidden_state.shape[-2] % 8)) % 8
        hidden_state = F.pad(hidden_state, (0, 0, 0, pad), mode="constant", value=0)
        slice_index = -pad if pad > 0 else None
        label("mask")
        attention_mask = aspect_ratio_mask.reshape(b * media, -1)
        attention_mask = prepare_mask(attention_mask, self.num_patches, hidden_state.shape[2], DT)
        hidden_state = hidden_state.view(b * media, -1, dim)
        output = self.transformer(hidden_state, attention_mask=attention_mask)
        label("stack")
        hidden_state, intermediate_hidden_states = output[0], output[1]
        intermediate_hidden_states = torch.stack(intermediate_hidden_states, dim=-1)
        hidden_state = self.layernorm_post(hidden_state)
        hidden_state = hidden_state.reshape(b * media, tiles, num_patches + pad, dim)
        hidden_state = self.aspect(hidden_state, aspect_ratio_ids, self.post_tile, self.post_gate)
        hidden_state = hidden_state.reshape(b * media, tiles * (num_patches + pad), dim)
        hidden_state = self.global_transformer(hidden_state, attention_mask=attention_mask)[0]
        label("cat")
        hidden_state = hidden_state.reshape(b * media, tiles, num_patches + pad, dim)
        hidden_state = hidden_state[:, :, :slice_index]
        hidden_state = hidden_state.reshape(b, media, tiles, num_patches, dim)
        intermediate_hidden_states = intermediate_hidden_states.reshape(b * media, tiles, num_patches + pad, -1)
        intermediate_hidden_states = intermediate_hidden_states[:, :, :slice_index]
        intermediate_hidden_states = intermediate_hidden_states.reshape(b, media, tiles, num_patches, -1)
        return torch.cat([hidden_state, intermediate_hidden_states], dim=-1)


def main(images: int):
    global MODE
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = Vision().to(DT)
        projector = nn.Linear(D * 6, 4096).to(DT)
    # the caller's batch: one (1, 4, 3, 560, 560) float32 tensor per sequence (MultiModalKwargs on the GPU)
    batch = [torch.zeros(1, TILES, 3, IMG, IMG) for _ in range(images)]
    ext = {p.untyped_storage()._cdata for p in list(model.parameters()) + list(projector.parameters())}
    ext |= {t.untyped_storage()._cdata for t in batch}
    MODE = Live(ext)
    with torch.inference_mode(), MODE:
        label("parse: out_images")
        out_images = torch.zeros(images, 1, TILES, 3, IMG, IMG, dtype=torch.float32)
        ar_ids = torch.ones(images, 1, dtype=torch.int64)
        ar_mask = torch.zeros(images, 1, TILES, dtype=torch.int64)
        for b in range(images):
            out_images[b, 0, :TILES] = batch[b][0]
            ar_ids[b, 0] = 6
            ar_mask[b, 0] = 1
        states = model(out_images, ar_ids, ar_mask)
        label("projector")
        states = projector(states)
    n = images * TILES * 1608
    d_unit = n * D * 2
    mask = images * (TILES * 1608) ** 2 * 2
    print(f"images {images}: peak {MODE.peak / 2**30:.3f} GiB at [{MODE.where}]; "
          f"d-unit {d_unit / 2**30:.4f} GiB, mask {mask / 2**30:.4f} GiB, out_images {out_images.nbytes / 2**30:.4f} GiB, "
          f"caller's batch {sum(t.nbytes for t in batch) / 2**30:.4f} GiB (not counted); "
          f"peak = mask + out_images + {(MODE.peak - mask - out_images.nbytes) / d_unit:.2f} d")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
