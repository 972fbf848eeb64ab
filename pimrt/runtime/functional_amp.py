"""The functional step in mixed precision: one training step of a CNN under torch.autocast on the
CPU (amp-fp16 with torch.amp.GradScaler's loss scaling, amp-bf16 without), with the non-CONV ops
on a PIM backend in 16 bits, against torch's own AMP step (pimrt.runtime.functional for fp32).

The host: torch's CONVs and linear layers under autocast (16-bit operands, fp32 accumulation),
exactly as in the reference step. The PIM: batch norm (16-bit x, y, dy, dx; fp32 statistics
and parameters), ReLU/ReLU6, residual add and 2x2 pooling in 16 bits (pimrt.pim.kernels' 16-bit
variants); the update as the timing model runs it: a CONV's 16-bit weight gradient widened,
unscaled and checked for inf/NaN (amp_unscale_<dtype>), batch norm's fp32 gradients unscaled
(amp_unscale), the step skipped if any flag is set, then SGD on the fp32 master weights, a
CONV's writing the 16-bit copy of its weights (sgd_amp_<dtype>), which is checked against
torch's cast of the updated weight; or GradSA's step (fold, select, apply: fp32) on the
unscaled gradients, a CONV's apply writing the copy (sgd_apply_amp_<dtype>).

What is emulated: torch's CPU autocast runs fp16 and bf16 CONVs through its CPU kernels, not
Tensor Cores; the reference and the PIM step share them, so the comparison is of the PIM's ops.
"""
from __future__ import annotations

import contextlib
import copy
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pimrt.errors import ConfigError
from pimrt.pim import kernels
from pimrt.runtime.functional import (NOISE_FACTOR, PimOps, _data, _np, _rel, _same_draws, _t,
                                      is_cast, to_pim)

LOW = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}
#: the documented tolerance of an AMP step (docs/precision.md): the loss, and each gradient's
#: largest difference over its largest magnitude with the same ReLU decisions, a few units in
#: the last place of the 16-bit activations (fp16 2^-11, bf16 2^-8 relative)
AMP_TOLERANCE = {"amp-fp16": 5e-3, "amp-bf16": 4e-2}
INIT_SCALE = 2.0 ** 16           # GradScaler's default


def _lowered(model: nn.Module) -> set[str]:
    """The parameters autocast casts to 16 bits (those of CONV and linear layers)."""
    return {f"{m}.{n}" if m else n for m, mod in model.named_modules()
            if isinstance(mod, (nn.Conv2d, nn.Linear)) for n, _ in mod.named_parameters(recurse=False)}


def _torch_step(model, x, y, precision, lr, momentum, wd, scale=INIT_SCALE, config=None):
    """torch's AMP step: forward under autocast, GradScaler (amp-fp16) at `scale`, SGD
    (precision "fp32": a plain fp32 step); with a GradSA `config` the update is GradSA's on
    the unscaled gradients (pimrt.gradsa in torch), skipped as the scaler's step on an inf.
    -> (loss, the unscaled gradients, found_inf)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=wd)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale) \
        if precision == "amp-fp16" else None
    with torch.autocast("cpu", dtype=LOW[precision]) if precision in LOW else \
            contextlib.nullcontext():
        loss = F.cross_entropy(model(x), y)
    (scaler.scale(loss) if scaler else loss).backward()
    found = False
    if scaler:
        scaler.unscale_(opt)
        found = bool(sum(v.item() for v in scaler._found_inf_per_device(opt).values()))
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    if config is not None:
        if not found:
            from pimrt.runtime.functional import _gradsa_step_torch
            _gradsa_step_torch(model, lr, config)
    elif scaler:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    return loss, grads, found


def _first_scale(model, x, y, precision, seed, lr, momentum, wd) -> tuple[float, int]:
    """The loss scale of the first step GradScaler takes: from INIT_SCALE, halved after each
    step whose gradients overflow (skipped). -> (scale, steps skipped)."""
    scale, skipped = INIT_SCALE, 0
    while precision == "amp-fp16" and skipped < 24:
        _same_draws(seed)
        if not _torch_step(copy.deepcopy(model), x, y, precision, lr, momentum, wd, scale)[2]:
            break
        scale, skipped = scale / 2, skipped + 1
    return scale, skipped


DT16 = {"amp-fp16": "f16", "amp-bf16": "bf16"}


def _is_lowered(name: str, lowered: set[str]) -> bool:
    """Whether parameter `name` of the PIM model (batch norms wrapped as .bn) is a CONV's or
    linear layer's, whose forward reads a 16-bit copy."""
    return name in lowered or name.replace("bn.", "") in lowered


def _pim_unscale(model, backend, precision, lowered, scale) -> tuple[dict, bool]:
    """Every gradient made the fp32 gradient its update reads, on the PIM: a CONV's 16-bit
    weight gradient widened (and unscaled, amp_unscale_<dtype>), batch norm's fp32 gradients
    unscaled (amp_unscale, amp-fp16 only). -> ({name: g}, found_inf)."""
    dt = DT16[precision]
    inv = 1.0 / scale if precision == "amp-fp16" else 1.0
    grads, found = {}, False
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        if _is_lowered(name, lowered):
            # the CONV's 16-bit weight gradient (torch's p.grad is its exact fp32 widening)
            g16, _ = _data(p.grad.to(LOW[precision]))
            g, bad = kernels.amp_unscale16(backend, g16.ravel(), inv, dt)
        elif precision == "amp-fp16":
            g, bad = kernels.amp_unscale(backend, _np(p.grad).ravel(), inv)
        else:
            g, bad = _np(p.grad).ravel(), False
        grads[name] = g
        found |= bad
    return grads, found


def _pim_update(model, backend, precision, lr, momentum, wd, lowered,
                scale) -> tuple[bool, bool]:
    """The AMP update on the PIM (the first step: the momentum buffer starts as the gradient,
    as torch's). -> (found_inf, every 16-bit weight copy equal to torch's cast)."""
    dt = DT16[precision]
    grads, found = _pim_unscale(model, backend, precision, lowered, scale)
    copies_equal = True
    if found:                      # the scaler skips the step
        return True, copies_equal
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name not in grads:
                continue
            w, g = _np(p).ravel(), grads[name]
            v0 = (g + np.float32(wd) * w).astype(np.float32)
            if _is_lowered(name, lowered):
                new_w, _, w16 = kernels.sgd_amp_update(backend, w, g, v0, lr, momentum=0.0,
                                                       weight_decay=wd, dtype=dt)
                copies_equal &= is_cast(w16, new_w, LOW[precision])
            else:
                new_w, _ = kernels.sgd_update(backend, w, g, v0, lr, momentum=0.0,
                                              weight_decay=wd)
            p.copy_(_t(new_w.reshape(p.shape), p))
            p.grad = torch.from_numpy(g.reshape(p.shape))        # unscaled, for the report
    return False, copies_equal


def _pim_gradsa(model, backend, precision, lr, config, lowered, scale):
    """GradSA's update under AMP on the PIM: every gradient unscaled (widened) and checked
    first (_pim_unscale; the scaler skips the step on an inf, folding nothing), then GradSA's
    step on the fp32 gradients (pimrt.runtime.functional._gradsa_step_pim), a CONV's apply
    writing the 16-bit copy of its weights; beside it torch's GradSA on the same gradients.
    -> (found_inf, every 16-bit copy equal to torch's cast, the update check)."""
    from pimrt.runtime.functional import _gradsa_step_pim, _gradsa_step_torch
    grads, found = _pim_unscale(model, backend, precision, lowered, scale)
    for name, p in model.named_parameters():
        if name in grads:
            p.grad = torch.from_numpy(grads[name].reshape(p.shape))
    if found:
        return True, True, None
    twin = copy.deepcopy(model)              # the same parameters and gradients, torch's GradSA
    for name, p in twin.named_parameters():
        p.grad = torch.from_numpy(grads[name].reshape(p.shape).copy()) if name in grads else None
    t_state = _gradsa_step_torch(twin, lr, config)
    copies = {n: DT16[precision] for n in grads if _is_lowered(n, lowered)}
    p_state, copies_equal = _gradsa_step_pim(model, backend, lr, config, copies)
    twin_params = dict(twin.named_parameters())
    return False, copies_equal, {
        "density": p_state.density(),
        "params_bit_equal": all(torch.equal(p.detach(), twin_params[n].detach())
                                for n, p in model.named_parameters()),
        "max_param_rel_diff": max(_rel(p.detach(), twin_params[n].detach())
                                  for n, p in model.named_parameters()),
        "max_residual_rel_diff": max(_rel(ps.v, t_state.store.params[n].v)
                                     for n, ps in p_state.store.params.items()),
        "kept_elements": int(sum(len(ix) for ix in p_state.last_kept)),
        "weight_copies": len(copies)}


def check_step_amp(model_name: str, batch: int, input_size: int, backend: str = "golden",
                   precision: str = "amp-bf16", groups: int = 4, lr: float = 0.1,
                   momentum: float = 0.9, wd: float = 5e-4, seed: int = 0,
                   slices: int = 1, update: str = "sgd", density: float = 0.001,
                   loss_scale: float | None = None) -> dict:
    """One AMP training step with the PIM ops on `backend` against torch's AMP step: loss,
    every (unscaled) gradient with the same ReLU decisions, every updated parameter, the
    scaler's decision and the 16-bit weight copies. update "gradsa"/"laysa": the update is
    GradSA's (one rank, momentum correction `momentum`, weight decay `wd`, `density`) on the
    unscaled gradients on both sides, and the PIM's is also checked bit for bit against
    GradSA in torch on the PIM step's own gradients (as the fp32 step's). loss_scale
    (amp-fp16): the step at that scale instead of the first one torch's scaler accepts (a
    scale whose gradients overflow makes both steps skip: nothing updated, nothing folded)."""
    from pimrt import zoo
    if precision not in LOW:
        raise ConfigError(f"check_step_amp: precision {precision!r} is not an AMP one "
                          f"({', '.join(LOW)})")
    if slices < 1 or batch % slices:
        raise ConfigError(f"slices={slices} does not divide the batch of {batch}")
    check_options(backend, update, precision)
    config = None
    if update != "sgd":
        from pimrt.gradsa import SparseConfig
        config = SparseConfig(density=density, momentum=momentum, weight_decay=wd,
                              warmup_steps=0)      # the steady density the timing uses
    torch.manual_seed(seed)
    ref = zoo.build(model_name, input_size=input_size).train()
    pim_model, masked_model = copy.deepcopy(ref), copy.deepcopy(ref)
    masked_model_0 = copy.deepcopy(ref)
    lowered = _lowered(ref)
    x = torch.randn(batch, 3, input_size, input_size)
    y = torch.randint(0, getattr(ref, "num_classes", 10), (batch,))
    if loss_scale is not None and precision != "amp-fp16":
        raise ConfigError(f"check_step_amp: loss_scale is for amp-fp16 (loss scaling), not "
                          f"{precision}")
    scale, skipped = (loss_scale, 0) if loss_scale is not None else \
        _first_scale(ref, x, y, precision, seed, lr, momentum, wd)
    t0 = time.perf_counter()
    _same_draws(seed)
    loss_ref, grads_ref, found_ref = _torch_step(ref, x, y, precision, lr, momentum, wd, scale,
                                                 config)
    torch_wall = time.perf_counter() - t0

    ops = PimOps(backend, groups, record_masks=True, slices=slices)
    gm = to_pim(pim_model, ops)
    t0 = time.perf_counter()
    _same_draws(seed)
    with torch.autocast("cpu", dtype=LOW[precision]):
        loss = F.cross_entropy(gm(x), y)
    (loss * scale if precision == "amp-fp16" else loss).backward()
    if ops.backend is None:
        raise ConfigError("check_step_amp runs the PIM ops on the golden or rtl backend")
    update_check = None
    if config is None:
        found, copies_equal = _pim_update(gm, ops.backend, precision, lr, momentum, wd, lowered,
                                          scale)
    else:
        found, copies_equal, update_check = _pim_gradsa(gm, ops.backend, precision, lr, config,
                                                        lowered, scale)
        if update_check is not None:
            update_check["update"] = update
    grads = {n: p.grad for n, p in gm.named_parameters() if p.grad is not None}
    wall = time.perf_counter() - t0

    # torch's AMP step with the PIM step's ReLU decisions (as the fp32 check: an activation
    # within rounding of a threshold may fall on the other side)
    rops = PimOps("torch", groups, replay=ops.masks)
    fp32_model = copy.deepcopy(masked_model)
    mm = to_pim(masked_model, rops)
    _same_draws(seed)
    _, grads_masked, _ = _torch_step(mm, x, y, precision, lr, momentum, wd, scale)
    # and torch's fp32 step with the same decisions: the yardstick of how far an AMP step's
    # gradients are from fp32's (a gradient that cancels to little has no correct 16-bit digit)
    _same_draws(seed)
    ops32 = PimOps("torch", groups, replay=ops.masks)
    _, grads32, _ = _torch_step(to_pim(copy.deepcopy(fp32_model), ops32), x, y, "fp32", lr,
                                momentum, wd)
    # how many decisions torch's own AMP step takes otherwise than its fp32 step: the noise of
    # 16-bit activations the PIM's decisions are judged against
    own = PimOps("torch", groups, record_masks=True)
    _same_draws(seed)
    with torch.no_grad(), torch.autocast("cpu", dtype=LOW[precision]):
        to_pim(copy.deepcopy(masked_model_0), own)(x)
    amp32 = PimOps("torch", groups, replay=own.masks)
    _same_draws(seed)
    with torch.no_grad():
        to_pim(fp32_model, amp32)(x)
    names = {n.replace("bn.", ""): n for n in grads}
    grad_diff = max(_rel(grads[names[n]], g) for n, g in grads_ref.items() if n in names)
    grad_diff_masks = max(_rel(grads[n], g) for n, g in grads_masked.items() if n in grads)
    tol = AMP_TOLERANCE[precision]
    judged = {}
    for n, g in grads_masked.items():
        if n in grads and _rel(grads[n], g) > tol:
            judged[n] = {"pim_vs_fp32": _rel(grads[n], grads32[n]),
                         "torch_amp_vs_fp32": _rel(g, grads32[n])}
    # the decisions: those the PIM's AMP step takes otherwise than fp32's, at most
    # NOISE_FACTOR times those torch's own AMP step does (and none far from a threshold where
    # torch's AMP step has none)
    decisions_ok = ops32.flips <= NOISE_FACTOR * max(amp32.flips, 1) and \
        (rops.hard_flips == 0 or amp32.hard_flips > 0)
    within = decisions_ok and all(
        j["pim_vs_fp32"] <= tol + NOISE_FACTOR * j["torch_amp_vs_fp32"] for j in judged.values())
    ref_params = dict(ref.named_parameters())
    param_diff = max(_rel(p.detach(), ref_params[n.replace("bn.", "")].detach())
                     for n, p in gm.named_parameters() if n.replace("bn.", "") in ref_params)
    same = True          # channel groups give the same numbers: forward again, ungrouped
    if groups > 1:
        probe = zoo.build(model_name, input_size=input_size).train()
        torch.manual_seed(seed + 1)
        xp = torch.randn(2 * slices, 3, input_size, input_size)
        with torch.autocast("cpu", dtype=LOW[precision]):
            _same_draws(seed)              # (dropout: the same masks in both)
            a = to_pim(probe, PimOps(backend, groups, slices=slices))(xp)
            _same_draws(seed)
            b = to_pim(probe, PimOps(backend, 1, slices=slices))(xp)
        same = bool(torch.equal(a, b))
    return {"backend": backend, "precision": precision, "groups": groups, "slices": slices,
            "loss": float(loss.detach()), "loss_ref": float(loss_ref.detach()),
            "loss_abs_diff": abs(float(loss.detach()) - float(loss_ref.detach())),
            "max_grad_rel_diff": grad_diff, "max_grad_rel_diff_same_masks": grad_diff_masks,
            "max_param_rel_diff": param_diff,
            "relu_mask_flips": rops.flips, "relu_mask_hard_flips": rops.hard_flips,
            "pim_vs_fp32_flips": ops32.flips, "torch_amp_vs_fp32_flips": amp32.flips,
            "torch_amp_vs_fp32_hard_flips": amp32.hard_flips,
            "found_inf": found, "found_inf_ref": found_ref,
            "weight_copies_equal_torch_cast": copies_equal,
            "tolerance": tol,
            "grads_within_tolerance": within, "judged_by_fp32": judged,
            "loss_scale": scale if precision == "amp-fp16" else None,
            "steps_skipped_first": skipped,
            "groups_equal": same, "wall_s": wall, "torch_wall_s": torch_wall, "device": "cpu",
            "update_check": update_check, "judged_by_float64": {}}



def check(model_name: str, batch: int, input_size: int, backend: str = "golden",
          groups: int = 4, update: str = "sgd", density: float = 0.001, slices: int = 1,
          precision: str = "fp32") -> dict:
    """The functional step of `pimrt run --functional` and a sweep's: fp32
    (pimrt.runtime.functional.check_step) or AMP (check_step_amp, the SGD update)."""
    from pimrt.runtime.functional import check_step
    check_options(backend, update, precision)
    if precision == "fp32":
        return check_step(model_name, batch, input_size, backend, groups, update=update,
                          density=density, slices=slices)
    return check_step_amp(model_name, batch, input_size, backend, precision, groups,
                          slices=slices, update=update, density=density)


def check_options(backend: str, update: str, precision: str) -> None:
    """What the AMP functional step cannot run, refused before any work."""
    if precision == "fp32" or backend == "none":
        return
    if update not in ("sgd", "gradsa", "laysa"):
        raise ConfigError(f"unknown update {update!r}; choose one of sgd, gradsa, laysa")
    if update == "laysa" and precision == "amp-fp16":
        raise ConfigError(f"--update laysa with --precision {precision}: LaySA applies each "
                          f"layer's update during backward, before the loss scaler could check "
                          f"every gradient for inf/NaN; use amp-bf16 (no loss scaling) or "
                          f"--update sgd/gradsa")
    if backend not in ("golden", "rtl"):
        raise ConfigError(f"--functional {backend} with --precision {precision}: the AMP step "
                          f"runs its PIM ops on the golden or rtl backend (torch's own AMP step "
                          f"is what it is compared with)")
