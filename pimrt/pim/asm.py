"""Assembler for the PIM micro-ISA (text -> command words), shared by every backend.

Syntax, one instruction per line; `;` or `#` starts a comment; `name:` defines a label:
    MOV   G0, B[p0+]          ; G0 <- column at pointer p0, then p0 += 1
    MAD   B[p1+], G0, S0, S1  ; column at p1 <- G0 * S0 + S1 (two roundings)
    ADD   A0, A0, G0          ; accumulate into A0
    LOOP  c0, top             ; counted loop on count register c0
    ADDP  p0 p1, -16          ; step pointers p0 and p1 by -16 columns
    JMP   top / NOP / EXIT
    ADD.f16 G0, G0, B[p0+]    ; data ops take a dtype suffix: .f32 (default), .f16, .bf16
    CVTLO.bf16 G1, G0         ; 16-bit conversions (.f16 or .bf16): CVTLO, CVTHI, CVTPK
    SUB.f16hi G1, G0, S0      ; widening: G0's high fp16 element widened, then the fp32 op
                              ; (.f16lo, .f16hi, .bf16lo, .bf16hi; not on the conversions)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pimrt.pim import isa
from pimrt.pim.errors import PimAsmError

_OPERAND = re.compile(r"^(?:([GSA])(\d+)|B\[\s*p(\d+)\s*(\+?)\s*\])$", re.IGNORECASE)


@dataclass(frozen=True)
class Program:
    words: tuple[int, ...]
    source: tuple[str, ...]     # one line of text per word
    labels: dict

    def __len__(self) -> int:
        return len(self.words)

    def listing(self) -> str:
        return "\n".join(f"{pc:2d}: {w:08x}  {s}" for pc, (w, s) in
                         enumerate(zip(self.words, self.source)))


def _operand(text: str, where: str) -> isa.Operand:
    m = _OPERAND.match(text.strip())
    if not m:
        raise PimAsmError(f"{where}: bad operand {text.strip()!r} (want Gn, Sn, An or B[pn] / B[pn+])")
    if m.group(1):
        letter, idx = m.group(1).upper(), int(m.group(2))
        kind = {"G": isa.K_GRF, "S": isa.K_SRF, "A": isa.K_ACC}[letter]
        limit = {isa.K_GRF: isa.N_GRF, isa.K_SRF: isa.N_SRF, isa.K_ACC: isa.N_ACC}[kind]
        if idx >= limit:
            raise PimAsmError(f"{where}: register {letter}{idx} out of range ({letter}0..{letter}{limit - 1})")
        return isa.Operand(kind, idx)
    idx = int(m.group(3))
    if idx >= isa.N_PTR:
        raise PimAsmError(f"{where}: pointer p{idx} out of range (p0..p{isa.N_PTR - 1})")
    return isa.Operand(isa.K_BANK, idx, m.group(4) == "+")


def _split(rest: str) -> list[str]:
    # commas separate operands, but not those inside B[...]
    return [p for p in (s.strip() for s in re.split(r",(?![^\[]*\])", rest)) if p] if rest else []


def assemble(text: str) -> Program:
    lines = []
    labels: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = re.split(r"[;#]", raw, maxsplit=1)[0].strip()
        while (m := re.match(r"^([A-Za-z_]\w*)\s*:\s*(.*)$", line)):
            if m.group(1) in labels:
                raise PimAsmError(f"line {lineno}: label {m.group(1)!r} defined twice")
            labels[m.group(1)] = len(lines)
            line = m.group(2).strip()
        if line:
            lines.append((lineno, line))
    if len(lines) > isa.CRF_DEPTH:
        raise PimAsmError(f"program has {len(lines)} instructions; the command register file "
                          f"holds {isa.CRF_DEPTH}")

    def target(tok: str, where: str) -> int:
        tok = tok.strip()
        if tok in labels:
            return labels[tok]
        if tok.isdigit() and int(tok) < isa.CRF_DEPTH:
            return int(tok)
        raise PimAsmError(f"{where}: unknown label {tok!r}")

    words, source = [], []
    for lineno, line in lines:
        where = f"line {lineno} ({line!r})"
        mnem, _, rest = line.partition(" ")
        mnem, _, suffix = mnem.upper().partition(".")
        if mnem not in isa.OPCODES:
            raise PimAsmError(f"{where}: unknown instruction {mnem!r}")
        _, fmt, slots = isa.OPCODES[mnem]
        dtype = {**isa.DTYPES, **isa.WIDENING}.get(suffix.lower(), -1) if suffix else isa.F32
        if dtype < 0 or (suffix and fmt != "data"):
            raise PimAsmError(f"{where}: bad dtype suffix {suffix.lower()!r} on {mnem} (data ops "
                              f"take .f32, .f16, .bf16 or a widening .f16lo, .f16hi, .bf16lo, "
                              f".bf16hi)")
        if mnem in isa.CONVERSIONS and dtype not in (isa.F16, isa.BF16):
            raise PimAsmError(f"{where}: {mnem} needs a 16-bit dtype: {mnem}.f16 or {mnem}.bf16")
        args = _split(rest.strip())
        if fmt == "none":
            if args:
                raise PimAsmError(f"{where}: {mnem} takes no operands")
            word = isa.encode_plain(mnem)
        elif fmt == "jmp":
            if len(args) != 1:
                raise PimAsmError(f"{where}: JMP takes one label")
            word = isa.encode_jmp(target(args[0], where))
        elif fmt == "loop":
            if len(args) != 2 or not re.fullmatch(r"c\d+", args[0], re.IGNORECASE):
                raise PimAsmError(f"{where}: LOOP takes a count register and a label: LOOP c0, top")
            counter = int(args[0][1:])
            if counter >= isa.N_CNT:
                raise PimAsmError(f"{where}: count register c{counter} out of range (c0..c{isa.N_CNT - 1})")
            word = isa.encode_loop(counter, target(args[1], where))
        elif fmt == "addp":
            if len(args) != 2:
                raise PimAsmError(f"{where}: ADDP takes pointers and a step: ADDP p0 p1, 8")
            mask = 0
            for tok in args[0].replace("{", " ").replace("}", " ").split():
                if not re.fullmatch(r"p\d+", tok, re.IGNORECASE) or int(tok[1:]) >= isa.N_PTR:
                    raise PimAsmError(f"{where}: bad pointer {tok!r}")
                mask |= 1 << int(tok[1:])
            try:
                step = int(args[1], 0)
            except ValueError:
                raise PimAsmError(f"{where}: bad step {args[1]!r}") from None
            if not -0x8000 <= step <= 0x7FFF:
                raise PimAsmError(f"{where}: step {step} does not fit 16 signed bits")
            word = isa.encode_addp(mask, step)
        else:
            if len(args) != len(slots):
                raise PimAsmError(f"{where}: {mnem} takes {len(slots)} operands, got {len(args)}")
            ops = {slot: _operand(arg, where) for slot, arg in zip(slots, args)}
            if ops["d"].kind == isa.K_SRF:
                raise PimAsmError(f"{where}: scalar registers are read-only for the unit")
            ptrs = {o.index for s, o in ops.items() if s != "d" and o.kind == isa.K_BANK}
            if len(ptrs) > 1:
                raise PimAsmError(f"{where}: one instruction reads one bank column; it names "
                                  f"pointers {sorted(ptrs)}")
            word = isa.encode_data(mnem, ops, dtype)
        words.append(word)
        source.append(line)
    return Program(tuple(words), tuple(source), labels)
