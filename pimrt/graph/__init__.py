"""Model capture: a torch ``nn.Module`` -> pimrt's layer graph (see docs/graph.md).

    from pimrt import zoo
    from pimrt.graph import capture
    g = capture(zoo.build("resnet50"), (32, 3, 224, 224))
    print(g.summary(max_rows=20))
"""
from pimrt.graph.tracer import MODULE_KINDS, SUPPORTED_TEXT, capture
from pimrt.graph.errors import GraphError, SplitError, UnsupportedOpError, UnsupportedOpWarning
from pimrt.graph.layer import (BACKWARD_RULES, KINDS, PIM_KINDS, PLACEMENT, BackwardRule, Layer,
                               LayerGraph, TensorLife, mask_bytes)
from pimrt.graph.split import divisors, valid_group_counts, validate_split

__all__ = [
    "capture", "validate_split", "valid_group_counts", "divisors",
    "Layer", "LayerGraph", "TensorLife", "BackwardRule",
    "KINDS", "PIM_KINDS", "PLACEMENT", "BACKWARD_RULES", "MODULE_KINDS", "SUPPORTED_TEXT",
    "mask_bytes", "GraphError", "UnsupportedOpError", "UnsupportedOpWarning", "SplitError",
]
