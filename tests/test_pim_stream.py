"""The PIM's request stream in the timing is the program the RTL runs. tests/test_pim_access.py
checks pimrt.pim.access.bank_accesses (the DRAM columns a unit reads and writes, in program
order) against the recorded bank port of the RTL; here every PIM task of a training step is
decoded back from the memctl records the timing sends (pimrt.runtime.work.pim_records) and
compared with bank_accesses of that task's bank share: the same accesses in the same order and
count, each an all-bank command in every channel, every stream inside its tensor's rows, and
the units' extra cycles (program cycles beyond the commands) as DELAYs."""
import numpy as np
import pytest
import torch
from torch import nn

from pimrt.graph import capture
from pimrt.memctl.config import decode_address, load_part
from pimrt.pim import access
from pimrt.runtime.placement import place_step
from pimrt.runtime.schedule import build_schedule
from pimrt.runtime.work import (KERNELS, bank_work, context, gpu_records, pim_kernel_cycles,
                                pim_records, _role_region)
from pimrt.trace.records import DELAY, READ, WRITE
from test_runtime import small_cnn


def _split(records, kernels):
    """A task's records -> one (commands, delay cycles) per kernel (`kernels`: each one's
    command count), in order; a kernel's part runs to the next kernel's first command."""
    cmds = records[records["op"] != DELAY]
    pos = np.flatnonzero(records["op"] != DELAY)
    out, at = [], 0
    for n in kernels:
        nxt = pos[at + n] if at + n < len(pos) else len(records)
        part = records[pos[at]:nxt]
        out.append((cmds[at:at + n], int(part["value"][part["op"] == DELAY].sum())))
        at += n
    assert at == len(cmds)
    return out


@pytest.mark.parametrize("part_name", ["hbm2_pim", "v100_hbm2_pim"])
@pytest.mark.parametrize("groups,slices", [(1, 1), (2, 2)])
def test_every_pim_task_sends_its_rtl_program(part_name, groups, slices):
    seen = _check_streams(capture(small_cnn([8, 16], [False, True], "max"), (4, 3, 16, 16)),
                          part_name, groups, slices)
    # the step ran every kind of PIM program the small CNN has
    assert {"bn_stats_ch", "bn_apply_ch", "relu_fwd", "relu_bwd", "residual_add",
            "maxpool2_fwd", "bn_bwd_stats_ch", "bn_bwd_apply_ch", "sgd"} <= seen


def test_relu6_tasks_send_their_rtl_program():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                        nn.ReLU6(inplace=True), nn.Conv2d(8, 16, 3, padding=1, bias=False),
                        nn.BatchNorm2d(16), nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Dropout(0.2), nn.Linear(16, 10))
    seen = _check_streams(capture(net, (4, 3, 16, 16)), "v100_hbm2_pim", 1, 2)
    assert {"relu6_fwd", "relu6_bwd"} <= seen and not {"relu_fwd", "relu_bwd"} & seen


def _check_streams(g, part_name, groups, slices) -> set:
    """Every PIM task of g's step against its RTL-checked program; -> the kernels seen."""
    part = load_part(part_name)
    ctx = context(g, part, place_step(g, part))
    schedule = build_schedule(g, groups, slices=slices)
    chans, cols = part.channel_count, part.columns_per_row
    span = part.capacity_bytes // part.org["rows"]
    seen = set()
    for task in (t for t in schedule.tasks if t.side == "pim"):
        kernels = KERNELS[(task.kind, task.phase)]
        accs = [access.bank_accesses(k, lanes=part.pim["lanes"], column_bytes=part.request_bytes,
                                     **bank_work(k, task, ctx)) for k, _ in kernels]
        records = pim_records(task, ctx)
        parts = _split(records, [len(a) * chans for a in accs])
        for (kernel, roles), acc, (cmds, delay) in zip(kernels, accs, parts):
            seen.add(kernel)
            f = decode_address(part, cmds["addr"])
            # every access is one all-bank command in each channel, channel after channel
            assert (f["channel"] == np.tile(np.arange(chans), len(acc))).all()
            for key in ("row", "column"):
                assert (f[key].reshape(-1, chans) == f[key][::chans, None]).all()
            ops = cmds["op"][::chans]
            assert ((ops == WRITE) == (acc["rw"] == access.WRITE)).all()
            assert ((ops == READ) == (acc["rw"] != access.WRITE)).all()
            # each stream: the program's columns, in program order, from the stream's first
            # column in each bank, inside the rows of the tensor it names
            idx = f["row"][::chans] * cols + f["column"][::chans]
            for s, stream in enumerate(access.kernel_streams(kernel)):
                mine = acc["stream"] == s
                if not mine.any():
                    continue
                first = idx[mine][0] - acc["column"][mine][0]
                assert (idx[mine] - first == acc["column"][mine]).all(), (task.label, stream)
                region = _role_region(task, roles[stream], ctx)
                rows = f["row"][::chans][mine]
                assert rows.min() >= region.base // span
                assert rows.max() <= (region.end - 1) // span, (task.label, stream)
            # the units' cycles beyond their commands' are waited out as DELAYs
            compute = pim_kernel_cycles(kernel, bank_work(kernel, task, ctx), ctx)
            assert delay == int(max(0.0, compute - len(acc) * ctx.pim_column_cycles))
    return seen


class _Dense(nn.Module):
    """A dense block of two layers: each CONV's output concatenated to its input."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.c1 = nn.Sequential(nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))
        self.c2 = nn.Sequential(nn.BatchNorm2d(12), nn.ReLU(), nn.Conv2d(12, 4, 3, padding=1))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        x = self.stem(x)
        x = torch.cat([x, self.c1(x)], 1)
        return self.head(torch.cat([x, self.c2(x)], 1))


def test_concat_parts_read_their_source_and_write_their_share():
    g = capture(_Dense(), (4, 3, 8, 8))
    part = load_part("v100_hbm2_pim")
    ctx = context(g, part, place_step(g, part))
    seen = _check_streams(g, "v100_hbm2_pim", 1, 1)
    assert "copy" in seen
    parts = [t for t in build_schedule(g, 1).tasks if t.kind == "concat"]
    assert len(parts) == 4
    for t in parts:
        source = _role_region(t, "source", ctx)
        assert source is ctx.placement["act:" + g[t.layer].inputs[t.part]]
        # the part's share of the output is as large as its source, to the 64-byte line
        out = _role_region(t, "output", ctx)
        share = int(out.nbytes * t.span[1]) // 64 * 64 - int(out.nbytes * t.span[0]) // 64 * 64
        assert abs(share - source.nbytes) < 64
        # the GPU-only kernel reads the source and writes the share too
        recs = gpu_records(t, ctx)
        reads = recs[recs["op"] == READ]["addr"]
        assert reads.min() >= source.base and reads.max() < source.base + source.nbytes
