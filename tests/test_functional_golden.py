"""The golden model's whole-loop execution (flat loops, and loops around one inner loop, with
unrolled bodies run as their single copy) against stepping; the channel kernels of batch norm
against the per-channel kernels (bit for bit) and against the RTL (values and cycles); the
functional step's batch norm independent of channel groups."""
import numpy as np
import pytest

from pimrt.pim import isa, kernels as K, testing
from pimrt.pim.asm import assemble
from pimrt.pim.errors import PimCycleCapError, PimFaultError
from pimrt.pim.golden import GoldenBackend

DATA_OPS = ["MOV", "ADD", "SUB", "MUL", "MAD", "MAX", "CMPGT", "SEL", "FMA", "ADD.f16",
            "MAD.bf16", "MAX.f16", "SEL.bf16", "CVTLO.f16", "CVTHI.bf16", "CVTPK.f16"]


def _same(a, b):
    """Bit for bit, any dtype (the 16-bit kernels' outputs are uint16 patterns)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and (a.view(np.uint8) == b.view(np.uint8)).all()


def _random_instr(rng, in_inner: bool) -> str:
    r = rng.random()
    if in_inner and r < 0.25:                       # accumulator folds
        return rng.choice(["ADD A0, A0, G1", "MAD A1, G0, G1, A1", "ADD A0, G2, A0",
                           "MAD A1, B[p1+], G0, A1", "ADD A0, A0, B[p0+]"])
    if not in_inner and r < 0.2:
        return rng.choice(["MOV A0, S0", "MOV A1, S1", "MOV G2, B[p3+]", "MOV G3, B[p3]"])
    if r < 0.3:
        return f"ADDP p{rng.integers(0, 4)} p{rng.integers(0, 4)}, {rng.integers(-3, 4)}"
    if r < 0.33:
        return "NOP"
    name = rng.choice(DATA_OPS)
    n_src = len(isa.OPCODES[name.split('.')[0]][2]) - 1
    p = rng.integers(0, 4)

    def src():
        c = rng.random()
        if c < 0.35:
            return f"B[p{p}{'+' if rng.random() < 0.7 else ''}]"
        if c < 0.7:
            return f"G{rng.integers(0, 4)}"
        if c < 0.85:
            return f"S{rng.integers(0, 2)}"
        return f"A{rng.integers(0, 2)}"
    dst = rng.choice([f"G{rng.integers(0, 4)}", f"B[p{rng.integers(0, 4)}+]",
                      f"B[p{rng.integers(0, 4)}]", "A0", "A1"], p=[.45, .3, .1, .075, .075])
    return f"{name} {dst}, " + ", ".join(src() for _ in range(n_src))


def _random_nest(rng) -> str:
    pre = [_random_instr(rng, False) for _ in range(rng.integers(0, 4))]
    copy = [_random_instr(rng, True) for _ in range(rng.integers(1, 4))]
    post = [_random_instr(rng, False) for _ in range(rng.integers(0, 3))]
    inner = copy * int(rng.integers(1, 4))
    lines = ["top:", *pre, "in:", *inner, "LOOP c0, in", *post, "LOOP c1, top", "EXIT"]
    if len(lines) - 2 > isa.CRF_DEPTH:
        lines = ["top:", *pre, "in:", *copy, "LOOP c0, in", *post, "LOOP c1, top", "EXIT"]
    return "\n".join(lines)


def _random_flat(rng) -> str:
    """Straight-line code, one loop (unrolled or not), straight-line code; or a nest whose
    two loops start at the same pc."""
    pre = [_random_instr(rng, False) for _ in range(rng.integers(0, 3))]
    copy = [_random_instr(rng, rng.random() < 0.5) for _ in range(rng.integers(1, 4))]
    body = copy * int(rng.integers(1, 4))
    post = [_random_instr(rng, False) for _ in range(rng.integers(0, 3))]
    tail = ["LOOP c1, top"] if rng.random() < 0.3 else []
    return "\n".join([*pre, "top:", *body, "LOOP c0, top", *tail, *post, "EXIT"])


def _kernel_like_nest(rng) -> str:
    """A nest shaped like a channel kernel, with random operations: constants loaded and
    accumulators zeroed per outer iteration, a column walk, sums stored."""
    pre = ["MOV A0, S0", "MOV A1, S0", "MOV G2, B[p3+]", "MOV G3, B[p3+]"][:rng.integers(1, 5)]
    copy = ["MOV G0, B[p0+]"]
    for _ in range(rng.integers(1, 4)):
        name = rng.choice(DATA_OPS)
        n_src = len(isa.OPCODES[name.split('.')[0]][2]) - 1
        srcs = ", ".join(rng.choice(["G0", "G2", "G3", "S1", "B[p1+]", "G1"][:5 + len(copy) // 2])
                         for _ in range(n_src))
        copy.append(f"{name} {rng.choice(['G1', 'B[p2+]'])}, {srcs}")
    copy.append(rng.choice(["ADD A0, A0, G0", "MAD A1, G0, G0, A1", "NOP", "ADDP p1, 1"]))
    inner = copy * int(rng.integers(1, 3))
    post = ["MOV B[p4+], A0", "MOV B[p4+], A1", "MOV B[p4+], G1"][:rng.integers(0, 4)]
    return "\n".join(["top:", *pre, "in:", *inner, "LOOP c0, in", *post, "LOOP c1, top",
                      "EXIT"][:isa.CRF_DEPTH + 2])


def _run(prog, vectorise, bank, ptrs, counts, scal):
    g = GoldenBackend(rows=4, cols=32, vectorise=vectorise)
    g.load_program(prog)
    g.set_scalars(scal)
    g.set_pointers(ptrs)
    g.set_counts(counts)
    g.write_bank(0, bank)
    try:
        cycles, err = g.run(max_cycles=3000), None
    except PimFaultError as e:
        cycles, err = None, ("fault", e.code, e.pc)
    except PimCycleCapError as e:
        cycles, err = None, ("cap", e.pc)
    return g, cycles, err


def test_loops_at_once_equal_stepping():
    rng = np.random.default_rng(11)
    nests = 0
    orig = GoldenBackend._run_nest

    def counting(self, *a, **kw):
        nonlocal nests
        ok = orig(self, *a, **kw)
        nests += ok
        return ok

    GoldenBackend._run_nest = counting
    try:
        for case in range(600):
            text = [_random_nest, _kernel_like_nest, _random_flat][case % 3](rng)
            if len(assemble(text)) > isa.CRF_DEPTH:
                continue
            prog = assemble(text)
            vals = rng.standard_normal((128, 8)).astype(np.float32)
            vals.ravel()[rng.integers(0, vals.size, 20)] = [0.0, -0.0, np.inf, -np.inf, np.nan] * 4
            bank = vals.view(np.uint32)
            ptrs = [int(v) for v in rng.integers(0, 70, 8)] if case % 4 != 0 else \
                [0, 30, 60, 90, 110, 0, 0, 0]
            counts = [int(v) for v in rng.integers(0, 6, 4)]
            scal = [0.0, float(rng.standard_normal())]
            fast, cf, ef = _run(prog, True, bank, ptrs, counts, scal)
            slow, cs, es = _run(prog, False, bank, ptrs, counts, scal)
            where = f"case {case}:\n{prog.listing()}\nptrs {ptrs} counts {counts}"
            assert (cf, ef) == (cs, es), where
            assert (fast.bank == slow.bank).all(), where
            assert (fast.grf == slow.grf).all() and (fast.acc == slow.acc).all(), where
            assert fast.ptr == slow.ptr and fast.lc == slow.lc, where
            assert (fast.col_reads, fast.col_writes) == (slow.col_reads, slow.col_writes), where
    finally:
        GoldenBackend._run_nest = orig
    assert nests > 100         # the whole-nest path did run


@pytest.mark.parametrize("name", sorted(K.CHANNEL_KERNELS))
def test_channel_kernels_at_once_equal_stepping(name):
    k = K.CHANNEL_KERNELS[name]
    rng = np.random.default_rng(3)
    C, n = 5, 8 * 13 + 3
    arrays = {s: rng.standard_normal((C, n)).astype(np.float32) for s in k.inputs}
    params = {p: rng.standard_normal(C).astype(np.float32) for p in k.params}
    fast, slow = GoldenBackend(), GoldenBackend(vectorise=False)
    rf, rs = K.run_channels(fast, name, arrays, params), K.run_channels(slow, name, arrays, params)
    assert rf.cycles == rs.cycles
    for s in rf.outputs:
        assert _same(rf.outputs[s], rs.outputs[s])
    if k.acc:
        assert (rf.acc == rs.acc).all()
    assert (fast.col_reads, fast.col_writes) == (slow.col_reads, slow.col_writes)


def _lane_sums(x, L, block):
    """bn_stats_ch in numpy: per channel and lane, K = the lane's first value, then float32
    sums of x - K and (x - K)^2 in column order (padding adds exact zeros)."""
    C, n = x.shape
    cols = -(-n // L)
    s = np.zeros((C, 2, L), np.float32)
    for c in range(C):
        for lane in range(min(L, n)):
            d = (x[c, lane::L] - x[c, lane]).astype(np.float32)
            s[c, 0, lane] = np.add.accumulate(np.concatenate([[0], d]).astype(np.float32))[-1]
            sq = (d * d).astype(np.float32)
            s[c, 1, lane] = np.add.accumulate(np.concatenate([[0], sq]).astype(np.float32))[-1]
    return s, cols


@pytest.mark.parametrize("shape", [(4, 16, 8, 8), (3, 5, 7, 9), (2, 6, 4, 4), (64, 3), (2, 2, 1)])
def test_channel_batch_norm_statistics_and_channel_independence(shape):
    """bn_stats_ch's per-lane sums equal numpy's float32 sums bit for bit; each channel run on
    its own gives the same bits as all channels in one run."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 2 + 100).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    C = shape[1]
    gamma = (rng.random(C) + 0.5).astype(np.float32)
    beta = rng.standard_normal(C).astype(np.float32)
    g = GoldenBackend()
    xc = K._by_channel(x)
    r = K.run_channels(g, "bn_stats_ch", {"x": xc})
    want, _ = _lane_sums(xc, g.lanes, K.CHANNEL_KERNELS["bn_stats_ch"].block())
    assert _same(r.acc[:, 0], want)
    got = K.batchnorm_forward_2pass(g, x, gamma, beta, 1e-5)
    m32, i32 = got[1], got[2]
    bwd = K.batchnorm_backward_channels(g, x, dy, gamma, m32, i32)
    for c in range(C):
        one = K.batchnorm_forward_2pass(g, x[:, c:c + 1], gamma[c:c + 1], beta[c:c + 1], 1e-5)
        assert all(_same(a, b) for a, b in zip(one, (got[0][:, c:c + 1], m32[c:c + 1],
                                                      i32[c:c + 1])))
        ob = K.batchnorm_backward_channels(g, x[:, c:c + 1], dy[:, c:c + 1], gamma[c:c + 1],
                                           m32[c:c + 1], i32[c:c + 1])
        assert all(_same(a, b) for a, b in zip(ob, (bwd[0][:, c:c + 1], bwd[1][c:c + 1],
                                                     bwd[2][c:c + 1])))


def test_big_channels_are_cut_into_pieces():
    g = GoldenBackend(rows=4, cols=32)               # 128 columns
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 8 * 150 + 5)).astype(np.float32)
    k = K.CHANNEL_KERNELS["bn_bwd_stats_ch"]
    pieces, P = K.channel_layout(g, k, x.shape[1])
    assert pieces > 1 and 2 * P + 3 <= g.depth
    r = K.run_channels(g, "bn_bwd_stats_ch", {"x": x, "dy": x}, {"mean": np.zeros(3, np.float32)})
    sums = r.acc.astype(np.float64).sum(axis=(1, 3))
    np.testing.assert_allclose(sums[:, 0], x.sum(1, dtype=np.float64), rtol=1e-6)
    np.testing.assert_allclose(sums[:, 1], (x.astype(np.float64) ** 2).sum(1), rtol=1e-6)
    # a channel's results do not depend on the channels beside it
    one = K.run_channels(g, "bn_bwd_stats_ch", {"x": x[1:2], "dy": x[1:2]},
                         {"mean": np.zeros(1, np.float32)})
    assert (one.acc[0] == r.acc[1]).all()
    # the statistics over pieces: the mean and variance of each channel
    y, mean, inv = K.batchnorm_forward_2pass(g, x[None], np.ones(3, np.float32),
                                             np.zeros(3, np.float32))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, x64.mean(1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(inv, 1 / np.sqrt(x64.var(1) + 1e-5), rtol=1e-6)


def test_channel_kernels_driver_equal_golden():
    testing.skip_without_verilator()
    drv = testing.driver()
    rng = np.random.default_rng(9)
    for name, k in K.CHANNEL_KERNELS.items():
        for C, n in ((37, 1000), (3, 8 * 5000 + 1)):     # many channels; pieces
            arrays = {s: (rng.standard_normal((C, n)) * 3).astype(np.float32) for s in k.inputs}
            params = {p: rng.standard_normal(C).astype(np.float32) for p in k.params}
            rg = K.run_channels(GoldenBackend(), name, arrays, params)
            rd = K.run_channels(drv, name, arrays, params)
            assert rd.cycles == rg.cycles and rd.runs == rg.runs, name
            for s in rg.outputs:
                assert _same(rd.outputs[s], rg.outputs[s]), name
            if k.acc:
                assert (rd.acc == rg.acc).all(), name


def test_functional_batch_norm_groups_equal():
    import torch
    from pimrt.runtime import functional as FN
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(12).train()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_()
    x = torch.randn(3, 12, 5, 5) * 2 + 0.5
    dy = torch.randn_like(x)
    outs = []
    for groups in (1, 4):
        m = FN.PimBatchNorm2d(bn, FN.PimOps("golden", groups))
        xi = x.clone().requires_grad_(True)
        bn.weight.grad = bn.bias.grad = None
        y = m(xi)
        y.backward(dy)
        outs.append((y.detach(), xi.grad, bn.weight.grad.clone(), bn.bias.grad.clone()))
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    ref = torch.nn.functional.batch_norm(x.double(), None, None, bn.weight.double(),
                                         bn.bias.double(), training=True, eps=bn.eps)
    assert float((outs[0][0].double() - ref.detach()).abs().max()) < 1e-5
