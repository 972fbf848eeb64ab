"""The PIM unit: micro-ISA, assembler, golden model, RTL harnesses (pyverilator and the
batch driver), the training kernels, and their measured cost.

    from pimrt.pim import GoldenBackend, kernels, cycles_per_element
    y, mask = kernels.relu_forward(GoldenBackend(), x)

The RTL backends (pimrt.pim.rtl.PimRtl, pimrt.pim.driver.PimDriver) build hw/ with Verilator
on first use; see docs/pim.md.
"""
from pimrt.pim import kernels
from pimrt.pim.asm import Program, assemble
from pimrt.pim.backend import Backend
from pimrt.pim.cycles import column_accesses_per_element, cycles_per_element
from pimrt.pim.errors import PimError
from pimrt.pim.golden import GoldenBackend

__all__ = ["Backend", "GoldenBackend", "PimError", "Program", "assemble",
           "column_accesses_per_element", "cycles_per_element", "kernels"]
