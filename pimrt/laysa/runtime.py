"""LaySA on torch training: Layrub + GradSA with a per-layer exchange and a mirror update.

One object per model; each ``with laysa:`` block is one training step (forward + backward)::

    laysa = LaySA(model, config=SparseConfig(density=0.01), optimizer=opt)
    for x, y in loader:
        with laysa:
            loss_fn(model(x), y).backward()
        opt.step()          # nothing left to do: every parameter was updated in backward

What happens in a step (docs/laysa.md):

* forward and backward run under Layrub (``pimrt.layrub.Layrub``): saved feature maps are
  offloaded to a host pool and prefetched one layer ahead, ReLU outputs kept as bit masks.
* every parameter has a post-accumulate-grad hook. When a parameter's gradient is complete
  (backward order), LaySA takes it off the parameter (``param.grad = None``), brings the
  parameter's GradSA state (momentum u, residual v) to the device (prefetched one parameter
  ahead), compresses with GradSA's own ``compress_bucket`` (a one-parameter bucket), frees the
  dense gradient, sends the state back to the host pool, and starts the padded all-gather
  (``pimrt.gradsa.exchange``). When the exchange is done (at most ``inflight`` exchanges are
  open; the rest is finished at the end of backward) every rank decodes and averages
  (``pimrt.gradsa.aggregate``) and applies the SGD update ``p.add_(update, alpha=-lr)`` to the
  parameter at once: the same kernel, the same operands and the same values as the
  optimizer applies after a DDP + GradSA step, so the parameters are bit-identical.
* mirror update: where the update cannot be applied at once (no learning rate known yet, or
  ``mirror="always"``) the decoded update is kept as a sparse mirror delta (indices + values:
  ``density x world`` of the layer) and swapped in at the end of the step (``finish``, or the
  optimizer's ``step``); the dense gradient is freed at once either way.

Why updating in backward is safe: the post-accumulate-grad hook of ``p`` runs after every
backward node that takes ``p`` as a differentiable input (convolution, linear, batch norm
compute dX and dW in one node), so nothing later reads the old ``p``. The update bumps
``p``'s version counter: if a model did read ``p`` later through a saved tensor, autograd
raises its in-place error instead of using a wrong value; use ``mirror="always"`` then.

Exchange order: GradSA's sampled top-k draws from one generator in exchange order, so
bit-identity with DDP + GradSA needs DDP's order. Given a DDP model, step 0 follows DDP's
initial bucket order (gradients that arrive early wait for their turn) and later steps the
gradient-ready order of step 0, which is DDP's rebuilt bucket order. On a plain module the
order is simply the ready order.
"""
from __future__ import annotations

import time
import weakref
from typing import Callable

import torch
import torch.distributed as dist
import torch.optim.optimizer as optim_base
from torch import nn

from pimrt.gradsa.exchange import allgather_payloads, group_size
from pimrt.gradsa.hook import GradSAFormat, GradSAState, SparseConfig, aggregate, compress_bucket
from pimrt.laysa.buffers import BufferManager
from pimrt.laysa.errors import LaySABudgetError, LaySAError
from pimrt.laysa.ledger import Ledger, LedgerAcct
from pimrt.layrub.errors import LayrubBudgetError, fmt_bytes, parse_bytes

MIRROR_MODES = ("auto", "always")


def _ddp_of(model):
    return model if isinstance(model, nn.parallel.DistributedDataParallel) else None


def check_optimizer(opt: torch.optim.Optimizer) -> None:
    """LaySA applies plain SGD (momentum and weight decay live in GradSA's exchange)."""
    if not isinstance(opt, torch.optim.SGD):
        raise LaySAError(f"LaySA applies the SGD update itself; got {type(opt).__name__} "
                         f"(use torch.optim.SGD with momentum=0, weight_decay=0)")
    for g in opt.param_groups:
        if g.get("momentum", 0) or g.get("weight_decay", 0) or g.get("nesterov", False) \
                or g.get("dampening", 0):
            raise LaySAError("LaySA's optimizer must be SGD with momentum=0, weight_decay=0 "
                             "(momentum and weight decay are applied in GradSA's exchange), got "
                             f"momentum={g.get('momentum')} weight_decay={g.get('weight_decay')}")


class LaySA:
    """See the module docstring. Arguments:

    ``model``: an ``nn.Module`` or a ``DistributedDataParallel`` wrapper (then each step runs
    under ``no_sync``: DDP's own reduction is off, LaySA exchanges). ``state``: a
    ``GradSAState`` to use (its residuals, counters and generator; e.g. the trainer's), else
    one is built from ``config``/``fmt``/``process_group``. ``optimizer`` or ``lr``: where the
    learning rate comes from (the optimizer's group lr at the time of the update); with
    neither, updates are kept in the mirror until ``finish(lr)`` / the optimizer's ``step``
    (see ``bind_optimizer``). ``layrub``: True (offload + reuse), False (only account the
    saved tensors, as torch keeps them) or a dict of Layrub keyword arguments.
    ``offload_buffers``: residual/momentum to the host pool between exchanges.
    ``device_budget``: bytes (or "64MB") the ledger may reach; checked before training by
    ``prepare(input_shape)`` and enforced during the step (LaySABudgetError).
    ``inflight``: exchanges left open while backward continues. ``mirror``: "auto" or
    "always" (never update during backward).
    """

    def __init__(self, model: nn.Module, *, state: GradSAState | None = None,
                 config: SparseConfig | None = None, fmt=None, process_group=None,
                 optimizer: torch.optim.Optimizer | None = None, lr: float | None = None,
                 layrub: bool | dict = True, offload_buffers: bool = True,
                 device_budget: int | str | None = None, host_budget: int | str | None = None,
                 input_shape=None, inflight: int = 1, mirror: str = "auto",
                 order: str = "auto"):
        if mirror not in MIRROR_MODES:
            raise LaySAError(f"mirror must be one of {', '.join(MIRROR_MODES)}, got {mirror!r}")
        if not isinstance(inflight, int) or inflight < 0:
            raise LaySAError(f"inflight must be an integer >= 0, got {inflight!r}")
        if order not in ("auto", "ddp", "ready"):
            raise LaySAError(f"order must be auto, ddp or ready, got {order!r}")
        if lr is not None and lr <= 0:
            raise LaySAError(f"lr must be > 0, got {lr}")
        self.ddp = _ddp_of(model)
        self.module = self.ddp.module if self.ddp is not None else model
        if order == "ddp" and self.ddp is None:
            raise LaySAError("order='ddp' needs a DistributedDataParallel model")
        self.state = state or GradSAState(self.module, process_group, config, fmt or GradSAFormat())
        if not isinstance(self.state, GradSAState):
            raise LaySAError(f"LaySA needs a GradSAState, got {type(self.state).__name__}")
        self.group = self.state.group
        self.params = [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]
        if not self.params:
            raise LaySAError("the model has no trainable parameters")
        self.by_id = {id(p): (n, p) for n, p in self.params}
        self.device = self.params[0][1].device
        self.mirror = mirror
        self.inflight = inflight
        self.optimizer = None
        self.lr = lr
        if optimizer is not None:
            self.bind_optimizer(optimizer)
        self.device_budget = parse_bytes(device_budget)
        self.host_budget = parse_bytes(host_budget)
        self.ledger = Ledger(self.device_budget)
        self.buffers = BufferManager(self.state.store, self.device, self.ledger,
                                     offload=offload_buffers)
        self.buffers.reserve({n: p.numel() for n, p in self.params})
        self.layrub = self._make_layrub(layrub)
        # order
        if order == "auto":
            order = "ddp" if self.ddp is not None else "ready"
        self._order: list[str] | None = None
        if order == "ddp":
            self._order = [self.state.name_of(p) for b in self.ddp.reducer._get_zeros_like_grad_buckets()
                           for p in b.parameters()]
        self.order_mode = order
        self._ready: list[str] = []
        self._mirror: dict[str, tuple] = {}
        self._open: list = []
        self._pending: dict[str, tuple] = {}
        self._next = 0
        self._active = False
        self._queued = False
        self._no_sync = None
        self.estimate: dict | None = None
        self.history: list[dict] = []
        self.stats: dict = {}
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for _, p in self.params]
        self._opt_hook = None
        if input_shape is not None:
            self.prepare(tuple(input_shape))

    # -- set-up -----------------------------------------------------------------------
    def _make_layrub(self, layrub):
        from pimrt.layrub import Layrub
        if layrub is False:
            kw = {"offload": False, "reuse": False}
        elif layrub is True:
            kw = {}
        elif isinstance(layrub, dict):
            kw = dict(layrub)
        else:
            raise LaySAError(f"layrub must be True, False or a dict of Layrub options, got {layrub!r}")
        kw.setdefault("capture_graph", False)
        kw.setdefault("host_budget", self.host_budget)
        lr = Layrub(self.module, **kw)
        lr.acct = LedgerAcct(self.ledger)
        return lr

    def bind_optimizer(self, opt: torch.optim.Optimizer) -> None:
        check_optimizer(opt)
        ours = {id(p) for _, p in self.params}
        self._lr_of = {}
        for g in opt.param_groups:
            for p in g["params"]:
                if id(p) in ours:
                    self._lr_of[id(p)] = g
        missing = [n for n, p in self.params if id(p) not in self._lr_of]
        if missing:
            raise LaySAError(f"the optimizer does not hold parameter {missing[0]!r}")
        self.optimizer = opt

    def bind_on_first_step(self) -> None:
        """For callers that build the optimizer out of reach (the trainer): a global optimizer
        step pre-hook binds the first SGD whose parameters are this model's, applies the
        mirror deltas of the steps before, and from then on updates happen in backward."""
        if self._opt_hook is not None:
            return
        ours = {id(p) for _, p in self.params}
        me = weakref.ref(self)

        def pre(opt, args, kwargs):
            s = me()
            if s is None:
                return
            if not any(id(p) in ours for g in opt.param_groups for p in g["params"]):
                return
            if s.optimizer is None:
                s.bind_optimizer(opt)
            s.apply_mirror()
        self._opt_hook = optim_base.register_optimizer_step_pre_hook(pre)

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._opt_hook is not None:
            self._opt_hook.remove()
            self._opt_hook = None

    def fixed_bytes(self) -> int:
        """Device bytes LaySA itself needs besides the saved tensors: the two largest
        parameters' GradSA states (current + prefetched), the largest gradient and decoded
        update (with ``inflight`` open exchanges: one gradient and one update each)."""
        sizes = sorted((p.numel() for _, p in self.params), reverse=True)
        sb = [self.buffers.state_bytes(n) for n in sizes]
        if not self.buffers.offload_enabled:
            return sum(sb) + 8 * sizes[0]
        return sum(sb[:2]) + 4 * sizes[0] + 4 * sum(sizes[:max(1, self.inflight)])

    def prepare(self, input_shape: tuple[int, ...]) -> dict:
        """Before training: Layrub's dry run on the meta device (bytes kept for backward) plus
        LaySA's fixed bytes, checked against ``device_budget`` (LaySABudgetError naming the
        bytes) and the host budget (Layrub's pool)."""
        try:
            est = self.layrub.prepare(tuple(input_shape), capture_graph=False) or {}
        except LayrubBudgetError as exc:
            raise LaySABudgetError(f"LaySA: {exc}", needed=exc.needed, budget=exc.budget) from exc
        saved = int(est.get("device_bytes", 0))
        fixed = self.fixed_bytes()
        self.estimate = {"saved_bytes": saved, "fixed_bytes": fixed, "device_bytes": saved + fixed,
                         "host_bytes": int(est.get("host_bytes", 0)) +
                         (self.buffers.pool.capacity if self.buffers.pool else 0)}
        if self.device_budget is not None and saved + fixed > self.device_budget:
            raise LaySABudgetError(
                f"device memory budget too small for LaySA at input {tuple(input_shape)}: about "
                f"{saved + fixed:,} B ({fmt_bytes(saved + fixed)}) needed ({saved:,} B kept for "
                f"backward + {fixed:,} B exchange buffers), budget {self.device_budget:,} B "
                f"({fmt_bytes(self.device_budget)})", needed=saved + fixed, budget=self.device_budget)
        return self.estimate

    # -- the step -----------------------------------------------------------------------
    def __enter__(self) -> "LaySA":
        if self._active:
            raise LaySAError("LaySA step already active (nested `with`?)")
        self.ledger.reset_peak()
        self._t0 = time.perf_counter()
        self._exchange_s = 0.0
        self._ready = []
        self._pending = {}
        self._next = 0
        self._queued = False
        self._done = False
        self._active = True
        if self.ddp is not None:
            self._no_sync = self.ddp.no_sync()
            self._no_sync.__enter__()
        self.layrub.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.layrub.__exit__(exc_type, exc, tb)
        finally:
            if self._no_sync is not None:
                self._no_sync.__exit__(exc_type, exc, tb)
                self._no_sync = None
            self._active = False
        if exc_type is not None:
            return
        if not self._done:
            raise LaySAError("a LaySA step ended without a backward pass through all parameters")
        if self.mirror == "always" or (self.lr is None and self.optimizer is None):
            pass  # the mirror is applied by finish(lr) or the optimizer's step
        s = self.layrub.stats
        self.stats = {"peak_bytes": self.ledger.peak, "at_peak": dict(self.ledger.at_peak),
                      "max": dict(self.ledger.max), "saved_peak_bytes": s.saved_peak_bytes,
                      "layrub_host_peak_bytes": s.host_peak_bytes,
                      "offloaded_bytes": s.offloaded_bytes,
                      "buffer_fetched_bytes": self.buffers.fetched_bytes,
                      "buffer_offloaded_bytes": self.buffers.offloaded_bytes,
                      "exchange_s": self._exchange_s, "step_s": time.perf_counter() - self._t0,
                      "mirror_pending": len(self._mirror)}
        self.history.append(self.stats)

    def _lr_for(self, p) -> float | None:
        if self.mirror == "always":
            return None
        if self.optimizer is not None:
            return float(self._lr_of[id(p)]["lr"])
        return self.lr

    def _on_grad(self, p: torch.Tensor) -> None:
        if not self._active:
            return
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
        name, _ = self.by_id[id(p)]
        g = p.grad
        p.grad = None
        self.ledger.add("grad", g.numel() * g.element_size())
        self._ready.append(name)
        if self._order is None:
            self._exchange(name, p, g)
            return
        self._pending[name] = (p, g)
        while self._next < len(self._order) and self._order[self._next] in self._pending:
            n = self._order[self._next]
            q, gq = self._pending.pop(n)
            self._next += 1
            self._exchange(n, q, gq)

    def _exchange(self, name: str, p: torch.Tensor, g: torch.Tensor) -> None:
        t0 = time.perf_counter()
        st = self.state
        numel = p.numel()
        self.buffers.fetch(name, numel)
        payload, numels = compress_bucket(st, [p], [g])
        self.ledger.sub("grad", g.numel() * g.element_size())
        del g
        c = st.counter
        c.dense_bytes += 4 * numel
        c.elements += numel
        self.buffers.offload(name)
        nxt = self._following(name)
        if nxt is not None:
            self.buffers.fetch(nxt, self.by_name[nxt].numel(), prefetch=True)
        tensor = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(self.device)
        self.ledger.add("comm", tensor.numel())
        c.encode_s += time.perf_counter() - t0
        fut = allgather_payloads(tensor, self.group, c, st.step)
        self._open.append((name, p, fut, numels, tensor.numel()))
        while len(self._open) > self.inflight:
            self._finish_one()
        self._exchange_s += time.perf_counter() - t0

    @property
    def by_name(self) -> dict:
        d = getattr(self, "_by_name", None)
        if d is None:
            d = self._by_name = {n: p for n, p in self.params}
        return d

    def _following(self, name: str) -> str | None:
        order = self._order if self._order is not None else self._last_ready
        if not order:
            return None
        i = self._pos.get(name) if getattr(self, "_pos_for", None) is order else None
        if i is None:
            self._pos = {n: k for k, n in enumerate(order)}
            self._pos_for = order
            i = self._pos.get(name)
        if i is None or i + 1 >= len(order):
            return None
        return order[i + 1]

    _last_ready: list[str] | None = None

    def _finish_one(self) -> None:
        name, p, fut, numels, nbytes = self._open.pop(0)
        t1 = time.perf_counter()
        payloads = [x.cpu().numpy() for x in fut.wait()]
        self.ledger.sub("comm", nbytes)
        out = aggregate(payloads, self.state.fmt, numels, group_size(self.group))
        upd = torch.from_numpy(out).to(device=p.device, dtype=p.dtype).view_as(p)
        nb = upd.numel() * upd.element_size()
        self.ledger.add("update", nb)
        lr = self._lr_for(p)
        with torch.no_grad():
            if lr is not None:
                p.add_(upd, alpha=-lr)
            else:
                flat = upd.reshape(-1)
                idx = torch.nonzero(flat, as_tuple=False).reshape(-1)
                self._mirror[name] = (idx, flat[idx].clone())
        del upd
        self.ledger.sub("update", nb)
        self.state.counter.decode_s += time.perf_counter() - t1

    def _backward_done(self) -> None:
        if self._order is not None and self._pending:
            # everything has arrived: finish DDP's order
            while self._next < len(self._order):
                n = self._order[self._next]
                if n not in self._pending:
                    break
                q, gq = self._pending.pop(n)
                self._next += 1
                self._exchange(n, q, gq)
        while self._open:
            self._finish_one()
        missing = [n for n, _ in self.params if n not in set(self._ready)]
        if missing:
            raise LaySAError(f"parameter {missing[0]!r} got no gradient in this step ({len(missing)} "
                             f"in all): LaySA (like DDP without find_unused_parameters) needs "
                             f"every trainable parameter in the loss")
        self.buffers.offload_all()
        st = self.state
        st.step += 1
        st.counter.steps += 1
        if self.order_mode == "ddp":
            self._order = list(self._ready)     # DDP rebuilds its buckets in this order
        self._last_ready = list(self._ready)
        self._done = True

    def apply_mirror(self, lr: float | None = None) -> int:
        """Swap the mirror deltas into the parameters: ``p.add_(delta, alpha=-lr)`` with the
        delta rebuilt densely one parameter at a time (same kernel as the optimizer).
        Returns how many parameters were updated."""
        n = 0
        for name, (idx, vals) in list(self._mirror.items()):
            p = self.by_name[name]
            rate = lr if lr is not None else (float(self._lr_of[id(p)]["lr"]) if self.optimizer
                                              else self.lr)
            if rate is None:
                raise LaySAError("no learning rate for the mirror update: pass lr, an optimizer, "
                                 "or call finish(lr)")
            d = torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
            d[idx] = vals
            with torch.no_grad():
                p.add_(d.view_as(p), alpha=-rate)
            del self._mirror[name]
            n += 1
        return n

    finish = apply_mirror

    def train_step(self, loss_fn: Callable, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """forward + backward under LaySA, then the mirror (if any) is applied."""
        if self.estimate is None:
            self.prepare(tuple(x.shape))
        model = self.ddp if self.ddp is not None else self.module
        with self:
            loss = loss_fn(model(x), target)
            loss.backward()
        if self._mirror:
            self.apply_mirror()
        return loss.detach()
