"""The co-execution runtime: a training step split into host tasks (CONV/linear) and PIM tasks
(batch norm, ReLU, residual add, pooling, the SGD update), pipelined by output-channel groups,
turned into memory requests and timed through memctl.

    schedule.py   the task graph of one training step (pure Python on a LayerGraph)
    placement.py  where every tensor lives in the simulated DRAM
    work.py       the memory requests and compute time of each task
    timing.py     one step through memctl under a policy; the timeline
    report.py     Chrome trace, CSV, JSON, plots
"""
