"""The GradSA DDP communication hook.

    state = GradSAState(model, process_group=None, config=SparseConfig(density=0.001))
    ddp.register_comm_hook(state, gradsa_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr, momentum=0, weight_decay=0)

Per bucket, for every parameter view of the bucket (layer-wise): add weight decay, optionally
clip, fold the gradient into the parameter's momentum u and residual v (momentum correction),
pick the elements of v above a sampled top-k threshold at the current (warm-up) density,
encode them (pimrt.gradsa.encoding), keep in v what was not sent (including quantization
error) and mask their momentum. One payload per bucket is all-gathered (padded, gloo-safe);
every rank decodes all payloads in rank order, sums and divides by the world size, so all ranks
apply bit-identical updates. Momentum and weight decay live in the hook: use an optimizer
without them. The sparse format is pluggable (`fmt`), which is how the DGC baseline reuses
this hook with DGC's public wire format.
"""


import time
from dataclasses import dataclass, asdict

import numpy as np
import torch
import torch.distributed as dist

from pimrt.gradsa import encoding, state as st
from pimrt.gradsa.accounting import ByteCounter
from pimrt.gradsa.errors import GradSAError
from pimrt.gradsa.exchange import allgather_payloads, group_size
from pimrt.gradsa.sparsify import density_at, k_for, select


@dataclass
class SparseConfig:
    density: float = 0.001           # fraction of each layer sent after warm-up
    warmup_steps: int = 20           # exponential density decay start_density -> density
    warmup_start_density: float = 0.05
    momentum: float = 0.9            # momentum correction (0: plain error feedback)
    nesterov: bool = False
    masking: bool = True             # momentum factor masking
    weight_decay: float = 0.0        # added to the local gradient before accumulation
    clip_norm: float = 0.0           # per-layer local clipping (0: off)
    sample_size: int = 4096          # sample for the top-k threshold estimate
    stale_age: int = 0               # age-aware damping: off when 0
    stale_decay: float = 1.0
    seed: int = 0

    def validate(self) -> "SparseConfig":
        if not 0.0 < self.density <= 1.0:
            raise GradSAError(f"density must be in (0, 1], got {self.density} "
                              f"(a compression ratio must be >= 1)")
        if not 0.0 < self.warmup_start_density <= 1.0:
            raise GradSAError(f"warm-up start density must be in (0, 1], got {self.warmup_start_density}")
        if self.warmup_steps < 0:
            raise GradSAError(f"warm-up steps must be >= 0, got {self.warmup_steps}")
        if not 0.0 <= self.momentum < 1.0:
            raise GradSAError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.sample_size < 16:
            raise GradSAError(f"sample size must be >= 16, got {self.sample_size}")
        if not 0.0 <= self.stale_decay <= 1.0:
            raise GradSAError(f"stale decay must be in [0, 1], got {self.stale_decay}")
        return self


class GradSAFormat:
    """pimrt's compact wire format (see encoding.py)."""

    def __init__(self, value_codec: str = "int8", index_codec: str = "auto"):
        if value_codec not in encoding.VALUE_CODECS:
            raise GradSAError(f"unknown value codec {value_codec!r}; valid: {', '.join(encoding.VALUE_CODECS)}")
        if index_codec not in ("auto",) + encoding.INDEX_CODECS:
            raise GradSAError(f"unknown index codec {index_codec!r}; valid: auto, {', '.join(encoding.INDEX_CODECS)}")
        self.value_codec, self.index_codec = value_codec, index_codec
        self.index_use: dict[str, int] = {}

    def encode(self, layers):
        parts, decoded = [encoding.payload_header(len(layers))], []
        for idx, vals, numel in layers:
            rec, dec, used = encoding.encode_layer(idx, vals, numel, self.value_codec, self.index_codec)
            self.index_use[used] = self.index_use.get(used, 0) + 1
            parts.append(rec)
            decoded.append(dec)
        return b"".join(parts), decoded

    def decode(self, buf: np.ndarray, numels):
        return [(L.indices, L.values) for L in encoding.decode_payload(buf, numels)]


class GradSAState:
    """State of the hook: config, per-parameter residuals (by name), counters, the group."""

    def __init__(self, model: torch.nn.Module, process_group=None, config: SparseConfig | None = None,
                 fmt=None):
        self.group = process_group
        self.config = (config or SparseConfig()).validate()
        self.fmt = fmt or GradSAFormat()
        self.names = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
        self.shapes = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
        self.store = st.ResidualStore(track_age=self.config.stale_age > 0)
        self.counter = ByteCounter()
        self.step = 0
        rank = dist.get_rank(process_group) if dist.is_initialized() else 0
        self.generator = torch.Generator().manual_seed(self.config.seed * 1000003 + rank)
        self.dropped = 0.0

    def name_of(self, p: torch.Tensor) -> str:
        try:
            return self.names[id(p)]
        except KeyError:
            raise GradSAError("a bucket holds a parameter the GradSA state does not know: build the "
                              "state from the same model that DDP wraps") from None

    def density(self) -> float:
        c = self.config
        return density_at(self.step, c.density, c.warmup_steps, c.warmup_start_density)

    def state_dict(self) -> dict:
        return {"step": self.step, "residuals": self.store.state_dict(), "counter": self.counter.snapshot(),
                "config": asdict(self.config), "generator": self.generator.get_state()}

    def load_state_dict(self, d: dict, device="cpu") -> None:
        self.store.load_state_dict(d["residuals"], self.shapes, device)
        self.step = int(d["step"])
        self.counter.load(d.get("counter", {}))
        if "generator" in d:
            self.generator.set_state(d["generator"])


def compress_bucket(state: GradSAState, params, grads) -> tuple[bytes, list[int]]:
    """Fold a bucket's gradients into the residuals, select, encode and commit. Pure of any
    communication: the payload bytes and the layer sizes are returned."""
    cfg = state.config
    density = state.density()
    layers, chosen = [], []
    for p, g in zip(params, grads):
        name = state.name_of(p)
        flat = g.detach().reshape(-1).to(torch.float32)
        if cfg.weight_decay:
            local = torch.add(flat, p.detach().reshape(-1), alpha=cfg.weight_decay)
        else:
            local = flat.clone() if cfg.clip_norm > 0 else flat  # clipping works in place
        st.clip_(local, cfg.clip_norm)
        ps = state.store.get(name, local.numel(), local.device)
        st.accumulate(ps, local, cfg.momentum, cfg.nesterov)
        dropped = st.damp_stale(ps, cfg.stale_age, cfg.stale_decay)
        if dropped is not None:
            state.dropped += float(dropped.abs().sum())
        idx = select(ps.v, k_for(local.numel(), density), cfg.sample_size, state.generator)
        vals = ps.v[idx]
        layers.append((idx.cpu().numpy(), vals.cpu().numpy(), local.numel()))
        chosen.append((ps, idx))
    payload, decoded = state.fmt.encode(layers)
    for (ps, idx), dec in zip(chosen, decoded):
        st.commit(ps, idx, torch.from_numpy(np.ascontiguousarray(dec)).to(ps.v.device), cfg.masking)
    return payload, [g.numel() for g in grads]


def aggregate(payloads, fmt, numels: list[int], world: int) -> np.ndarray:
    """Decode every rank's payload (rank order), sum, divide by the world size."""
    offsets = np.concatenate(([0], np.cumsum(numels)[:-1])).astype(np.int64)
    out = np.zeros(int(sum(numels)), dtype=np.float32)
    for pl in payloads:
        layers = fmt.decode(pl, numels)
        idx = np.concatenate([off + ix for off, (ix, _) in zip(offsets, layers)])
        vals = np.concatenate([v for _, v in layers]).astype(np.float32)
        out[idx] += vals
    out /= np.float32(world)
    return out


def gradsa_hook(state: GradSAState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    t0 = time.perf_counter()
    payload, numels = compress_bucket(state, bucket.parameters(), bucket.gradients())
    c = state.counter
    c.dense_bytes += 4 * buf.numel()
    c.elements += buf.numel()
    step = state.step
    if bucket.is_last():
        state.step += 1
        c.steps += 1
    tensor = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(buf.device)
    c.encode_s += time.perf_counter() - t0
    world = group_size(state.group)
    fut = allgather_payloads(tensor, state.group, c, step)

    def decode(f):
        t1 = time.perf_counter()
        payloads = [p.cpu().numpy() for p in f.value()]
        out = aggregate(payloads, state.fmt, numels, world)
        buf.copy_(torch.from_numpy(out).to(device=buf.device, dtype=buf.dtype))
        c.decode_s += time.perf_counter() - t1
        return buf

    return fut.then(decode)
