"""Every data dependency of the training step is an edge of its task graph: a task reads only
what tasks it depends on (directly or through others) have written. The reads and writes come
from what each op means (a CONV reads its whole input, batch norm reads its input channel by
channel, ...), not from the scheduler's own bookkeeping, so a dropped edge (a batch norm group
that no longer waits for its CONV's group) fails here."""
import dataclasses

from hypothesis import assume, given, settings, strategies as st

from pimrt.graph import capture
from pimrt.runtime.schedule import build_schedule, channelwise
from test_runtime import _ancestors, cnns

WHOLE = (0.0, 1.0)


def _portion(t) -> tuple[tuple[float, float], tuple[float, float]]:
    """(channel range, batch range) of a task's own share of its layer's tensors."""
    ch, b = WHOLE, WHOLE
    if t.group >= 0:
        ch = (t.group / t.groups, (t.group + 1) / t.groups)
    if t.span is not None:
        ch = tuple(t.span)
    if t.slice >= 0:
        b = (t.slice / t.slices, (t.slice + 1) / t.slices)
    return ch, b


def _overlap(p, q) -> bool:
    return all(a[0] < b[1] and b[0] < a[1] for a, b in zip(p, q))


def accesses(schedule):
    """task id -> (reads, writes), each a list of (tensor, (channels, batch)) by what the op
    means. Tensors: act:X (a feature map), grad:X (its gradient), stats:X (batch norm's
    per-slice statistics), pgrad:X; parameters are read from the last step and written for
    the next one (no dependency inside the step)."""
    g = schedule.graph
    base = {n.name: (n.view_of or n.name) for n in g.nodes}

    def real(name):
        while base.get(name, name) != name:
            name = base[name]
        return name

    out = {}
    for t in schedule.tasks:
        own = _portion(t)
        layer = g[t.layer] if t.layer in g else None
        ins = [real(i) for i in layer.inputs] if layer is not None else []
        reads, writes = [], []
        if t.kind in ("conv", "linear"):
            dw = channelwise(layer, t.groups)          # depthwise: group g reads group g
            inp = (own[0] if dw else WHOLE, own[1])
            if t.phase == "fwd":
                reads.append((f"act:{ins[0]}", inp))
                writes.append((f"act:{t.layer}", own))
            elif t.phase == "bwd_data":
                reads.append((f"grad:{t.layer}", own if dw else (WHOLE, WHOLE)))
                writes.append((f"grad:{ins[0]}", own if dw else (WHOLE, WHOLE)))
            else:                                       # bwd_weight
                reads += [(f"act:{ins[0]}", (WHOLE, WHOLE)), (f"grad:{t.layer}", own)]
                writes.append((f"pgrad:{t.layer}", (WHOLE, WHOLE)))
        elif t.kind == "loss":
            logits = t.tensors["input"][0]
            reads.append((f"act:{logits}", (WHOLE, WHOLE)))
            writes.append((f"grad:{logits}", (WHOLE, WHOLE)))
        elif t.kind == "batchnorm_stats":
            reads.append((f"act:{ins[0]}", own))
            writes.append((f"stats:{t.layer}", own))
        elif t.kind == "batchnorm_apply":
            reads += [(f"act:{ins[0]}", own), (f"stats:{t.layer}", (WHOLE, WHOLE))]
            writes.append((f"act:{t.layer}", own))
        elif t.kind == "concat":
            src = ins[t.part] if t.part >= 0 else None
            if src is not None:
                reads.append((f"act:{src}", (WHOLE, WHOLE)))
            else:
                reads += [(f"act:{i}", (WHOLE, WHOLE)) for i in ins]
            writes.append((f"act:{t.layer}", own))
        elif t.kind == "accumulate":
            reads.append((f"grad:{t.layer}", own))
            writes.append((f"grad:{t.layer}", own))
        elif t.kind in ("update", "fold", "select", "apply", "sample", "exchange", "fetch",
                        "evict"):
            if t.kind in ("update", "fold"):
                reads.append((f"pgrad:{t.layer}", (WHOLE, WHOLE)))
        elif t.phase == "fwd":                          # element-wise, channel by channel
            # batch norm needs its channels over the whole batch
            src = (own[0], WHOLE) if layer.kind == "batchnorm" else own
            reads += [(f"act:{i}", src) for i in ins]
            writes.append((f"act:{t.layer}", own))
        else:                                           # element-wise backward
            full = layer.kind == "batchnorm"
            reads.append((f"grad:{t.layer}", (own[0], WHOLE) if full else own))
            if layer.kind == "batchnorm":
                reads.append((f"act:{ins[0]}", (own[0], WHOLE)))
            writes.append((f"grad:{ins[0]}", own))
        out[t.id] = (reads, writes)
    return out


def missing_edges(schedule) -> list[str]:
    """Reads whose writer the reader does not wait for: (reader, tensor, writer) labels."""
    acc = accesses(schedule)
    by_id = {t.id: t for t in schedule.tasks}
    writers: dict[str, list] = {}
    for t in schedule.tasks:
        for tensor, portion in acc[t.id][1]:
            writers.setdefault(tensor, []).append((t.id, portion))
    bad = []
    for t in schedule.tasks:
        before = _ancestors(t, by_id)
        for tensor, portion in acc[t.id][0]:
            for w, wp in writers.get(tensor, []):
                if w != t.id and _overlap(portion, wp) and w not in before:
                    bad.append(f"{t.label} reads {tensor} from {by_id[w].label} without waiting")
    return bad


@settings(max_examples=25, deadline=None)
@given(model=cnns(), groups=st.sampled_from([1, 2, 4]), batch=st.sampled_from([1, 2, 4]),
       slices=st.sampled_from([1, 2, 4]), pipelined=st.booleans(),
       sliced=st.none() | st.lists(st.booleans(), min_size=5, max_size=5))
def test_every_data_dependency_is_an_edge(model, groups, batch, slices, pipelined, sliced):
    assume(batch % slices == 0)
    g = capture(model, (batch, 3, 8, 8))
    convs = [n.name for n in g.nodes if n.kind in ("conv", "linear")]
    rule = None if sliced is None else (lambda layer: sliced[convs.index(layer.name) % 5])
    s = build_schedule(g, groups, pipelined=pipelined, slices=slices, slice_rule=rule)
    assert missing_edges(s) == []


def test_a_dropped_conv_to_batch_norm_edge_is_caught():
    """The property is not vacuous: the batch norm after a CONV stops waiting for the CONV's
    group, and the check names it."""
    from test_runtime import small_cnn
    g = capture(small_cnn([8, 8], [True, False], "max"), (2, 3, 8, 8))
    s = build_schedule(g, 2)
    assert missing_edges(s) == []
    bn = next(t for t in s.tasks if t.kind == "batchnorm" and t.phase == "fwd" and t.group == 1)
    conv = {t.id for t in s.tasks if t.kind == "conv" and t.phase == "fwd"}
    cut = [dataclasses.replace(t, deps=[d for d in t.deps if d not in conv])
           if t.id == bn.id else t for t in s.tasks]
    bad = missing_edges(dataclasses.replace(s, tasks=cut))
    assert f"{bn.label} reads act:{g[bn.layer].inputs[0]} from " \
        f"{g[bn.layer].inputs[0]}.fwd[1/2] without waiting" in bad
