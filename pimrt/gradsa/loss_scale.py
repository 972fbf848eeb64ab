"""Error-feedback compressors under loss scaling (amp-fp16): a DDP hook around theirs that
unscales first.

    scaler = torch.amp.GradScaler("cuda")
    state, hook = registry.build("gradsa", model)
    ddp.register_comm_hook(*loss_scale.wrap(state, hook, scaler))

A compressor with error feedback (GradSA, DGC, PowerSGD) keeps, from step to step, what it
did not send. Handed the scaled gradients that DDP sees under torch.amp.GradScaler, it would
keep them at the scale of the step that left them, which the scaler changes (doubled after
its growth interval, halved after an overflow), and a step the scaler skips (an inf or NaN
in a gradient) would already have folded that inf into the residual and momentum. So this
hook does what the PIM runtime does (docs/precision.md): it holds every bucket until the
step's last one is ready, checks them all for inf/NaN and agrees on the answer with the
other ranks (one all-reduce of a flag); then

- if any rank found one: every bucket comes back as +inf, the compressor's state untouched,
  and the scaler skips the step on every rank (and lowers its scale), as it would have
  without a compressor;
- else: every bucket is divided by the scale, the compressor's own hook runs on it (its
  collectives in bucket order, as before) and its result is multiplied by the scale again,
  so that the scaler's unscale gives back what the compressor sent. The scale is a power of
  two, so both multiplications are exact: the compressor sees and keeps what it would
  without loss scaling.

The price: the exchange starts once the backward pass has ended instead of overlapping it
bucket by bucket (the PIM runtime's folds likewise wait for the last unscale under
amp-fp16).

The state delegates every attribute it does not have (counter, step, density, state_dict) to
the compressor's state (which has `group`, `counter` and `step`, as GradSAState and
BaselineState do), so the trainer and its checkpoints see the compressor's.
"""
import torch
import torch.distributed as dist

from pimrt.gradsa.exchange import allreduce_now


class LossScaledState:
    """The compressor's (state, hook) and the scaler; the buckets held in this step."""

    def __init__(self, inner, hook, scaler):
        self.inner, self.hook, self.scaler = inner, hook, scaler
        self.held = []            # (bucket, the future DDP waits on) of this step
        self.skipped = 0          # steps this hook turned into the scaler's skip

    def __getattr__(self, name):  # only for names this object does not have
        if "inner" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["inner"], name)


def wrap(state, hook, scaler):
    """(state, hook) for DDP's register_comm_hook: `hook` on unscaled gradients."""
    return LossScaledState(state, hook, scaler), loss_scaled_hook


# (no `from __future__ import annotations`: DDP compares the hook's annotations with the types)
def loss_scaled_hook(state: "LossScaledState", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    fut = torch.futures.Future()
    state.held.append((bucket, fut))
    if bucket.is_last():          # DDP launches buckets in order: every one is held now
        held, state.held = state.held, []
        try:
            _release(state, held)
        except BaseException as exc:
            for _, f in held:
                if not f.done():
                    f.set_exception(exc)
            raise
    return fut


def _release(state: LossScaledState, held) -> None:
    found = torch.zeros(1, dtype=torch.float32, device=held[0][0].buffer().device)
    for b, _ in held:
        found += (~torch.isfinite(b.buffer())).any()
    inner = state.inner
    if dist.is_initialized() and dist.get_world_size(inner.group) > 1:
        # every rank's flag summed: one all-reduce of 4 bytes, counted with the compressor's
        found = allreduce_now(found, inner.group, inner.counter, inner.step, "the inf/NaN check's all_reduce")
    if found.item() > 0:      # the scaler sees the inf on every rank and skips the step
        state.skipped += 1
        for b, f in held:
            f.set_result(b.buffer().fill_(float("inf")))
        return
    scale = state.scaler.get_scale()     # a power of two (1.0 for a disabled scaler)
    inv = 1.0 / scale
    for b, f in held:
        b.buffer().mul_(inv)
        state.hook(inner, b).then(lambda done, f=f: _rescale(done, f, scale))


def _rescale(done: torch.futures.Future, f: torch.futures.Future, scale: float) -> None:
    try:
        f.set_result(done.value().mul_(scale))
    except BaseException as exc:   # the compressor's collective failed: DDP's wait raises it
        f.set_exception(exc)
