"""Baseline compressors, as DDP hooks in the same harness (same byte accounting).

    dense     fp32 all-reduce (the reference: 4 bytes x parameters per rank per step)
    fp16      fp16 all-reduce (2 bytes a value)
    int8      8-bit quantization per layer, max-abs scale (fp32), stochastic rounding,
              all-gathered (int8 sums would overflow an all-reduce): 1 byte a value + 4 a layer
    terngrad  TernGrad: per-layer clipping at 2.5 sigma, scale s = max|g|, stochastic
              {-1,0,+1}, packed 2 bits a value (4 a byte) + 4-byte scale a layer, all-gathered
    dgc       DGC as its public code sends it: GradSA's sparsifier and staleness compensation
              (same density and warm-up), but per layer an int32 count, fp32 values and int32
              (dgc) or int64 (dgc-int64) indices, no further encoding
    powersgd  torch's PowerSGD hook (rank r, error feedback), bytes counted on every tensor it
              hands to all_reduce, its first start_powerSGD_iter dense steps included
Sum order is rank order on every rank, so all ranks apply identical updates.
"""


import time

import numpy as np
import torch
import torch.distributed as dist

from pimrt.gradsa.accounting import ByteCounter
from pimrt.gradsa.errors import GradSAError
from pimrt.gradsa.exchange import allgather_payloads, allreduce_tensor, group_size


class BaselineState:
    def __init__(self, process_group=None, seed: int = 0):
        self.group = process_group
        self.counter = ByteCounter()
        self.step = 0
        rank = dist.get_rank(process_group) if dist.is_initialized() else 0
        self.generator = torch.Generator().manual_seed(seed * 1000003 + rank)

    def _account(self, bucket) -> int:
        n = bucket.buffer().numel()
        self.counter.dense_bytes += 4 * n
        self.counter.elements += n
        step = self.step
        if bucket.is_last():
            self.step += 1
            self.counter.steps += 1
        return step

    def state_dict(self) -> dict:
        return {"step": self.step, "counter": self.counter.snapshot(), "generator": self.generator.get_state()}

    def load_state_dict(self, d: dict, device="cpu") -> None:
        self.step = int(d["step"])
        self.counter.load(d.get("counter", {}))
        if "generator" in d:
            self.generator.set_state(d["generator"])


# ---------------------------------------------------------------- all-reduce baselines
def dense_hook(state: BaselineState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    step = state._account(bucket)
    buf = bucket.buffer()
    world = group_size(state.group)
    return allreduce_tensor(buf, state.group, state.counter, step).then(lambda f: f.value().div_(world))


def fp16_hook(state: BaselineState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    step = state._account(bucket)
    buf = bucket.buffer()
    world = group_size(state.group)
    t0 = time.perf_counter()
    half = buf.to(torch.float16).div_(world)
    state.counter.encode_s += time.perf_counter() - t0

    def back(f):
        buf.copy_(f.value())
        return buf

    return allreduce_tensor(half, state.group, state.counter, step).then(back)


# ---------------------------------------------------------------- quantizers (pure)
def quantize_int8(g: torch.Tensor, generator: torch.Generator | None = None) -> tuple[float, torch.Tensor]:
    """Max-abs scaled int8 with stochastic rounding (unbiased); returns (scale, int8 tensor)."""
    peak = float(g.abs().max()) if g.numel() else 0.0
    if peak == 0.0:
        return 0.0, torch.zeros(g.shape, dtype=torch.int8)
    x = g.float().cpu() / (peak / 127.0)
    noise = torch.rand(x.shape, generator=generator)
    return peak / 127.0, torch.floor(x + noise).clamp_(-127, 127).to(torch.int8)


def ternarize(g: torch.Tensor, generator: torch.Generator | None = None, clip_sigma: float = 2.5
              ) -> tuple[float, torch.Tensor]:
    """TernGrad: clip to clip_sigma std, s = max|g|, t = sign(g)*Bernoulli(|g|/s); (s, int8 t)."""
    x = g.float().cpu()
    if clip_sigma > 0 and x.numel() > 1:
        bound = clip_sigma * float(x.std())
        if bound > 0:
            x = x.clamp(-bound, bound)
    s = float(x.abs().max()) if x.numel() else 0.0
    if s == 0.0:
        return 0.0, torch.zeros(x.shape, dtype=torch.int8)
    keep = torch.rand(x.shape, generator=generator) < (x.abs() / s)
    return s, (torch.sign(x) * keep).to(torch.int8)


def pack_ternary(t: torch.Tensor) -> np.ndarray:
    """{-1,0,+1} -> 2-bit codes (0, 1, 2 for -1), four a byte, low bits first."""
    code = t.numpy().astype(np.int16)
    code = np.where(code < 0, 2, code).astype(np.uint8)
    pad = (-code.size) % 4
    if pad:
        code = np.concatenate([code, np.zeros(pad, np.uint8)])
    c = code.reshape(-1, 4)
    return (c[:, 0] | (c[:, 1] << 2) | (c[:, 2] << 4) | (c[:, 3] << 6)).astype(np.uint8)


def unpack_ternary(b: np.ndarray, n: int) -> np.ndarray:
    c = np.stack([(b >> s) & 3 for s in (0, 2, 4, 6)], axis=1).reshape(-1)[:n].astype(np.int8)
    return np.where(c == 2, -1, c).astype(np.float32)


def _dense_gather_hook(state: BaselineState, bucket, encode_layer, decode_layer, layer_bytes):
    step = state._account(bucket)
    buf = bucket.buffer()
    world = group_size(state.group)
    numels = [g.numel() for g in bucket.gradients()]
    t0 = time.perf_counter()
    parts = [encode_layer(g.detach().reshape(-1), state.generator) for g in bucket.gradients()]
    payload = torch.from_numpy(np.concatenate(parts)).to(buf.device)
    state.counter.encode_s += time.perf_counter() - t0
    fut = allgather_payloads(payload, state.group, state.counter, step, equal_size=True)

    def decode(f):
        t1 = time.perf_counter()
        out = np.zeros(buf.numel(), np.float32)
        for pl in f.value():
            pl = pl.cpu().numpy()
            off = pos = 0
            for n in numels:
                size = layer_bytes(n)
                out[off:off + n] += decode_layer(pl[pos:pos + size], n)
                off, pos = off + n, pos + size
        out /= np.float32(world)
        buf.copy_(torch.from_numpy(out).to(device=buf.device, dtype=buf.dtype))
        state.counter.decode_s += time.perf_counter() - t1
        return buf

    return fut.then(decode)


def _int8_encode(g, gen):
    scale, q = quantize_int8(g, gen)
    return np.concatenate([np.frombuffer(np.float32(scale).tobytes(), np.uint8), q.numpy().view(np.uint8)])


def _int8_decode(b, n):
    return b[4:4 + n].view(np.int8).astype(np.float32) * b[:4].view("<f4")[0]


def int8_hook(state: BaselineState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return _dense_gather_hook(state, bucket, _int8_encode, _int8_decode, lambda n: 4 + n)


def _tern_encode(g, gen):
    s, t = ternarize(g, gen)
    return np.concatenate([np.frombuffer(np.float32(s).tobytes(), np.uint8), pack_ternary(t)])


def _tern_decode(b, n):
    return unpack_ternary(b[4:], n) * b[:4].view("<f4")[0]


def terngrad_hook(state: BaselineState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return _dense_gather_hook(state, bucket, _tern_encode, _tern_decode, lambda n: 4 + (n + 3) // 4)


# ---------------------------------------------------------------- DGC's public wire format
class DGCFormat:
    """Per layer: int32 count k | k fp32 values | k int32/int64 indices (no encoding)."""

    def __init__(self, index_bits: int = 32):
        if index_bits not in (32, 64):
            raise GradSAError(f"DGC index width must be 32 or 64 bits, got {index_bits}")
        self.itype = np.dtype("<i4") if index_bits == 32 else np.dtype("<i8")

    def encode(self, layers):
        parts, decoded = [], []
        for idx, vals, _ in layers:
            v = np.asarray(vals, "<f4")
            parts += [np.array([v.size], "<i4").tobytes(), v.tobytes(), np.asarray(idx).astype(self.itype).tobytes()]
            decoded.append(v.astype(np.float32))
        return b"".join(parts), decoded

    def decode(self, buf: np.ndarray, numels):
        out, pos = [], 0
        for n in numels:
            k = int(buf[pos:pos + 4].view("<i4")[0])
            if not 0 <= k <= n:
                raise GradSAError(f"corrupt DGC payload: {k} values for a layer of {n}")
            pos += 4
            vals = buf[pos:pos + 4 * k].view("<f4").astype(np.float32)
            pos += 4 * k
            w = self.itype.itemsize
            idx = buf[pos:pos + w * k].view(self.itype).astype(np.int64)
            pos += w * k
            out.append((idx, vals))
        return out


# ---------------------------------------------------------------- PowerSGD, counted
class _CountingDist:
    """Stands in for torch.distributed inside torch's PowerSGD module: counts all_reduce bytes."""

    def __init__(self):
        self.counter: ByteCounter | None = None

    def __getattr__(self, name):
        return getattr(dist, name)

    def all_reduce(self, tensor, *args, **kwargs):
        group = kwargs.get("group")
        if self.counter is not None:
            self.counter.allreduce(tensor.numel() * tensor.element_size(), dist.get_world_size(group))
        return dist.all_reduce(tensor, *args, **kwargs)


_COUNTING = _CountingDist()


class _CountingDefaultHooks:
    """Stands in for torch's default_hooks inside the PowerSGD module: its first
    start_powerSGD_iter steps (and 1-D buckets) go through default._allreduce_fut, a dense
    fp32 all-reduce of the whole bucket that _CountingDist never sees; count it too."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def _allreduce_fut(self, process_group, tensor):
        if _COUNTING.counter is not None:
            _COUNTING.counter.allreduce(tensor.numel() * tensor.element_size(), dist.get_world_size(process_group))
        return self.real._allreduce_fut(process_group, tensor)


class PowerSGDWrapState(BaselineState):
    def __init__(self, process_group=None, rank: int = 4, start_iter: int = 2, seed: int = 0):
        super().__init__(process_group, seed)
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        if rank < 1:
            raise GradSAError(f"PowerSGD rank must be >= 1, got {rank}")
        self.psgd = psgd
        psgd.dist = _COUNTING  # the module's own `dist` global; every all_reduce now counted
        if not isinstance(psgd.default, _CountingDefaultHooks):
            psgd.default = _CountingDefaultHooks(psgd.default)   # and its dense warm-up steps
        # start_iter >= 2: torch requires vanilla all-reduce until DDP has rebuilt its buckets.
        self.inner = psgd.PowerSGDState(process_group=process_group, matrix_approximation_rank=rank,
                                        start_powerSGD_iter=max(2, start_iter), random_seed=seed,
                                        use_error_feedback=True, warm_start=True)

    def state_dict(self) -> dict:
        d = super().state_dict()
        s = self.inner
        d["powersgd"] = {"iter": s.iter, "error_dict": {k: v.cpu() for k, v in s.error_dict.items()},
                         "p_memory_dict": {k: v.cpu() for k, v in s.p_memory_dict.items()},
                         "q_memory_dict": {k: v.cpu() for k, v in s.q_memory_dict.items()}}
        return d

    def load_state_dict(self, d: dict, device="cpu") -> None:
        super().load_state_dict(d, device)
        p = d.get("powersgd")
        if p:
            self.inner.iter = p["iter"]
            for name in ("error_dict", "p_memory_dict", "q_memory_dict"):
                getattr(self.inner, name).update({k: v.to(device) for k, v in p[name].items()})


def powersgd_hook(state: PowerSGDWrapState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    state._account(bucket)
    _COUNTING.counter = state.counter
    t0 = time.perf_counter()
    fut = state.psgd.powerSGD_hook(state.inner, bucket)
    state.counter.encode_s += time.perf_counter() - t0
    return fut
