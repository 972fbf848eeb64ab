"""Micro-ISA: encoding table shared with hw/pim_defs.vh, assembler, golden interpreter
(faults, cycle counts, vectorised loops == stepping)."""
import re

import numpy as np
import pytest
from hypothesis import given, strategies as st

from pimrt.errors import PimrtError
from pimrt.pim import build, isa
from pimrt.pim.asm import assemble
from pimrt.pim.errors import PimAsmError, PimCapacityError, PimCycleCapError, PimFaultError
from pimrt.pim.golden import GoldenBackend
from pimrt.pim.kernels import STREAM_KERNELS


def test_isa_table_matches_verilog_defines():
    text = (build.HW_DIR / "pim_defs.vh").read_text()
    defs = {m[0]: int(m[1]) for m in re.findall(r"`define (\w+)\s+\d+'d(\d+)", text)}
    for name, (code, _, _) in isa.OPCODES.items():
        assert defs[f"OP_{name}"] == code
    for name, lop in isa.LANE_OPS.items():
        assert defs[f"LOP_{name}"] == lop
    assert defs["K_GRF"] == isa.K_GRF and defs["K_SRF"] == isa.K_SRF
    assert defs["K_BANK"] == isa.K_BANK and defs["K_ACC"] == isa.K_ACC
    for name in ("E_OPCODE", "E_REG", "E_OPERAND", "E_ADDR", "E_PC"):
        assert defs[name] == getattr(isa, name)


def test_assemble_disassemble_round_trip():
    src = """
    top: MAD B[p1+], B[p0+], S0, S1
         CMPGT G3, A2, B[p7]
         SEL B[p2+], G1, S15, G0
         LOOP c3, top
         ADDP p0 p5 p7, -100
         JMP top
         NOP
         EXIT"""
    prog = assemble(src)
    again = assemble("\n".join(isa.disassemble(w) for w in prog.words))
    assert again.words == prog.words


@pytest.mark.parametrize("text, needle", [
    ("FOO G0, G1", "unknown instruction"),
    ("ADD G16, G0, G1", "G16 out of range"),
    ("ADD A4, G0, G1", "A4 out of range"),
    ("ADD S0, G0, G1", "read-only"),
    ("ADD G0, B[p0+], B[p1+]", "one bank column"),
    ("ADD G0, G1", "takes 3 operands"),
    ("LOOP c4, 0", "c4 out of range"),
    ("JMP nowhere", "unknown label"),
    ("ADDP p0, 40000", "16 signed bits"),
    ("MOV G0, X1", "bad operand"),
])
def test_assembler_errors_name_the_line(text, needle):
    with pytest.raises(PimAsmError, match=re.escape(needle)) as info:
        assemble("NOP\n" + text)
    assert "line 2" in str(info.value)
    assert isinstance(info.value, PimrtError)


def test_program_too_long():
    with pytest.raises(PimAsmError, match="holds 32"):
        assemble("NOP\n" * 33)


def _golden(words, **cfg):
    g = GoldenBackend(rows=4, cols=32)
    g.load_program(words)
    g.set_scalars(cfg.get("s", [0.0]))
    g.set_pointers(cfg.get("p", [0] * 8))
    g.set_counts(cfg.get("c", [1] * 4))
    return g


@pytest.mark.parametrize("words, code, pc", [
    ([isa.encode_plain("NOP"), 0x38000000], isa.E_OPCODE, 1),              # opcode 7
    ([0xF8000000], isa.E_OPCODE, 0),                                        # opcode 31
    ([isa.encode_data("ADD", {"d": isa.Operand(isa.K_ACC, 5), "a": isa.Operand(isa.K_GRF, 0),
                              "b": isa.Operand(isa.K_GRF, 0)})], isa.E_REG, 0),
    ([isa.encode_data("MOV", {"d": isa.Operand(isa.K_SRF, 0), "a": isa.Operand(isa.K_GRF, 0)})],
     isa.E_REG, 0),
    ([isa.encode_data("ADD", {"d": isa.Operand(isa.K_GRF, 0), "a": isa.Operand(isa.K_BANK, 0),
                              "b": isa.Operand(isa.K_BANK, 1)})], isa.E_OPERAND, 0),
    ([isa.encode_plain("NOP")] * 32, isa.E_PC, 32),
])
def test_golden_faults(words, code, pc):
    g = _golden(words)
    with pytest.raises(PimFaultError) as info:
        g.run()
    assert info.value.code == code and info.value.pc == pc
    assert f"pc {pc}" in str(info.value)


def test_golden_address_fault_and_cycle_cap():
    g = _golden(assemble("top: MOV G0, B[p0+]\nLOOP c0, top\nEXIT").words, c=[1000])
    with pytest.raises(PimFaultError, match="past the end of the bank") as info:
        g.run()
    assert info.value.pc == 0 and info.value.code == isa.E_ADDR
    g = _golden(assemble("top: ADD G0, G0, S0\nJMP top").words)
    with pytest.raises(PimCycleCapError, match="did not EXIT within 1000 cycles") as info:
        g.run(max_cycles=1000)
    assert info.value.pc == 0


def test_bank_span_checked():
    g = GoldenBackend(rows=4, cols=32)
    with pytest.raises(PimCapacityError, match="do not fit the bank of 128 columns"):
        g.write_bank(100, np.zeros((40, 8), np.uint32))


@pytest.mark.parametrize("name", sorted(STREAM_KERNELS))
def test_vectorised_loops_equal_stepping(name):
    k = STREAM_KERNELS[name]
    rng = np.random.default_rng(7)
    arrays = {s: rng.standard_normal(8 * 97).astype(np.float32) for s in k.inputs}
    scal = {s: float(rng.standard_normal()) for s in k.scalars}
    from pimrt.pim.kernels import run_stream
    fast, slow = GoldenBackend(), GoldenBackend(vectorise=False)
    rf, rs = run_stream(fast, name, arrays, scal), run_stream(slow, name, arrays, scal)
    assert rf.cycles == rs.cycles
    for s in rf.outputs:
        assert (rf.outputs[s].view(np.uint32) == rs.outputs[s].view(np.uint32)).all()
    assert (fast.col_reads, fast.col_writes) == (slow.col_reads, slow.col_writes)


@given(prog=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=32),
       ptrs=st.lists(st.integers(0, 140), min_size=8, max_size=8))
def test_random_words_never_crash_the_golden_model(prog, ptrs):
    g = _golden(prog, p=ptrs, c=[3, 2, 1, 0])
    try:
        g.run(max_cycles=500)
    except (PimFaultError, PimCycleCapError):
        pass


def test_loop_semantics_and_cycles():
    # nested loops: inner body runs c0 times per outer pass, outer c1 times
    prog = assemble("""
        MOV A0, S0
    outer:
    inner: ADD A0, A0, S1
        LOOP c0, inner
        LOOP c1, outer
        MOV B[p0+], A0
        EXIT""")
    g = _golden(prog.words, s=[0.0, 1.0], c=[5, 3, 1, 1])
    cycles = g.run()
    assert g.read_bank(0, 1).view(np.float32)[0, 0] == 15.0
    assert cycles == 1 + 3 * (5 * 2 + 1) + 2
