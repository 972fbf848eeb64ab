"""Per-parameter memory of the sparse exchange: what was produced but not yet sent.

For each parameter (keyed by its name, never by bucket: DDP rebuilds buckets after the first
iteration) GradSA keeps
    u    the momentum (velocity) of the local gradient,
    v    the accumulated, not yet sent velocity (the residual),
    age  (optional) steps since each element was last sent.
Staleness compensation:
    momentum correction  u <- m*u + g ; v <- v + u      (accumulate velocity, not raw gradient;
                         with nesterov: v <- v + g + m*u)
    momentum masking     after sending index i: u[i] <- 0, so a stale momentum does not keep
                         pushing a coordinate whose accumulated update was just applied
    residual feedback    v[i] <- v[i] - decoded(v[i]); quantization error stays in v
    age-aware damping    (optional, stale_age > 0) elements held longer than stale_age steps are
                         multiplied by stale_decay each further step: a residual built from
                         gradients of weights long gone is trusted less. The removed amount
                         is returned as `dropped` so bookkeeping stays exact.
Invariant (tested): sum of what was added to v == sum of what was sent + v + dropped.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from pimrt.gradsa.errors import GradSAError

AGE_MAX = 32767


@dataclass
class ParamState:
    u: torch.Tensor
    v: torch.Tensor
    age: torch.Tensor | None = None

    @classmethod
    def zeros(cls, numel: int, device, track_age: bool = False) -> "ParamState":
        z = torch.zeros(numel, dtype=torch.float32, device=device)
        age = torch.zeros(numel, dtype=torch.int16, device=device) if track_age else None
        return cls(z, z.clone(), age)


def clip_(g: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Local gradient clipping (DGC): scale g in place so that ||g|| <= max_norm."""
    if max_norm > 0:
        norm = float(g.norm())
        if norm > max_norm:
            g.mul_(max_norm / (norm + 1e-12))
    return g


def accumulate(ps: ParamState, g: torch.Tensor, momentum: float, nesterov: bool = False,
               return_added: bool = False) -> torch.Tensor | None:
    """Momentum correction; with return_added, returns the amount added to v this step."""
    if momentum > 0:
        ps.u.mul_(momentum).add_(g)
        if nesterov:
            added = torch.add(g, ps.u, alpha=momentum)
            ps.v.add_(added)
        else:
            added = ps.u
            ps.v.add_(ps.u)
    else:
        added = g
        ps.v.add_(g)
    return added.clone() if return_added else None


def commit(ps: ParamState, idx: torch.Tensor, decoded: torch.Tensor, masking: bool = True) -> None:
    """Record that v[idx] was sent as `decoded`: keep the remainder, mask the momentum."""
    if idx.numel():
        ps.v[idx] -= decoded
        if masking:
            ps.u[idx] = 0
    if ps.age is not None:
        ps.age.add_(1).clamp_(max=AGE_MAX)
        if idx.numel():
            ps.age[idx] = 0


def damp_stale(ps: ParamState, stale_age: int, stale_decay: float) -> torch.Tensor | None:
    """Age-aware damping of long-held residuals; returns the dropped amount (or None if off)."""
    if ps.age is None or stale_age <= 0 or stale_decay >= 1.0:
        return None
    old = ps.age > stale_age
    dropped = torch.where(old, ps.v * (1.0 - stale_decay), torch.zeros_like(ps.v))
    ps.v.sub_(dropped)
    return dropped


class ResidualStore:
    """ParamState per parameter name, created on first use; checkpointable."""

    def __init__(self, track_age: bool = False):
        self.track_age = track_age
        self.params: dict[str, ParamState] = {}

    def get(self, name: str, numel: int, device) -> ParamState:
        ps = self.params.get(name)
        if ps is None:
            ps = self.params[name] = ParamState.zeros(numel, device, self.track_age)
        elif ps.v.numel() != numel:
            raise GradSAError(f"parameter {name!r}: residual holds {ps.v.numel()} elements, gradient has {numel}")
        return ps

    def state_dict(self) -> dict:
        out = {}
        for name, ps in self.params.items():
            d = {"u": ps.u.detach().cpu().clone(), "v": ps.v.detach().cpu().clone()}
            if ps.age is not None:
                d["age"] = ps.age.detach().cpu().clone()
            out[name] = d
        return out

    def load_state_dict(self, state: dict, shapes: dict[str, int] | None = None, device="cpu") -> None:
        """Load; with `shapes` ({name: numel} of the model) every entry is checked against it."""
        if shapes is not None:
            unknown = sorted(set(state) - set(shapes))
            if unknown:
                raise GradSAError(f"checkpoint residual for parameter {unknown[0]!r} which the model does not have")
            for name, d in state.items():
                if d["v"].numel() != shapes[name]:
                    raise GradSAError(f"checkpoint residual for parameter {name!r} has {d['v'].numel()} "
                                      f"elements, the model's parameter has {shapes[name]}")
        self.params = {}
        for name, d in state.items():
            age = d.get("age")
            if self.track_age and age is None:
                age = torch.zeros(d["v"].numel(), dtype=torch.int16)
            self.params[name] = ParamState(d["u"].to(device).float(), d["v"].to(device).float(),
                                           age.to(device) if (age is not None and self.track_age) else None)
