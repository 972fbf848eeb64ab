"""Compressors by name, validated before any training starts.

    spec = get("gradsa")                       # unknown name -> GradSAError listing valid ones
    opts = CompressorOptions(density=0.001)    # impossible ratio/density -> GradSAError
    state, hook = build("gradsa", model, process_group, opts.validate())
    ddp.register_comm_hook(state, hook)
`spec.single_bucket`: torch's PowerSGD hook issues its second all-reduce from a future
callback; with several buckets, ranks can then issue collectives in different orders and gloo
aborts on the size mismatch, so the trainer gives DDP one bucket for it. pimrt's own hooks issue
every collective from the hook call itself, in bucket order, and need no such care.
`spec.error_feedback`: the compressor keeps what it did not send from step to step; under
torch's GradScaler the trainer wraps its hook so that it sees unscaled gradients and a skipped
step leaves its state as it was (`pimrt.gradsa.loss_scale`).
`spec.momentum_in_hook` tells the trainer to build its optimizer without momentum and weight
decay (GradSA and DGC apply both inside the hook, as momentum correction requires).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import torch.distributed as dist

from pimrt.gradsa import baselines as bl
from pimrt.gradsa.encoding import INDEX_CODECS, VALUE_CODECS
from pimrt.gradsa.errors import GradSAError
from pimrt.gradsa.hook import GradSAFormat, GradSAState, SparseConfig, gradsa_hook


@dataclass
class CompressorOptions:
    density: float | None = None       # final density; or give ratio (density = 1/ratio)
    ratio: float | None = None
    warmup_steps: int = 20
    warmup_start_density: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    clip_norm: float | None = None     # per-layer local clipping; None: the compressor's default
    clip_scale: bool = True            # DGC: the threshold scaled by world_size ** -0.5
    masking: bool = True               # momentum factor masking
    world_size: int = 1                # set by build() from the process group
    value_codec: str = "int8"
    index_codec: str = "auto"
    stale_age: int = 0
    stale_decay: float = 1.0
    powersgd_rank: int = 4
    powersgd_start: int = 2
    seed: int = 0
    extra: dict = field(default_factory=dict)

    def final_density(self) -> float:
        if self.density is not None and self.ratio is not None:
            raise GradSAError("give either a density or a ratio, not both")
        if self.ratio is not None:
            if not (math.isfinite(self.ratio) and self.ratio >= 1.0):
                raise GradSAError(f"impossible compression ratio {self.ratio} (--ratio): it must be a finite "
                                  f"number >= 1")
            return 1.0 / self.ratio
        d = 0.001 if self.density is None else self.density
        if not 0.0 < d <= 1.0:
            raise GradSAError(f"impossible density {d}: it must be in (0, 1]")
        return d

    def validate(self) -> "CompressorOptions":
        if not 0.0 < self.warmup_start_density <= 1.0:   # 0 would silently mean "no warm-up"
            raise GradSAError(f"impossible warm-up start density {self.warmup_start_density} "
                              f"(--warmup-start-density): it must be in (0, 1]")
        self.sparse_config()
        if self.value_codec not in VALUE_CODECS:
            raise GradSAError(f"unknown value codec {self.value_codec!r}; valid: {', '.join(VALUE_CODECS)}")
        if self.index_codec not in ("auto",) + INDEX_CODECS:
            raise GradSAError(f"unknown index codec {self.index_codec!r}; valid: auto, {', '.join(INDEX_CODECS)}")
        if self.clip_norm is not None and not (math.isfinite(self.clip_norm) and self.clip_norm >= 0):
            raise GradSAError(f"impossible clipping norm {self.clip_norm} (--clip-norm): it must be a finite "
                              f"number >= 0 (0: off)")
        if self.powersgd_rank < 1:
            raise GradSAError(f"PowerSGD rank must be >= 1, got {self.powersgd_rank}")
        return self

    def effective_clip(self) -> float:
        """The per-layer clipping norm the hook applies: clip_norm, times N^-1/2 with clip_scale."""
        c = self.clip_norm or 0.0
        return c * self.world_size ** -0.5 if self.clip_scale else c

    def sparse_config(self) -> SparseConfig:
        d = self.final_density()
        return SparseConfig(density=d, warmup_steps=self.warmup_steps,
                            warmup_start_density=max(d, self.warmup_start_density), momentum=self.momentum,
                            masking=self.masking, weight_decay=self.weight_decay, clip_norm=self.effective_clip(),
                            stale_age=self.stale_age, stale_decay=self.stale_decay, seed=self.seed).validate()


@dataclass(frozen=True)
class Spec:
    name: str
    summary: str
    build: Callable
    momentum_in_hook: bool = False
    single_bucket: bool = False   # register with one DDP bucket (see PowerSGD below)
    clip_norm: float = 0.0        # default per-layer local clipping (before the N^-1/2 scaling)
    lr_warmup: bool = False       # the trainer warms the learning rate up over --warmup-steps
    error_feedback: bool = False  # its state carries gradients from step to step: under loss
                                  # scaling the trainer wraps its hook (pimrt.gradsa.loss_scale)


def _gradsa(model, group, o):
    return GradSAState(model, group, o.sparse_config(), GradSAFormat(o.value_codec, o.index_codec)), gradsa_hook


def _dgc(bits):
    def build(model, group, o):
        return GradSAState(model, group, o.sparse_config(), bl.DGCFormat(bits)), gradsa_hook
    return build


def _simple(hook):
    def build(model, group, o):
        return bl.BaselineState(group, o.seed), hook
    return build


# DGC's own recipe (Lin et al. 2018): local clipping scaled by N^-1/2, momentum correction and
# masking (GradSAState's defaults), density warm-up (warmup_steps) and learning-rate warm-up.
DGC_RECIPE = {"clip_norm": 1.0, "lr_warmup": True}

COMPRESSORS: dict[str, Spec] = {s.name: s for s in [
    Spec("gradsa", "layer-wise sparse, momentum-corrected, compactly encoded (pimrt)", _gradsa, True,
         error_feedback=True),
    Spec("dense", "fp32 all-reduce (reference)", _simple(bl.dense_hook)),
    Spec("fp16", "fp16 all-reduce", _simple(bl.fp16_hook)),
    Spec("int8", "8-bit quantization, per-layer scale", _simple(bl.int8_hook)),
    Spec("terngrad", "TernGrad, 2-bit packed", _simple(bl.terngrad_hook)),
    Spec("dgc", "DGC as public code sends it: fp32 values + int32 indices", _dgc(32), True,
         error_feedback=True, **DGC_RECIPE),
    Spec("dgc-int64", "DGC with int64 indices (torch.nonzero's dtype)", _dgc(64), True,
         error_feedback=True, **DGC_RECIPE),
    Spec("powersgd", "torch's PowerSGD hook (low rank, error feedback)",
         lambda m, g, o: (bl.PowerSGDWrapState(g, o.powersgd_rank, o.powersgd_start, o.seed), bl.powersgd_hook),
         single_bucket=True, error_feedback=True),
]}


def get(name: str) -> Spec:
    try:
        return COMPRESSORS[name]
    except KeyError:
        raise GradSAError(f"unknown compressor {name!r}; valid: {', '.join(COMPRESSORS)}") from None


def build(name: str, model, process_group=None, options: CompressorOptions | None = None):
    """(state, hook) for DDP's register_comm_hook; `model` is the module DDP wraps."""
    spec = get(name)
    return spec.build(model, process_group, resolve(spec, options, process_group).validate())


def resolve(spec: Spec, options: CompressorOptions | None, process_group=None) -> CompressorOptions:
    """The options with the compressor's defaults filled in and the group's world size."""
    o = options or CompressorOptions()
    world = dist.get_world_size(process_group) if dist.is_initialized() else o.world_size
    return replace(o, clip_norm=spec.clip_norm if o.clip_norm is None else o.clip_norm, world_size=world)
