"""Collectives for byte payloads, gloo- and NCCL-safe, with byte accounting.

`allgather_payloads` exchanges variable-size uint8 payloads: a one-element int64 size
all-gather, then every payload padded with zeros to the largest, then an equal-size
all-gather; receivers trim each payload to its true length. Payloads are never empty (every
encoder writes a header). A failed or timed-out collective (a rank died) becomes a GradSAError
naming the collective, the step and the timeout.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from pimrt.gradsa.accounting import ByteCounter
from pimrt.gradsa.errors import GradSAError

SIZE_BYTES = 8  # the int64 size exchanged per payload


def _fail(what: str, step: int, exc: BaseException) -> GradSAError:
    return GradSAError(f"{what} failed at step {step} on rank {dist.get_rank()}: a peer rank died, "
                       f"hung or timed out (the process group's timeout bounds the wait): {exc}")


def group_size(group) -> int:
    return dist.get_world_size(group)


def allgather_payloads(payload: torch.Tensor, group, counter: ByteCounter, step: int,
                       equal_size: bool = False) -> torch.futures.Future:
    """All-gather a 1-D uint8 payload from every rank; the future yields the trimmed payloads
    in rank order. With equal_size the caller guarantees equal lengths (no size exchange)."""
    if payload.dtype != torch.uint8 or payload.dim() != 1 or payload.numel() == 0:
        raise GradSAError("payloads must be non-empty 1-D uint8 tensors")
    world = group_size(group)
    n = payload.numel()
    try:
        if equal_size:
            sizes = [n] * world
        else:
            size = torch.tensor([n], dtype=torch.int64, device=payload.device)
            all_sizes = [torch.zeros_like(size) for _ in range(world)]
            dist.all_gather(all_sizes, size, group=group)
            counter.allgather(SIZE_BYTES, world, payload=0)
            sizes = [int(s.item()) for s in all_sizes]
        longest = max(sizes)
        if longest != n:
            payload = torch.cat([payload, payload.new_zeros(longest - n)])
        out = [torch.empty(longest, dtype=torch.uint8, device=payload.device) for _ in range(world)]
        work = dist.all_gather(out, payload, group=group, async_op=True)
    except GradSAError:
        raise
    except Exception as exc:  # gloo/NCCL errors are RuntimeError or DistBackendError
        raise _fail("payload size exchange" if not equal_size else "payload all_gather", step, exc) from exc
    counter.allgather(longest, world, payload=n)

    def trim(fut):
        try:
            fut.wait()
        except Exception as exc:
            raise _fail("payload all_gather", step, exc) from exc
        return [t[:s] for t, s in zip(out, sizes)]

    return work.get_future().then(trim)


def allreduce_tensor(tensor: torch.Tensor, group, counter: ByteCounter, step: int) -> torch.futures.Future:
    """Sum-all-reduce `tensor` in place; the future yields it."""
    world = group_size(group)
    try:
        work = dist.all_reduce(tensor, group=group, async_op=True)
    except Exception as exc:
        raise _fail("all_reduce", step, exc) from exc
    counter.allreduce(tensor.numel() * tensor.element_size(), world)

    def done(fut):
        try:
            fut.wait()
        except Exception as exc:
            raise _fail("all_reduce", step, exc) from exc
        return tensor

    return work.get_future().then(done)


def allreduce_now(tensor: torch.Tensor, group, counter: ByteCounter, step: int,
                  what: str = "all_reduce") -> torch.Tensor:
    """Sum-all-reduce `tensor` in place and wait for it (a small tensor the caller needs now)."""
    try:
        dist.all_reduce(tensor, group=group)
    except Exception as exc:
        raise _fail(what, step, exc) from exc
    counter.allreduce(tensor.numel() * tensor.element_size(), group_size(group))
    return tensor
