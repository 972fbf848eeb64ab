"""The PIM unit's micro-ISA: one table shared by the assembler, the golden interpreter and the
harness (hw/pim_defs.vh holds the same numbers; a test checks they agree).

A command word is 32 bits:
    [31:27] opcode
    data ops:  [26:21] dst  [20:15] a  [14:9] b  [8:3] c  (6-bit operand fields),
               [2:0] dtype: 0 binary32, 1 binary16, 2 bfloat16 (16-bit elements two per
               32-bit lane word), 3 reserved; 4-7 the widening forms (WIDENING below)
    JMP/LOOP:  [26:22] target pc, LOOP [21:20] loop counter
    ADDP:      [26:19] pointer mask, [15:0] signed step
An operand field is [5:4] kind (0 GRF, 1 SRF, 2 bank, 3 ACC) and [3:0] index; for the bank
[2:0] names the pointer and [3] asks for a post-increment of that pointer by one column.
"""
from __future__ import annotations

from dataclasses import dataclass

LANES = 8            # fp32 lanes: one 256-bit column
CRF_DEPTH = 32       # command register file entries
N_GRF = 16           # general registers, LANES x 32 bit each
N_SRF = 16           # scalar registers (host-loaded, broadcast to every lane)
N_ACC = 4            # accumulator registers, LANES x 32 bit each
N_PTR = 8            # bank column pointers (16 bit)
N_CNT = 4            # loop counts (host-loaded, 32 bit)
PTR_MASK = 0xFFFF
QNAN = 0x7FC00000    # the canonical quiet NaN every arithmetic NaN result becomes

K_GRF, K_SRF, K_BANK, K_ACC = 0, 1, 2, 3
KIND_LETTER = {K_GRF: "G", K_SRF: "S", K_BANK: "B", K_ACC: "A"}

# name -> (opcode, format, data operands in order). Data opcodes are lane op + 8.
OPCODES: dict[str, tuple[int, str, tuple[str, ...]]] = {
    "NOP":   (0, "none", ()),
    "EXIT":  (1, "none", ()),
    "JMP":   (2, "jmp", ()),
    "LOOP":  (3, "loop", ()),
    "ADDP":  (4, "addp", ()),
    "MOV":   (8, "data", ("d", "a")),
    "ADD":   (9, "data", ("d", "a", "b")),
    "SUB":   (10, "data", ("d", "a", "b")),
    "MUL":   (11, "data", ("d", "a", "b")),
    "MAD":   (12, "data", ("d", "a", "b", "c")),
    "MAX":   (13, "data", ("d", "a", "b")),
    "MIN":   (14, "data", ("d", "a", "b")),
    "CMPGT": (15, "data", ("d", "a", "b")),
    "CMPGE": (16, "data", ("d", "a", "b")),
    "CMPEQ": (17, "data", ("d", "a", "b")),
    "SEL":   (18, "data", ("d", "a", "b", "c")),
    # 16-bit dtypes only: a lane word's low / high 16-bit element widened to binary32, and
    # two binary32 words narrowed into one word's low (a) and high (b) halves
    "CVTLO": (19, "data", ("d", "a")),
    "CVTHI": (20, "data", ("d", "a")),
    "CVTPK": (21, "data", ("d", "a", "b")),
    # fused multiply-add: a*b + c rounded once (binary32; in 16 bits then narrowed)
    "FMA":   (22, "data", ("d", "a", "b", "c")),
}
BY_CODE = {code: name for name, (code, _, _) in OPCODES.items()}
CONVERSIONS = ("CVTLO", "CVTHI", "CVTPK")
# lane ops of every dtype (the conversions apart), and all of them: name -> lane op number
LANE_OPS = {name: code - 8 for name, (code, fmt, _) in OPCODES.items()
            if fmt == "data" and name not in CONVERSIONS}
ALL_LANE_OPS = {name: code - 8 for name, (code, fmt, _) in OPCODES.items() if fmt == "data"}

# data dtypes (word bits [2:0]): the assembler's suffix (ADD.f16) -> number
F32, F16, BF16 = 0, 1, 2
DTYPES = {"f32": F32, "f16": F16, "bf16": BF16}
# The widening forms (bit 2 set): the binary32 op with operand a one 16-bit element of its lane
# word widened to binary32 first (exact, as CVTLO / CVTHI): bit 1 the format (0 binary16, 1
# bfloat16), bit 0 the half (0 low, 1 high). `SUB.f16lo G1, G0, S0` is CVTLO.f16 then SUB in
# one instruction. Not for the conversions themselves.
WIDENING = {"f16lo": 4, "f16hi": 5, "bf16lo": 6, "bf16hi": 7}
DTYPE_NAMES = {v: k for k, v in {**DTYPES, **WIDENING}.items()}


def widening(dtype: int) -> tuple[int, int] | None:
    """A widening dtype -> (the 16-bit format F16 / BF16, the half: 0 low, 1 high); None for
    the others."""
    return (BF16 if dtype & 2 else F16, dtype & 1) if dtype & 4 else None

# fault codes reported by the unit (err_code) and the golden model
E_NONE, E_OPCODE, E_REG, E_OPERAND, E_ADDR, E_PC = range(6)
FAULTS = {
    E_OPCODE: "unknown opcode",
    E_REG: "register out of range (or a scalar register as destination)",
    E_OPERAND: "two different bank pointers read in one instruction",
    E_ADDR: "bank pointer past the end of the bank",
    E_PC: "program counter ran past the command register file (no EXIT)",
}


@dataclass(frozen=True)
class Operand:
    kind: int
    index: int
    inc: bool = False

    def encode(self) -> int:
        if self.kind == K_BANK:
            return (K_BANK << 4) | (int(self.inc) << 3) | (self.index & 7)
        return (self.kind << 4) | (self.index & 15)

    @staticmethod
    def decode(field: int) -> "Operand":
        kind = (field >> 4) & 3
        if kind == K_BANK:
            return Operand(K_BANK, field & 7, bool(field & 8))
        return Operand(kind, field & 15)

    def __str__(self) -> str:
        if self.kind == K_BANK:
            return f"B[p{self.index}{'+' if self.inc else ''}]"
        return f"{KIND_LETTER[self.kind]}{self.index}"


@dataclass(frozen=True)
class Instr:
    """A decoded command word. `op` is the opcode number (may be unknown)."""
    word: int
    op: int
    d: Operand
    a: Operand
    b: Operand
    c: Operand
    target: int
    counter: int
    mask: int
    step: int
    dtype: int = 0      # data ops: word bits [2:0] (all but 3 valid)

    @property
    def name(self) -> str | None:
        return BY_CODE.get(self.op)

    @property
    def fmt(self) -> str | None:
        name = self.name
        return OPCODES[name][1] if name else None

    def used(self) -> tuple[str, ...]:
        name = self.name
        return OPCODES[name][2] if name else ()


def decode(word: int) -> Instr:
    word &= 0xFFFFFFFF
    step = word & 0xFFFF
    if step & 0x8000:
        step -= 0x10000
    return Instr(
        word=word, op=word >> 27,
        d=Operand.decode((word >> 21) & 63), a=Operand.decode((word >> 15) & 63),
        b=Operand.decode((word >> 9) & 63), c=Operand.decode((word >> 3) & 63),
        target=(word >> 22) & 31, counter=(word >> 20) & 3, mask=(word >> 19) & 255, step=step,
        dtype=word & 7,
    )


def encode_data(name: str, ops: dict[str, Operand], dtype: int = F32) -> int:
    code = OPCODES[name][0]
    word = (code << 27) | (dtype & 7)
    for slot, shift in (("d", 21), ("a", 15), ("b", 9), ("c", 3)):
        if slot in ops:
            word |= ops[slot].encode() << shift
    return word


def encode_jmp(target: int) -> int:
    return (OPCODES["JMP"][0] << 27) | ((target & 31) << 22)


def encode_loop(counter: int, target: int) -> int:
    return (OPCODES["LOOP"][0] << 27) | ((target & 31) << 22) | ((counter & 3) << 20)


def encode_addp(mask: int, step: int) -> int:
    return (OPCODES["ADDP"][0] << 27) | ((mask & 255) << 19) | (step & 0xFFFF)


def encode_plain(name: str) -> int:
    return OPCODES[name][0] << 27


def fault_of(ins: Instr, pc: int, ptr: list[int], depth: int) -> int:
    """The fault the unit raises before executing `ins` at `pc` (E_NONE if none).
    Same order of checks as hw/pim_unit.v."""
    if pc >= CRF_DEPTH:
        return E_PC
    fmt = ins.fmt
    if fmt is None:
        return E_OPCODE
    if fmt != "data":
        return E_NONE
    if ins.dtype == 3 or (ins.name in CONVERSIONS and ins.dtype not in (F16, BF16)):
        return E_OPCODE     # the reserved dtype, or a conversion without a plain 16-bit dtype
    used = ins.used()
    srcs = [getattr(ins, s) for s in used if s != "d"]
    if ins.d.kind == K_SRF or any(o.kind == K_ACC and o.index >= N_ACC for o in [ins.d, *srcs]):
        return E_REG
    banks = [o.index for o in srcs if o.kind == K_BANK]
    if banks and any(p != banks[0] for p in banks):
        return E_OPERAND
    if banks and ptr[banks[0]] >= depth:
        return E_ADDR
    if ins.d.kind == K_BANK and ptr[ins.d.index] >= depth:
        return E_ADDR
    return E_NONE


def disassemble(word: int) -> str:
    ins = decode(word)
    fmt = ins.fmt
    if fmt is None:
        return f".word 0x{word:08x}  ; unknown opcode {ins.op}"
    if fmt == "none":
        return ins.name
    if fmt == "jmp":
        return f"JMP {ins.target}"
    if fmt == "loop":
        return f"LOOP c{ins.counter}, {ins.target}"
    if fmt == "addp":
        ptrs = " ".join(f"p{i}" for i in range(N_PTR) if ins.mask >> i & 1)
        return f"ADDP {{{ptrs}}}, {ins.step}"
    if ins.dtype == 3 or (ins.name in CONVERSIONS and ins.dtype > BF16):
        return f".word 0x{word:08x}  ; {ins.name} with reserved dtype bits {ins.dtype}"
    suffix = f".{DTYPE_NAMES[ins.dtype]}" if ins.dtype else ""
    return f"{ins.name}{suffix} " + ", ".join(str(getattr(ins, s)) for s in ins.used())
