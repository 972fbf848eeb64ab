"""Functional co-execution: one real training step with CONV/linear in torch (the host; CUDA
when present) and every non-CONV op on a PIM backend chosen by name:

    golden  the bit-exact golden model of the PIM unit (pimrt.pim.GoldenBackend)
    rtl     the Verilated unit through the batch driver (pimrt.pim.driver.PimDriver)
    torch   the plain torch ops (reference)

The model is traced with torch.fx; batch norm, ReLU, residual adds and 2x2 pooling become
autograd functions whose forward and backward run the PIM kernels (pimrt.pim.kernels), group
by group over the output channels; the SGD update runs on the PIM too. Pools the unit cannot do
(and max-pool backward) stay on the host, as in the timing model.
"""
from __future__ import annotations

import copy
import operator
import time

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from pimrt.errors import ConfigError
from pimrt.pim import kernels
from pimrt.pim.data16 import widen

BACKENDS = ("golden", "rtl", "torch")


def make_backend(name: str):
    if name == "golden":
        from pimrt.pim import GoldenBackend
        return GoldenBackend()
    if name == "rtl":
        from pimrt.pim.driver import PimDriver
        return PimDriver()
    if name == "torch":
        return None
    raise ConfigError(f"unknown PIM backend {name!r}; choose one of {', '.join(BACKENDS)}")


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).contiguous().numpy()


def _t(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(like.device)


#: a tensor's dtype as the PIM's lanes name it (16-bit tensors: an AMP step's activations)
_LANES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_TORCH = {v: k for k, v in _LANES.items()}


def _data(t: torch.Tensor) -> tuple[np.ndarray, str]:
    """A tensor as the PIM kernels take it, and its lane dtype: float32; fp16 as np.float16,
    bf16 as uint16 bit patterns (pimrt.pim.data16); any other dtype as float32."""
    dt = _LANES.get(t.dtype, "f32")
    if dt == "f32":
        return _np(t), dt
    t = t.detach().to("cpu").contiguous()
    return (t.numpy() if dt == "f16" else t.view(torch.int16).numpy().view(np.uint16)), dt


def _tensor(a: np.ndarray, dt: str, like: torch.Tensor) -> torch.Tensor:
    """_data's inverse: the kernels' output of lane dtype `dt` as a tensor on like's device."""
    a = np.ascontiguousarray(a)
    if dt == "bf16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(like.device)
    return torch.from_numpy(a).to(like.device)


def _groups(c: int, groups: int) -> list[slice]:
    g = groups if c % groups == 0 else 1
    return [slice(c * i // g, c * (i + 1) // g) for i in range(g)]


def _relu6_state(y: np.ndarray) -> np.ndarray:
    """ReLU6's decision per element, from its output: 0 clamped at 0, 1 passed (0 < y < 6 or
    NaN: the gradient goes through), 2 clamped at 6."""
    return np.where(y >= 6, 2, np.where(y <= 0, 0, 1)).astype(np.int8)


# kind -> (forward kernel wrapper, backward kernel wrapper, the decision a replay needs)
_RELUS = {
    "relu": (kernels.relu_forward, kernels.relu_backward, lambda y, mask: mask),
    "relu6": (kernels.relu6_forward, kernels.relu6_backward, lambda y, mask: _relu6_state(y)),
}


class _ReLU(torch.autograd.Function):
    """ReLU or ReLU6 (`kind`) on the PIM, channel group by channel group."""

    @staticmethod
    def forward(ctx, x, pim, kind):
        fwd, _, decision = _RELUS[kind]
        xs, dt = _data(x)
        y = np.empty_like(xs)
        mask = np.empty(xs.shape, bool)
        for s in _groups(xs.shape[1], pim.groups) if xs.ndim > 1 else [slice(None)]:
            y[:, s], mask[:, s] = fwd(pim.backend, xs[:, s], dt)
        ctx.y, ctx.pim, ctx.kind = y, pim, kind  # backward works from the output, as torch does
        if pim.masks is not None:
            pim.masks.append(decision(widen(y, dt), mask))
        return _tensor(y, dt, x)

    @staticmethod
    def backward(ctx, dy):
        bwd = _RELUS[ctx.kind][1]
        d, dt = _data(dy)
        dx = np.empty_like(d)
        for s in _groups(d.shape[1], ctx.pim.groups) if d.ndim > 1 else [slice(None)]:
            dx[:, s] = bwd(ctx.pim.backend, ctx.y[:, s], d[:, s], dt)
        return _tensor(dx, dt, dy), None, None


class _Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, pim):
        if a.dtype != b.dtype:         # torch promotes to the wider dtype (exact) and adds
            wide = torch.promote_types(a.dtype, b.dtype)
            a, b = a.to(wide), b.to(wide)
        (an, dt), (bn, _) = _data(a), _data(b)
        y = np.empty_like(an)
        for s in _groups(an.shape[1], pim.groups) if an.ndim > 1 else [slice(None)]:
            y[:, s] = kernels.residual_add(pim.backend, an[:, s], bn[:, s], dt)
        return _tensor(y, dt, a)

    @staticmethod
    def backward(ctx, dy):
        return dy, dy, None


class _BatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, pim, eps):
        xs, dt = _data(x)            # a 16-bit x (AMP): y 16-bit, the statistics fp32
        gamma, beta = _np(weight), _np(bias)
        y = np.empty_like(xs)
        mean = np.empty(xs.shape[1], np.float32)
        invstd = np.empty(xs.shape[1], np.float32)
        for s in _groups(xs.shape[1], pim.groups):
            y[:, s], mean[s], invstd[s] = kernels.batchnorm_forward_2pass(
                pim.backend, xs[:, s], gamma[s], beta[s], eps, pim.slices, dtype=dt)
        ctx.save_for_backward(x, weight)
        ctx.mean, ctx.invstd, ctx.pim = mean, invstd, pim
        return _tensor(y, dt, x), _t(mean, x), _t(invstd, x)

    @staticmethod
    def backward(ctx, dy, _dmean, _dinvstd):
        x, weight = ctx.saved_tensors
        (xs, dt), gamma = _data(x), _np(weight)
        d = _data(dy.to(x.dtype))[0]
        dx = np.empty_like(xs)
        dg = np.empty(xs.shape[1], np.float32)
        db = np.empty(xs.shape[1], np.float32)
        for s in _groups(xs.shape[1], ctx.pim.groups):
            dx[:, s], dg[s], db[s] = kernels.batchnorm_backward_channels(
                ctx.pim.backend, xs[:, s], d[:, s], gamma[s], ctx.mean[s], ctx.invstd[s],
                dtype=dt)
        return _tensor(dx, dt, dy), _t(dg, dy), _t(db, dy), None, None


def _near(x: torch.Tensor) -> float:
    """How close to a ReLU's threshold an activation must be for rounding to put it on the
    other side in one step than in another: 1e-3 of the tensor's largest magnitude (two fp32
    steps' activations differ by about 1e-5 of it); for a 16-bit tensor (AMP) 16 units in
    the last place of its dtype (fp16 2^-6, bf16 2^-3 of it: two AMP steps round every
    activation to 16 bits, so they differ by ulps of it)."""
    rel = max(1e-3, 16 * torch.finfo(x.dtype).eps) if x.is_floating_point() else 1e-3
    return rel * float(x.detach().abs().nan_to_num(0.0).max()) if x.numel() else 0.0


class _MaskedReLU(torch.autograd.Function):
    """torch's ReLU with its mask (x > 0) replaced by a given one: the next of ops.replay.
    Counts in ops.flips the elements where the given mask differs from x > 0."""

    @staticmethod
    def forward(ctx, x, ops):
        mask = torch.from_numpy(ops.replay[ops.replayed]).to(x.device)
        ops.replayed += 1
        flip = (x > 0) != mask
        ops.flips += int(flip.sum())
        ops.hard_flips += int((flip & (x.abs() > _near(x))).sum())
        ctx.save_for_backward(mask)
        return torch.where(mask, x, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, dy):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, dy, torch.zeros_like(dy)), None


class _MaskedReLU6(torch.autograd.Function):
    """torch's ReLU6 with its decisions (clamped at 0, passed, clamped at 6: _relu6_state)
    replaced by given ones, the next of ops.replay; ops.flips counts where they differ from
    torch's own."""

    @staticmethod
    def forward(ctx, x, ops):
        state = torch.from_numpy(ops.replay[ops.replayed]).to(x.device)
        ops.replayed += 1
        own = torch.from_numpy(_relu6_state(F.relu6(x.detach()).float().cpu().numpy())).to(x.device)
        flip = own != state
        ops.flips += int(flip.sum())
        ops.hard_flips += int((flip & (x.abs() > _near(x)) & ((x - 6).abs() > _near(x))).sum())
        passed = state == 1
        ctx.save_for_backward(passed)
        return torch.where(passed, x, torch.where(state == 2, torch.full_like(x, 6.0),
                                                  torch.zeros_like(x)))

    @staticmethod
    def backward(ctx, dy):
        (passed,) = ctx.saved_tensors
        return torch.where(passed, dy, torch.zeros_like(dy)), None


class PimOps:
    """The backend, channel group count and batch slices the PIM functions use (batch norm
    takes its statistics per batch slice: pimrt.pim.kernels.batchnorm_forward_2pass).
    record_masks: keep every ReLU mask (a ReLU6's decisions: _relu6_state) of the step in
    self.masks (call by call; the torch backend records torch's own); replay
    (torch backend only): a list of such masks that the torch ReLUs use instead of their own,
    in the same order."""

    def __init__(self, backend: str, groups: int = 1, record_masks: bool = False,
                 replay: list | None = None, slices: int = 1):
        self.name = backend
        self.backend = make_backend(backend)
        self.groups = groups
        self.slices = slices
        self.masks = [] if record_masks else None
        # flips: replayed decisions that differ from torch's own; hard_flips: those at
        # activations not within rounding of the threshold (_near), which no rounding explains
        self.replay, self.replayed, self.flips, self.hard_flips = replay, 0, 0, 0

    def relu(self, x):
        if self.backend is None:
            if self.replay is None and self.masks is not None:   # torch's own decisions
                self.masks.append((x > 0).detach().cpu().numpy())
            return F.relu(x) if self.replay is None else _MaskedReLU.apply(x, self)
        return _ReLU.apply(x, self, "relu")

    def relu6(self, x):
        if self.backend is None:
            if self.replay is None and self.masks is not None:
                self.masks.append(_relu6_state(F.relu6(x.detach()).float().cpu().numpy()))
            return F.relu6(x) if self.replay is None else _MaskedReLU6.apply(x, self)
        return _ReLU.apply(x, self, "relu6")

    def add(self, a, b):
        return a + b if self.backend is None else _Add.apply(a, b, self)


class PimBatchNorm2d(nn.Module):
    """A BatchNorm2d whose training-mode forward and backward run on the PIM; it shares the
    original module's parameters and buffers."""

    def __init__(self, bn: nn.BatchNorm2d, ops: PimOps):
        super().__init__()
        self.bn, self.ops = bn, ops

    def forward(self, x):
        bn = self.bn
        if self.ops.backend is None or not bn.training:
            return bn(x)
        y, mean, invstd = _BatchNorm.apply(x, bn.weight, bn.bias, self.ops, bn.eps)
        with torch.no_grad():  # running statistics as torch keeps them (unbiased variance)
            n = x.numel() // x.shape[1]
            var = (1.0 / invstd.double() ** 2 - bn.eps) * n / max(n - 1, 1)
            m = bn.momentum if bn.momentum is not None else 0.1
            bn.running_mean.mul_(1 - m).add_(m * mean)
            bn.running_var.mul_(1 - m).add_((m * var).float())
            bn.num_batches_tracked += 1
        return y


class PimReLU(nn.Module):
    def __init__(self, ops: PimOps, six: bool = False):
        super().__init__()
        self.ops, self.six = ops, six

    def forward(self, x):
        return self.ops.relu6(x) if self.six else self.ops.relu(x)


class PimPool2d(nn.Module):
    """2x2 / stride-2 pooling on the PIM (max-pool backward on the host)."""

    def __init__(self, pool: nn.Module, ops: PimOps):
        super().__init__()
        self.pool, self.ops = pool, ops

    def forward(self, x):
        if self.ops.backend is None:
            return self.pool(x)
        return _Pool.apply(x, isinstance(self.pool, nn.MaxPool2d), self.ops)


class _Pool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, is_max, pim):
        xs, dt = _data(x)
        f = kernels.maxpool2_forward if is_max else kernels.avgpool2_forward
        y = f(pim.backend, xs, dt)
        ctx.xs, ctx.is_max, ctx.pim, ctx.dt = xs, is_max, pim, dt
        return _tensor(y, dt, x)

    @staticmethod
    def backward(ctx, dy):
        d, dt = _data(dy)
        if ctx.is_max:               # on the host: dy placed at each window's maximum (exact)
            dx = kernels.maxpool2_backward_host(widen(ctx.xs, dt), widen(d, dt))
            return _tensor(dx, "f32", dy).to(dy.dtype), None, None
        dx = kernels.avgpool2_backward(ctx.pim.backend, d, ctx.xs.shape, dt)
        return _tensor(dx, dt, dy), None, None


def _pool_fits(m: nn.Module) -> bool:
    def pair(v):
        return tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    return (isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)) and pair(m.kernel_size) == (2, 2)
            and pair(m.stride or m.kernel_size) == (2, 2) and pair(m.padding) == (0, 0)
            and not getattr(m, "ceil_mode", False))


def to_pim(model: nn.Module, ops: PimOps) -> torch.fx.GraphModule:
    """The model with its non-CONV ops on the PIM (a traced copy; the model is untouched)."""
    gm = torch.fx.symbolic_trace(copy.deepcopy(model))
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        if node.op == "call_module":
            m = modules[node.target]
            new = None
            if isinstance(m, nn.BatchNorm2d):
                new = PimBatchNorm2d(m, ops)
            elif isinstance(m, nn.ReLU):
                new = PimReLU(ops)
            elif isinstance(m, nn.ReLU6):
                new = PimReLU(ops, six=True)
            elif _pool_fits(m):
                new = PimPool2d(m, ops)
            if new is not None:
                parent, _, leaf = node.target.rpartition(".")
                setattr(gm.get_submodule(parent) if parent else gm, leaf, new)
        elif node.op == "call_function":
            if node.target in (F.relu, torch.relu) and len(node.args) == 1 and not node.kwargs:
                node.target = ops.relu
            elif node.target is F.relu6 and len(node.args) == 1 and not node.kwargs:
                node.target = ops.relu6
            elif node.target in (operator.add, torch.add) and len(node.args) == 2 and \
                    all(isinstance(a, torch.fx.Node) for a in node.args) and not node.kwargs:
                node.target = ops.add
        elif node.op == "call_method" and node.target == "relu" and len(node.args) == 1:
            node.op, node.target = "call_function", ops.relu
    gm.recompile()
    return gm


def _sgd_step_torch(model, lr, momentum, wd):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd)
    opt.step()


def _sgd_step_pim(model, backend, lr, momentum, wd):
    """The first SGD step on the PIM (the momentum buffer starts as the gradient, as torch's)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is None:
                continue
            w, g = _np(p), _np(p.grad)
            v0 = (g + np.float32(wd) * w).astype(np.float32)
            new_w, _ = kernels.sgd_update(backend, w.ravel(), g.ravel(), v0.ravel(), lr,
                                          momentum=0.0, weight_decay=wd)
            p.copy_(_t(new_w.reshape(w.shape), p))


def _gradsa_step_torch(model, lr, config):
    """GradSA's step on one rank in torch (pimrt.gradsa's own compress and decode, then plain
    SGD: p.add_(update, alpha=-lr)). Returns the GradSA state (residuals, momenta)."""
    from pimrt.gradsa.hook import GradSAState, aggregate, compress_bucket
    state = GradSAState(model, config=config)
    params = [p for p in model.parameters() if p.grad is not None]
    payload, numels = compress_bucket(state, params, [p.grad for p in params])
    update = torch.from_numpy(aggregate([payload], state.fmt, numels, 1))
    state.last_kept = [np.flatnonzero(update[o:o + n].numpy())
                       for o, n in zip(np.cumsum([0] + numels[:-1]), numels)]
    with torch.no_grad():
        off = 0
        for p, n in zip(params, numels):
            p.add_(update[off:off + n].view_as(p).to(p.device), alpha=-lr)
            off += n
    return state


def _gradsa_step_pim(model, backend, lr, config, copies=None):
    """The same step with the per-element work on the PIM (pimrt.runtime.exchange): the unit
    folds the gradient into u and v (gradsa_fold), the host draws the threshold from v as
    GradSA's select does (same generator), the unit masks (gradsa_select), the host keeps at
    most k of the candidates, encodes them, writes back the remainders and decodes; the unit
    applies the update (sgd_apply). copies (AMP): parameter name -> "f16" / "bf16" for the
    CONV weights whose apply also writes the 16-bit copy (sgd_apply_amp_<dtype>), each
    compared with torch's cast of the updated weight. -> (GradSA state, every copy equal)."""
    from pimrt.gradsa import sparsify as sp
    from pimrt.gradsa.hook import GradSAState, aggregate
    state = GradSAState(model, config=config)
    density = state.density()
    named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
    layers, chosen = [], []
    for name, p in named:
        w, g = _np(p).ravel(), _np(p.grad).ravel()
        ps = state.store.get(name, g.size, "cpu")
        u, v = kernels.gradsa_fold(backend, w, g, ps.u.numpy(), ps.v.numpy(), config.momentum,
                                   config.weight_decay)
        k = sp.k_for(g.size, density)
        mag = torch.from_numpy(np.abs(v))
        if g.size <= config.sample_size or k >= g.size // 4:     # select's exact top-k
            thr = float(torch.topk(mag, min(k, g.size), sorted=False).values.min())
        else:
            thr = sp.sample_threshold(mag, k, config.sample_size, state.generator)
        u, mask, d = kernels.gradsa_select(backend, v, u, thr)
        idx = torch.from_numpy(np.flatnonzero(mask))
        if idx.numel() > k:                                       # select keeps k of them
            idx = torch.sort(idx[torch.topk(mag[idx], k, sorted=False).indices]).values
        ps.u, ps.v = torch.from_numpy(u), torch.from_numpy(v)
        layers.append((idx.numpy(), v[idx.numpy()], g.size))
        chosen.append((ps, idx, d))
    payload, decoded = state.fmt.encode(layers)
    state.last_kept = [ix for ix, _, _ in layers]
    numels = [n for _, _, n in layers]
    update = aggregate([payload], state.fmt, numels, 1)
    off, copies, copies_equal = 0, copies or {}, True
    with torch.no_grad():
        for (name, p), (ps, idx, d), dec, n in zip(named, chosen, decoded, numels):
            if idx.numel():
                ps.v[idx] -= torch.from_numpy(np.ascontiguousarray(dec))   # the remainder
            d, upd = d.copy(), update[off:off + n]
            nz = np.flatnonzero(upd)
            d[nz] = upd[nz]               # scattered into the buffer the unit cleared to +0
            if name in copies:
                new_w, w16 = kernels.sgd_apply_amp(backend, _np(p).ravel(), d, lr, copies[name])
                copies_equal &= is_cast(w16, new_w, _DTYPES[copies[name]])
            else:
                new_w = kernels.sgd_apply(backend, _np(p).ravel(), d, lr)
            p.copy_(_t(new_w.reshape(p.shape), p))
            off += n
    return state, copies_equal


_DTYPES = {lanes: dtype for dtype, lanes in _LANES.items()}     # "f16" -> torch.float16


def is_cast(w16, w: np.ndarray, dtype: torch.dtype) -> bool:
    """Whether a 16-bit weight copy (as values16 gives it) is torch's cast of the fp32 weights
    w to dtype, bit for bit."""
    want = _data(torch.from_numpy(w).to(dtype))[0]
    return bool(np.array_equal(np.asarray(w16).view(np.uint16), np.asarray(want).view(np.uint16)))


def check_step(model_name: str, batch: int, input_size: int, backend: str = "golden",
               groups: int = 4, lr: float = 0.1, momentum: float = 0.9, wd: float = 5e-4,
               seed: int = 0, update: str = "sgd", density: float = 0.001,
               slices: int = 1) -> dict:
    """One training step with the PIM ops on `backend` against a plain torch step: loss,
    every gradient and every updated parameter compared; channel groups checked to give the
    same numbers as no groups. slices: batch norm's statistics per batch slice, as the
    forward pass by batch slices takes them (pimrt.runtime.schedule). update "gradsa"/"laysa": the update is GradSA's (one rank,
    momentum correction `momentum`, weight decay `wd`, `density`) on both sides, and the PIM's
    update is also checked against GradSA in torch on the PIM step's own gradients."""
    from pimrt import zoo
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ref = zoo.build(model_name, input_size=input_size).to(device).train()
    pim_model = copy.deepcopy(ref)
    masked_model = copy.deepcopy(ref)
    x = torch.randn(batch, 3, input_size, input_size, device=device)
    y = torch.randint(0, ref.num_classes if hasattr(ref, "num_classes") else 10, (batch,),
                      device=device)
    t0 = time.perf_counter()
    # dropout draws its masks from torch's generator: every forward pass below starts from the
    # same generator state, so the PIM step and the torch steps drop the same elements
    _same_draws(seed)
    loss_ref = F.cross_entropy(ref(x), y)
    loss_ref.backward()
    grads_ref = {n: p.grad.clone() for n, p in ref.named_parameters()}
    sparse = update != "sgd"
    if sparse:
        from pimrt.gradsa import SparseConfig
        config = SparseConfig(density=density, momentum=momentum, weight_decay=wd,
                              warmup_steps=0)      # the steady density the timing uses
        _gradsa_step_torch(ref, lr, config)
    else:
        _sgd_step_torch(ref, lr, momentum, wd)
    torch_wall = time.perf_counter() - t0

    if slices < 1 or batch % slices:
        raise ConfigError(f"slices={slices} does not divide the batch of {batch}")
    ops = PimOps(backend, groups, record_masks=True, slices=slices)
    gm = to_pim(pim_model, ops)
    t0 = time.perf_counter()
    _same_draws(seed)
    logits = gm(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in gm.named_parameters() if p.grad is not None}
    update_check = None
    if sparse:
        twin = copy.deepcopy(gm)            # the same parameters and gradients, torch's GradSA
        for n, p in twin.named_parameters():
            p.grad = grads[n].clone() if n in grads else None
        t_state = _gradsa_step_torch(twin, lr, config)
        if ops.backend is None:
            p_state = _gradsa_step_torch(gm, lr, config)
        else:
            p_state = _gradsa_step_pim(gm, ops.backend, lr, config)[0]
        twin_params = dict(twin.named_parameters())
        exact = all(torch.equal(p.detach(), twin_params[n].detach())
                    for n, p in gm.named_parameters())
        update_check = {
            "update": update, "density": p_state.density(),   # warm-up's at step 0
            "params_bit_equal": exact,
            "max_param_rel_diff": max(_rel(p.detach(), twin_params[n].detach())
                                      for n, p in gm.named_parameters()),
            "max_residual_rel_diff": max(_rel(ps.v, t_state.store.params[n].v)
                                         for n, ps in p_state.store.params.items()),
            "kept_elements": int(sum(len(ix) for ix in p_state.last_kept)),
        }
    elif ops.backend is None:
        _sgd_step_torch(gm, lr, momentum, wd)
    else:
        _sgd_step_pim(gm, ops.backend, lr, momentum, wd)
    wall = time.perf_counter() - t0

    def rel(a, b):
        return float((a - b).abs().max() / (b.abs().max() + 1e-12))

    names = {n.replace("bn.", ""): n for n in grads}  # PimBatchNorm2d wraps the BN as .bn
    grad_diff = max(rel(grads[names.get(n, n)], g) for n, g in grads_ref.items()
                    if names.get(n, n) in grads)
    # the same against a torch step that uses the PIM step's ReLU masks: an activation within
    # rounding of zero may fall on the other side of the ReLU in one step than in the other,
    # which moves gradients by far more than rounding (docs/runtime.md)
    flips, hard_flips, grad_diff_masks = 0, 0, grad_diff
    torch32 = {names.get(n, n): g for n, g in grads_ref.items()}
    if ops.masks:
        rops = PimOps("torch", groups, replay=ops.masks)
        mm = to_pim(masked_model, rops)
        _same_draws(seed)
        F.cross_entropy(mm(x), y).backward()
        flips, hard_flips = rops.flips, rops.hard_flips
        torch32 = {n: p.grad for n, p in mm.named_parameters() if p.grad is not None}
        grad_diff_masks = max(rel(grads[n], g) for n, g in torch32.items() if n in grads)
    # a gradient that cancels to almost nothing (a batch norm's bias whose output feeds another
    # batch norm through a linear layer: exactly 0 in exact arithmetic) has no correct digit in
    # either float32 step; such tensors are judged against a float64 step instead
    judged = {}
    within = grad_diff_masks <= GRAD_TOLERANCE and hard_flips == 0
    if not within and hard_flips == 0:
        judged = _judge_by_float64(masked_model, x, y, ops.masks, seed, grads, torch32)
        within = all(j["pim_vs_float64"] <= GRAD_TOLERANCE + NOISE_FACTOR * j["torch_vs_float64"]
                     for j in judged.values())
    ops.masks = None
    ref_params = dict(ref.named_parameters())
    param_diff = max(rel(p.detach(), ref_params[n.replace("bn.", "")].detach())
                     for n, p in gm.named_parameters() if n.replace("bn.", "") in ref_params)
    # channel groups give the same numbers: forward again, ungrouped, from the same weights
    same = True
    if ops.backend is not None and groups > 1:
        probe = copy.deepcopy(zoo.build(model_name, input_size=input_size)).to(device).train()
        probe.load_state_dict(zoo.build(model_name, input_size=input_size).state_dict())
        torch.manual_seed(seed + 1)
        xp = torch.randn(2 * slices, 3, input_size, input_size, device=device)
        a = to_pim(probe, PimOps(backend, groups, slices=slices))(xp)
        b = to_pim(probe, PimOps(backend, 1, slices=slices))(xp)
        same = bool(torch.equal(a, b))
    return {"backend": backend, "groups": groups, "slices": slices,
            "loss": float(loss.detach()),
            "loss_ref": float(loss_ref.detach()),
            "loss_abs_diff": abs(float(loss.detach()) - float(loss_ref.detach())),
            "max_grad_rel_diff": grad_diff, "max_param_rel_diff": param_diff,
            "relu_mask_flips": flips, "relu_mask_hard_flips": hard_flips,
            "max_grad_rel_diff_same_masks": grad_diff_masks,
            "grads_within_tolerance": within, "judged_by_float64": judged,
            "groups_equal": same, "wall_s": wall, "torch_wall_s": torch_wall,
            "device": device, "update_check": update_check}


GRAD_TOLERANCE = 1e-4     # a gradient's largest difference over its largest magnitude
# where torch's float32 step is itself far from float64 (cancellation), the PIM step may be at
# most this many times further (on MobileNetV2 at batch 8 it is 0.6-2.3 times: docs/runtime.md)
NOISE_FACTOR = 4


class _Float32MaskDropout(nn.Module):
    """Dropout in a float64 copy of a model that draws its mask exactly as the float32 model's
    dropout does (the same generator calls, on a float32 tensor of the same shape)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        keep = F.dropout(torch.ones(x.shape, dtype=torch.float32, device=x.device), self.p, True)
        return x * keep.to(x.dtype)


def _judge_by_float64(model, x, y, masks, seed, grads, torch32) -> dict:
    """For each gradient the PIM step has further than GRAD_TOLERANCE from torch's float32 step
    (same masks): how far each of the two is from a float64 torch step with the same masks and
    dropout, relative to the float64 gradient's largest magnitude."""
    m64 = copy.deepcopy(model).double()
    for name, mod in list(m64.named_modules()):
        if isinstance(mod, nn.Dropout):
            parent, _, leaf = name.rpartition(".")
            setattr(m64.get_submodule(parent) if parent else m64, leaf, _Float32MaskDropout(mod.p))
    ops64 = PimOps("torch", 1, replay=masks) if masks else PimOps("torch", 1)
    g64m = to_pim(m64, ops64)
    _same_draws(seed)
    F.cross_entropy(g64m(x.double()), y).backward()
    out = {}
    for n, p in g64m.named_parameters():
        if p.grad is None or n not in grads or n not in torch32:
            continue
        g64 = p.grad
        scale = float(g64.abs().max()) or 1e-300
        if float((grads[n] - torch32[n]).abs().max()) <= GRAD_TOLERANCE * (
                float(torch32[n].abs().max()) + 1e-12):
            continue
        out[n] = {"pim_vs_float64": float((grads[n].double() - g64).abs().max()) / scale,
                  "torch_vs_float64": float((torch32[n].double() - g64).abs().max()) / scale}
    return out


def _same_draws(seed: int) -> None:
    """Put torch's generators (CPU and CUDA) in the state every forward pass of check_step
    starts from, so that random layers (dropout) draw the same masks in each."""
    torch.manual_seed(seed + 1_000_003)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / (b.abs().max() + 1e-12)) if a.numel() else 0.0
