"""pimrt: hardware-in-the-loop runtime for CNN training on a host with processing-in-memory.

Data path: model -> graph -> schedule -> (host ops, PIM ops) -> memory requests -> memctl ->
timeline and report. Each step lives in the sub-package of the same name.
"""

__version__ = "0.1.0"
