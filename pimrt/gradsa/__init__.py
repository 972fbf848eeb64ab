"""GradSA: sparse, staleness-compensated gradient exchange for torch.distributed DDP.

    from pimrt.gradsa import GradSAState, SparseConfig, gradsa_hook
    state = GradSAState(model, config=SparseConfig(density=0.001))
    ddp.register_comm_hook(state, gradsa_hook)

Modules: encoding (wire format), bits (integer codes), sparsify (sampled top-k, warm-up),
state (residual, momentum correction and masking, staleness), exchange (gloo-safe payload
collectives), hook (the DDP hook), baselines (dense, fp16, int8, TernGrad, DGC, PowerSGD),
registry (compressors by name), accounting (byte counters). See docs/gradsa.md.
"""
from pimrt.gradsa.errors import GradSAError
from pimrt.gradsa.hook import GradSAFormat, GradSAState, SparseConfig, gradsa_hook, compress_bucket, aggregate
from pimrt.gradsa.registry import COMPRESSORS, CompressorOptions, build, get

__all__ = ["GradSAError", "GradSAFormat", "GradSAState", "SparseConfig", "gradsa_hook", "compress_bucket",
           "aggregate", "COMPRESSORS", "CompressorOptions", "build", "get"]
