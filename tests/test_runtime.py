"""The co-execution runtime: schedule properties over random small CNNs (hypothesis), timing
through memctl, functional equality with torch, and bad input."""
import dataclasses
import itertools

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings, strategies as st
from torch import nn

from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.host import load_host_part
from pimrt.memctl import load_part
from pimrt.runtime.schedule import build_schedule
from pimrt.runtime.timing import time_step


class Block(nn.Module):
    def __init__(self, c, residual):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.residual = residual

    def forward(self, x):
        y = self.bn(self.conv(x))
        return torch.relu(x + y if self.residual else y)


class ProjectionBlock(nn.Module):
    """A ResNet basic block whose shortcut is a 1x1 CONV with its batch norm (the graph
    has the shortcut after the branch, as torchvision's blocks do)."""
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + self.shortcut(x))


def small_cnn(widths, residual, pool, classes=10, project=False):
    """project: a width change goes through a ProjectionBlock instead of a plain 1x1 CONV."""
    layers = [nn.Conv2d(3, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]),
              nn.ReLU()]
    c = widths[0]
    for w, r in zip(widths, residual):
        if w != c and project:
            layers.append(ProjectionBlock(c, w))
            c = w
        elif w != c:
            layers += [nn.Conv2d(c, w, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
            c = w
        layers.append(Block(c, r))
        if pool:
            layers.append(nn.MaxPool2d(2) if pool == "max" else nn.AvgPool2d(2))
            pool = None
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*layers)


def _ancestors(task, by_id) -> set[int]:
    """Ids of the tasks `task` waits for, directly or not."""
    seen, todo = set(), list(task.deps)
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo += by_id[d].deps
    return seen


@st.composite
def cnns(draw, channels=(4, 8, 16)):
    depth = draw(st.integers(1, 3))
    widths = draw(st.lists(st.sampled_from(channels), min_size=depth, max_size=depth))
    residual = draw(st.lists(st.booleans(), min_size=depth, max_size=depth))
    pool = draw(st.sampled_from([None, "max", "avg"]))
    return small_cnn(widths, residual, pool, project=draw(st.booleans()))


@settings(max_examples=20)
@given(model=cnns(), groups=st.sampled_from([1, 2, 4]), batch=st.sampled_from([1, 2, 4]),
       per_layer=st.none() | st.lists(st.sampled_from([1, 2, 4]), min_size=8, max_size=8),
       slices=st.sampled_from([1, 2, 4]), sliced=st.none() | st.lists(st.booleans(), min_size=5,
                                                                     max_size=5))
def test_schedule_runs_every_op_once_after_its_inputs(model, groups, batch, per_layer, slices,
                                                      sliced):
    """per_layer: each CONV's own group count (at most `groups`), as group_rule gives them;
    slices: the forward pass by batch slices, every CONV or those `sliced` says"""
    assume(batch % slices == 0)
    g = capture(model, (batch, 3, 8, 8))
    convs = [layer.name for layer in g.nodes if layer.kind in ("conv", "linear")]
    count = None if per_layer is None else \
        (lambda layer: per_layer[convs.index(layer.name) % len(per_layer)])
    rule = None if sliced is None else (lambda layer: sliced[convs.index(layer.name) % 5])
    s = build_schedule(g, groups, group_count=count, slices=slices, slice_rule=rule)
    if per_layer is not None and slices == 1:
        for layer in g.nodes:
            if layer.kind == "conv":
                fwd = [t for t in s.tasks if t.layer == layer.name and t.phase == "fwd"]
                want = min(groups, per_layer[convs.index(layer.name) % len(per_layer)])
                assert len(fwd) == want and all(t.groups == want for t in fwd)
    keys = [(t.layer, t.kind, t.phase, t.group, t.slice) for t in s.tasks]
    assert len(keys) == len(set(keys))                        # every op exactly once
    position = {t.id: i for i, t in enumerate(s.tasks)}
    for t in s.tasks:
        assert all(position[d] < position[t.id] for d in t.deps)   # inputs first
    for layer in g.nodes:                                     # every compute layer forward
        if layer.kind in ("conv", "linear", "batchnorm", "relu", "add", "maxpool", "avgpool"):
            fwd = [t for t in s.tasks if t.layer == layer.name and t.phase == "fwd"]
            assert fwd and len({(t.kind, t.group, t.slice) for t in fwd}) == len(fwd)
            # by groups, by slices or whole, each covering the tensor once
            assert all(t.slice < 0 for t in fwd) or all(t.slice >= 0 and t.group < 0 for t in fwd)
            if fwd[0].slice >= 0:
                for kind in {t.kind for t in fwd}:
                    assert sorted(t.slice for t in fwd if t.kind == kind) == list(range(slices))
            if layer.kind == "batchnorm" and fwd[0].slice >= 0:    # statistics of every slice
                stats = {t.id for t in fwd if t.kind == "batchnorm_stats"}   # before any output
                assert all(stats <= set(t.deps) for t in fwd if t.kind == "batchnorm_apply")
    # a PIM task of group g waits (directly or not) for the host task that wrote group g
    by_id = {t.id: t for t in s.tasks}
    for t in s.tasks:
        if t.side == "pim" and t.phase == "fwd" and t.group >= 0:
            seen = _ancestors(t, by_id)
            same = [by_id[d] for d in seen if by_id[d].side == "host" and by_id[d].group >= 0
                    and by_id[d].groups == t.groups]
            if same:
                assert any(h.group == t.group for h in same)
    # likewise by batch slice: a task of slice s waits for the host's slice s
    for t in s.tasks:
        if t.side == "pim" and t.phase == "fwd" and t.slice >= 0:
            hosts = [by_id[d] for d in _ancestors(t, by_id) if by_id[d].side == "host"
                     and by_id[d].slice >= 0]
            if hosts:
                assert any(h.slice == t.slice for h in hosts)


@settings(max_examples=6)
@given(model=cnns(), groups=st.sampled_from([2, 4]),
       policy=st.sampled_from(["bank_partition", "authority"]), slices=st.sampled_from([1, 2]))
def test_timed_tasks_respect_dependencies(model, groups, policy, slices):
    g = capture(model, (2, 3, 8, 8))
    serial = time_step(g, "serial")
    run = time_step(g, policy, groups, slices=slices)
    for r in (serial, run):
        assert (r.start >= 0).all() and (r.end >= r.start).all()
        for t in r.schedule.tasks:
            for d in t.deps:
                assert r.start[t.id] >= r.end[d]              # no task starts before its inputs
    # serial: host and PIM take turns, never overlapping
    iv = sorted((int(serial.start[t.id]), int(serial.end[t.id]), t.side)
                for t in serial.schedule.tasks)
    for (s0, e0, a), (s1, e1, b) in zip(iv, iv[1:]):
        if a != b:
            assert s1 >= e0


@settings(max_examples=20)
@given(model=cnns(), groups=st.sampled_from([1, 2, 4]),
       policy=st.sampled_from(["authority", "bank_partition"]), slices=st.sampled_from([1, 2]))
def test_never_both_sides_in_one_channel_at_once(model, groups, policy, slices):
    """The command log of a whole step obeys the policy: under authority the host issues
    nothing while a channel is in PIM mode (and the PIM nothing outside it); under bank
    partitioning each side stays in its own banks. The timing checker reads the log."""
    import io
    from pimrt.memctl import CommandLog, Controller, Options, default_pim_banks
    from pimrt.memctl.checker import check_command_log
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.timing import task_stream
    from pimrt.runtime.work import context
    g = capture(model, (2, 3, 8, 8))
    part = load_part("hbm2_pim")
    ctx = context(g, part, place_step(g, part), policy=policy)
    buf = io.StringIO()
    ctl = Controller(part, Options(policy=policy), cmdlog=CommandLog(buf))
    for recs in task_stream(build_schedule(g, groups, slices=slices), ctx,
                            rule=policy == "authority"):
        ctl.feed(recs)
    ctl.finish()
    banks = sorted(default_pim_banks(part)) if policy == "bank_partition" else None
    assert check_command_log(buf.getvalue(), part, policy=policy, pim_banks=banks) == []
    if policy == "authority":
        assert ctl.stats()["mode_switches"] > 0


@st.composite
def sized_cnns(draw):
    """Small CNNs with the batch and input size they are timed at: tiny ones (8x8, batch 1 or
    2: a feature map in a few rows of one bank) and ones whose maps spread over every channel
    of the part (16x16, batch 4, up to 32 channels)."""
    batch, size = draw(st.sampled_from([(1, 8), (2, 8), (4, 16)]))
    return draw(cnns(channels=(4, 8, 16, 32))), (batch, 3, size, size)


@settings(max_examples=25)
@given(case=sized_cnns(), groups=st.sampled_from([1, 2, 4]), rule=st.booleans(),
       slices=st.sampled_from([1, 2]))
def test_co_executed_makespan_is_at_most_serial_plus_the_switches(case, groups, rule, slices):
    """The pipelined schedule under authority takes at most as long as the same tasks with
    host and PIM taking turns, plus the mode switches times their cost (precharge-all, into
    PIM mode and out); so does the runtime's step (time_step: the group rule and the planned
    weight gradients) against its serial baseline."""
    import dataclasses
    from pimrt.runtime.authority import switch_cost
    from pimrt.runtime.timing import group_rule, slice_rule, step_part, time_schedule
    model, shape = case
    assume(shape[0] % slices == 0)
    g = capture(model, shape)
    part = step_part("hbm2_pim", "v100")
    cost = switch_cost(part)
    s = build_schedule(g, groups, group_count=group_rule(part, "v100", groups) if rule else None,
                       slices=slices, slice_rule=slice_rule(part, slices) if rule else None)
    co = time_schedule(s, g, part, policy="authority", rule=True)
    turns = time_schedule(dataclasses.replace(s, pipelined=False), g, part, policy="serial")
    assert co.stats["mode_switches"] > 0 and turns.stats["mode_switches"] > 0
    assert co.makespan <= turns.makespan + co.stats["mode_switches"] * cost
    if rule:
        step, serial = time_step(g, "authority", groups, slices=slices), time_step(g, "serial")
        assert step.makespan <= serial.makespan + step.stats["mode_switches"] * cost


@settings(max_examples=12)
@given(model=cnns(), groups=st.sampled_from([2, 4]), seed=st.integers(0, 2 ** 16),
       slices=st.sampled_from([1, 2]))
def test_co_executed_numbers_equal_the_serial_numbers(model, groups, seed, slices):
    """One training step with every non-CONV op on the PIM's golden model, by channel groups
    as co-execution runs it, gives bit for bit the numbers of the serial step (one group):
    the loss, every gradient, every updated parameter, the batch norms' running statistics
    (batch norm's statistics per batch slice in both)."""
    import copy
    from torch.nn import functional as F
    from pimrt.runtime.functional import PimOps, _sgd_step_pim, to_pim
    torch.manual_seed(seed)
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,))
    steps = []
    for g in (1, groups):
        ops = PimOps("golden", g, slices=slices)
        gm = to_pim(copy.deepcopy(model).train(), ops)
        loss = F.cross_entropy(gm(x), y)
        loss.backward()
        grads = [p.grad.clone() for p in gm.parameters()]
        _sgd_step_pim(gm, ops.backend, 0.1, 0.9, 5e-4)
        steps.append([loss.detach(), *grads, *(p.detach() for p in gm.parameters()),
                      *gm.buffers()])
    serial, co = steps
    assert len(serial) == len(co)
    for a, b in zip(serial, co):
        assert torch.equal(a, b)


def test_speedup_over_serial_on_a_resnet():
    from pimrt import zoo
    g = capture(zoo.build("resnet18", input_size=32, device="meta"), (8, 3, 32, 32))
    serial = time_step(g, "serial")
    co = time_step(g, "authority")
    assert co.makespan < serial.makespan                      # co-execution pays off
    assert co.busy("host") + co.busy("pim") > co.makespan     # the two sides overlapped


@pytest.mark.parametrize("slices", [1, 2])
def test_functional_step_matches_torch(slices):
    from pimrt.runtime.functional import check_step
    r = check_step("resnet_cifar_20", 2, 32, "golden", groups=2, slices=slices)
    assert r["slices"] == slices and r["loss_abs_diff"] < 1e-5
    assert r["max_grad_rel_diff_same_masks"] < 1e-4          # the documented tolerance
    if r["relu_mask_flips"] == 0:                               # then plain torch agrees too
        assert r["max_grad_rel_diff"] < 1e-4
        assert r["max_param_rel_diff"] < 1e-4
    assert r["groups_equal"]
    t = check_step("resnet_cifar_20", 2, 32, "torch", groups=2)
    assert t["max_grad_rel_diff"] == 0.0


def test_bad_groups_and_too_big_model_fail_before_work():
    from pimrt.runtime import session
    from pimrt.runtime.placement import place_step
    g = capture(small_cnn([8], [False], None), (2, 3, 8, 8))
    with pytest.raises(ConfigError, match="does not divide"):
        build_schedule(g, 3)
    with pytest.raises(ConfigError, match="slices=3 does not divide the batch of 2"):
        build_schedule(g, 2, slices=3)
    from pimrt import zoo
    big = capture(zoo.build("vgg16", device="meta"), (256, 3, 224, 224))
    with pytest.raises(ConfigError, match="do not fit"):
        place_step(big, load_part("hbm2_pim"))
    with pytest.raises(ConfigError, match="batch"):
        session.captured("resnet18", 0, 32)


def test_a_part_without_pim_units_or_a_bad_host_part_fails_before_any_work(tmp_path, capsys):
    from pimrt.cli import main
    out = tmp_path / "r"
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--functional", "none",
                 "--part", "ddr4", "--out", str(out), "--quiet"]) == 2
    assert "has no [pim] table" in capsys.readouterr().err
    assert not out.exists()
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--functional", "none",
                 "--host-part", "nosuch", "--out", str(out), "--quiet"]) == 2
    assert "no host part 'nosuch'" in capsys.readouterr().err
    assert not out.exists()
    g = capture(small_cnn([8], [False], None), (2, 3, 8, 8))
    with pytest.raises(ConfigError, match="HBM2_8Gb_x128 .* has no \\[pim\\] table"):
        time_step(g, "authority", 2, part="hbm2")


def test_layrub_traffic_goes_through_memctl():
    g = capture(small_cnn([8, 8], [False, True], "max"), (2, 3, 16, 16))
    for policy in ("serial", "authority"):
        plain = time_step(g, policy, 2, plan=False)    # Layrub keeps each dW after its dX
        managed = time_step(g, policy, 2, layrub=True)
        assert managed.stats["requests"] > plain.stats["requests"]   # offloads and prefetches
        assert managed.makespan >= plain.makespan * 0.99


def test_host_queue_follows_the_host_parts_outstanding_requests(tmp_path):
    from pimrt.host import load_host_part
    from pimrt.runtime.timing import with_host_buffering
    part = load_part("hbm2_pim")
    v100 = load_host_part("v100")
    deep = with_host_buffering(part, "v100")
    assert deep.controller["host_queue_depth"] == -(-v100.outstanding(part) // part.channel_count)
    assert deep.controller["host_queue_depth"] == 75          # 600 requests over 8 channels
    four = load_part("v100_hbm2_pim")
    assert with_host_buffering(four, "v100").controller["host_queue_depth"] == 66   # 2106 / 32
    assert deep.controller["queue_depth"] == part.controller["queue_depth"]   # the PIM's
    # a part file that sets its own host queue keeps it
    own = load_part("hbm2_pim", {"controller.host_queue_depth": 48})
    assert with_host_buffering(own, "v100").controller["host_queue_depth"] == 48


class _DenseBlock(nn.Module):
    """Two DenseNet layers: BN-ReLU-conv on the concatenation of everything before."""

    def __init__(self, c=8, growth=4):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.l1 = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, growth, 3, padding=1))
        self.l2 = nn.Sequential(nn.BatchNorm2d(c + growth), nn.ReLU(),
                                nn.Conv2d(c + growth, growth, 3, padding=1))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(c + 2 * growth, 10))

    def forward(self, x):
        x0 = self.stem(x)
        x1 = self.l1(x0)
        x2 = self.l2(torch.cat([x0, x1], 1))
        return self.head(torch.cat([x0, x1, x2], 1))


def _depthwise_net():
    return nn.Sequential(nn.Conv2d(3, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
                         nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8),
                         nn.ReLU6(), nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))


def test_concat_parts_and_depthwise_groups_wait_only_for_their_own_inputs():
    g = capture(_DenseBlock(), (2, 3, 8, 8))
    s = build_schedule(g, 4)
    by_id = {t.id: t for t in s.tasks}
    cat = [t for t in s.tasks if t.kind == "concat"]
    assert [t.part for t in cat] == [0, 1, 0, 1, 2]            # one copy task per part
    for t in cat:                                               # each waits for its producer only
        assert len({by_id[d].layer for d in t.deps}) == 1
    first = [t for t in cat if t.part == 0][0]
    assert by_id[first.deps[0]].layer == "stem"
    bn = [t for t in s.tasks if t.layer == "l2_0" and t.phase == "fwd"]
    assert [t.span for t in bn] == [(0.0, 8 / 12), (8 / 12, 1.0)]
    assert sum(t.numel for t in bn) == g["l2_0"].numel
    assert all(by_id[t.deps[0]].kind == "concat" and by_id[t.deps[0]].part == t.part for t in bn)

    g = capture(_depthwise_net(), (2, 3, 8, 8))
    s = build_schedule(g, 4, group_count=lambda layer: 4 if layer.name == "_3" else 1)
    by_id = {t.id: t for t in s.tasks}
    dw = [t for t in s.tasks if t.layer == "_3" and t.phase == "fwd"]
    assert [t.group for t in dw] == [0, 1, 2, 3]
    for t in dw:                                                # group g after ReLU6 group g
        assert all(by_id[d].group in (t.group, -1) for d in t.deps)
    dx = [t for t in s.tasks if t.layer == "_3" and t.phase == "bwd_data"]
    assert [t.group for t in dx] == [0, 1, 2, 3]
    for model in (_DenseBlock(), _depthwise_net()):             # timed: inputs before consumers
        gr = capture(model, (2, 3, 8, 8))
        r = time_step(gr, "authority", 4)
        for t in r.schedule.tasks:
            assert all(r.start[t.id] >= r.end[d] for d in t.deps)


def test_authority_rule_gives_memory_bound_layers_long_epochs():
    from pimrt.runtime.authority import layer_parameters, switch_cost
    from pimrt.runtime.timing import with_host_buffering
    part = with_host_buffering(load_part("hbm2_pim"), "v100")
    q, cost = part.controller["host_queue_depth"], switch_cost(part)
    chans = part.channel_count
    # compute-bound: 0.05 requests per cycle and channel -> the PIM may hold the channel until
    # the host's queue would fill (q / r cycles, at most 4000); the host returns after r x cost
    p = layer_parameters(part, int(0.05 * chans * 100_000), 100_000)
    assert p["epoch_cap"] == min(4000, int(q / 0.05))
    assert p["host_high_watermark"] == max(1, round(0.05 * cost))
    assert p["min_epoch"] == 2 * cost
    # memory-bound: a request every burst on every channel -> long epochs, few switches
    p = layer_parameters(part, chans * 100_000, 100_000 * part.burst_cycles // 2)
    assert p == {"epoch_cap": 4000, "host_high_watermark": q // 2, "min_epoch": 8 * cost}


def test_contention_free_bound_lies_between_the_busiest_side_and_their_sum():
    from pimrt.runtime.timing import contention_free_bound
    g = capture(small_cnn([8, 16], [True, False], "max"), (2, 3, 8, 8))
    b = contention_free_bound(g, 2, part="hbm2_pim")
    assert max(b["host_busy_cycles"], b["pim_busy_cycles"]) <= b["makespan_cycles"]
    assert b["makespan_cycles"] <= b["host_busy_cycles"] + b["pim_busy_cycles"]
    assert b["step_ms"] == b["makespan_cycles"] * 1e-6      # hbm2_pim: tCK 1 ns
    assert b["lower_bound_step_ms"] == max(b["host_busy_cycles"], b["pim_busy_cycles"]) * 1e-6


def test_pim_tasks_move_each_tensor_once():
    """A residual add reads two output-sized streams and writes one (not streams the size of
    both inputs together); a pool's task counts its input elements."""
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.work import context, pim_records
    from pimrt.trace.records import READ, WRITE
    g = capture(small_cnn([8, 8], [False, True], "max"), (2, 3, 8, 8))
    part = load_part("hbm2_pim")
    ctx = context(g, part, place_step(g, part))
    s = build_schedule(g, 2)
    adds = [t for t in s.tasks if t.kind == "add" and t.phase == "fwd"]
    assert adds and sum(t.numel for t in adds) == g[adds[0].layer].numel
    from pimrt.pim.access import bank_accesses
    from pimrt.runtime.work import bank_work
    for t in adds:
        r = pim_records(t, ctx)
        work = bank_work("residual_add", t, ctx)
        # one bank's share: the output's elements over every bank, each column once
        banks = part.channel_count * ctx.pim_scope
        assert work == {"elements": -(-t.numel // banks)}
        acc = bank_accesses("residual_add", lanes=8, column_bytes=64, **work)
        cols = -(-work["elements"] // 16)                  # 16 fp32 a 64-byte column
        for i in range(3):                                 # a, b read, y written, once each
            assert sorted(acc["column"][acc["stream"] == i]) == list(range(
                len(acc["column"][acc["stream"] == i])))
            assert len(acc["column"][acc["stream"] == i]) >= cols
        assert (r["op"] == READ).sum() == 2 * (r["op"] == WRITE).sum() \
            == 2 * part.channel_count * (acc["rw"] == 1).sum()
        writes = r["addr"][r["op"] == WRITE]
        assert len(np.unique(writes)) == len(writes)
    pools = [t for t in s.tasks if t.kind == "maxpool" and t.phase == "fwd"]
    assert pools and sum(t.numel for t in pools) == 4 * g[pools[0].layer].numel


def test_host_streaming_tasks_of_a_channel_group_move_only_its_share():
    """A pool on the host (adaptive average pooling) after a split CONV runs group by group;
    each group's task reads its share of the input and writes its share of the output, at
    that share's addresses (not the whole tensors once per group)."""
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.work import context, host_records
    from pimrt.trace.records import READ, WRITE
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(8, 4))
    g = capture(net, (2, 3, 8, 8))
    part = load_part("hbm2_pim")
    pl = place_step(g, part)
    ctx = context(g, part, pl)
    pools = [t for t in build_schedule(g, 2).tasks if t.kind == "adaptive_avgpool"
             and t.phase == "fwd"]
    assert [(t.side, t.group) for t in pools] == [("host", 0), ("host", 1)]
    layer = g[pools[0].layer]
    x, y = pl[f"act:{layer.inputs[0]}"], pl[f"act:{layer.name}"]
    for t in pools:
        r = host_records(t, ctx)
        reads, writes = r["addr"][r["op"] == READ], r["addr"][r["op"] == WRITE]
        assert len(reads) == -(-(x.nbytes // 2) // 64) and len(writes) == -(-(y.nbytes // 2) // 64)
        assert reads.min() == x.base + t.group * (x.nbytes // 2)
        assert writes.min() == y.base + t.group * (y.nbytes // 2)


def test_a_sliced_conv_and_the_pim_after_it_move_only_their_slice():
    """A CONV run by batch slices writes only its slice of the output (and its slice alone
    of the input is read besides the weights); the PIM's ReLU on slice s streams that
    slice's rows."""
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.work import context, host_records, pim_records
    from pimrt.trace.records import READ, WRITE
    net = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Flatten(),
                        nn.Linear(64 * 32 * 32, 4))
    g = capture(net, (4, 3, 32, 32))
    part = load_part("hbm2_pim")
    pl = place_step(g, part)
    ctx = context(g, part, pl)
    s = build_schedule(g, 1, slices=4)
    convs = [t for t in s.tasks if t.kind == "conv" and t.phase == "fwd"]
    assert [t.slice for t in convs] == [0, 1, 2, 3]
    layer = g[convs[0].layer]
    x, y, w = pl[f"act:{layer.inputs[0]}"], pl[f"act:{layer.name}"], pl[f"param:{layer.name}"]
    for t in convs:
        r = host_records(t, ctx)
        writes = r["addr"][r["op"] == WRITE]
        share = y.nbytes // 4
        assert writes.min() >= y.base + t.slice * share
        assert writes.max() < y.base + (t.slice + 1) * share
        reads = r["addr"][r["op"] == READ]
        inp = reads[(reads >= x.base) & (reads < x.base + x.nbytes)]
        assert inp.min() >= x.base + t.slice * (x.nbytes // 4)
        assert inp.max() < x.base + (t.slice + 1) * (x.nbytes // 4)
        assert ((reads >= w.base) & (reads < w.base + w.nbytes)).any()    # weights, each slice
    relus = [t for t in s.tasks if t.kind == "relu" and t.phase == "fwd"]
    assert [t.slice for t in relus] == [0, 1, 2, 3]
    a, b = (pim_records(t, ctx) for t in relus[:2])
    assert len(a) == len(b) and 3 * len(a) < len(pim_records(
        dataclasses.replace(relus[0], slice=-1, slices=1, numel=relus[0].numel * 4), ctx))
    # slice 1's commands come right after slice 0's in every bank: disjoint columns
    assert not set(a["addr"][a["op"] == WRITE].tolist()) & set(b["addr"][b["op"] == WRITE].tolist())


def test_first_convs_weight_gradient_runs_by_group():
    """The first CONV has no dX, so the PIM has no layer below to run during its dW: its dW
    runs by output-channel group, group g right after the batch norm backward of group g; the
    other CONVs keep one dW task (the PIM works on the layers below meanwhile)."""
    g = capture(small_cnn([8, 8], [False, False], None), (2, 3, 8, 8))
    s = build_schedule(g, 4)
    by_id = {t.id: t for t in s.tasks}
    first = g.layers_of_kind("conv")[0].name
    mine = [t for t in s.tasks if t.layer == first and t.phase.startswith("bwd")]
    assert [(t.phase, t.group) for t in mine] == [("bwd_weight", k) for k in range(4)]
    for t in mine:
        (d,) = t.deps
        assert (by_id[d].side, by_id[d].kind, by_id[d].group) == ("pim", "batchnorm", t.group)
    (upd,) = [t for t in s.tasks if t.layer == first and t.kind == "update"]
    assert sorted(upd.deps) == [t.id for t in mine]
    for conv in g.layers_of_kind("conv")[1:]:
        dw = [t for t in s.tasks if t.layer == conv.name and t.phase == "bwd_weight"]
        assert [t.group for t in dw] == [-1]


def test_group_rule_gives_each_conv_the_groups_its_intensity_covers():
    """A CONV gets the largest divisor g of the group count with intensity >= g x the ridge
    point; between the ridge and twice it, a CONV whose input is small beside its output (the
    ImageNet stem: 3 channels in, 64 out) gets 2; memory-bound CONVs run whole."""
    from pimrt.runtime import session
    from pimrt.runtime.timing import group_rule
    g = session.captured("resnet18", 2, 224)
    names = ["conv1", "layer1_0_conv1", "layer2_1_conv1", "layer2_0_downsample_0"]
    # intensity / ridge (v100: 0.899 of 15.7 TFLOP/s over one stack's 224 GB/s): 1.09, 2.49
    # (3x3 64 -> 64), 3.82 (3x3 128 -> 128), 0.19 (1x1 stride 2)
    for groups, want in [(4, [2, 2, 2, 1]), (2, [2, 2, 2, 1]), (6, [2, 2, 3, 1]),
                         (8, [1, 2, 2, 1])]:     # 8: the stem's input, read 7 more times,
        rule = group_rule(load_part("hbm2_pim"), "v100", groups)   # is not small beside
        assert [rule(g[n]) for n in names] == want, groups        # its output
    # a host with a lower efficiency has a lower ridge point: 3x3 128 -> 128 gets 4 of 4
    slow = load_host_part("v100", {"compute": {"efficiency": 0.7}})
    assert group_rule(load_part("hbm2_pim"), slow, 4)(g["layer2_1_conv1"]) == 4
    s = build_schedule(g, 4, group_count=group_rule(load_part("hbm2_pim"), "v100", 4))
    for n, k in zip(names, [2, 2, 2, 1]):
        fwd = [t for t in s.tasks if t.layer == n and t.phase == "fwd"]
        assert [t.group for t in fwd] == (list(range(k)) if k > 1 else [-1])
        assert all(t.groups == k for t in fwd)


def test_residual_add_of_a_grouped_branch_and_a_whole_shortcut_runs_by_group():
    """A ResNet block whose shortcut comes whole (an unsplit stem's ReLU) and whose branch
    comes in groups: the add, the ReLU after it and the next CONV's inputs go group by group,
    the add's group g waiting for the branch's group g and the whole shortcut."""
    g = capture(small_cnn([8, 8], [True, True], None), (2, 3, 8, 8))
    stem = g.layers_of_kind("conv")[0].name
    s = build_schedule(g, 4, group_count=lambda layer: 1 if layer.name == stem else 4)
    by_id = {t.id: t for t in s.tasks}
    add = [t for t in s.tasks if t.kind == "add" and t.phase == "fwd"]
    first = [t for t in add if t.layer == add[0].layer]
    assert [t.group for t in first] == [0, 1, 2, 3]
    for t in first:
        deps = [by_id[d] for d in t.deps]
        assert sorted(d.group for d in deps) == [-1, t.group]   # the whole shortcut, group g
        assert {d.kind for d in deps} == {"relu", "batchnorm"}
    relu = [t for t in s.tasks if t.kind == "relu" and t.phase == "fwd"
            and any(by_id[d].kind == "add" for d in t.deps)]
    assert [t.group for t in relu[:4]] == [0, 1, 2, 3]
    assert all(by_id[d].group == t.group for t in relu[:4] for d in t.deps)


@pytest.mark.parametrize("exchange,kind", [("sgd", "update"), ("gradsa", "fold")])
def test_update_waits_update_lag_convs_in_the_pims_order(exchange, kind):
    """A CONV's update (GradSA: its fold) comes in the PIM's stream after the backward work
    (batch norm, ReLU) that the host's dX UPDATE_LAG + 1 CONVs further down waits for, and
    before that of the dX one CONV later: the PIM's idle time during the next dX tasks is
    where it goes, not ahead of work on the host's path."""
    from pimrt.runtime.schedule import UPDATE_LAG
    n = UPDATE_LAG + 4
    model = nn.Sequential(*[m for cin in (3,) + (8,) * (n - 1) for m in
                            (nn.Conv2d(cin, 8, 3, padding=1, bias=False),
                             nn.BatchNorm2d(8), nn.ReLU())],
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    g = capture(model, (2, 3, 8, 8))
    s = build_schedule(g, 2, exchange=exchange)
    pos = {t.id: i for i, t in enumerate(s.tasks)}
    by_id = {t.id: t for t in s.tasks}
    dx = [t for t in s.tasks if t.phase == "bwd_data" and t.kind == "conv"]
    updates = {t.layer: t for t in s.tasks if t.kind == kind}
    assert len(updates) == n + n + 1                        # CONVs, batch norms, the linear
    assert len(dx) == n - 1                                 # the first CONV has no dX
    lag = UPDATE_LAG + 1
    for a, b, c in zip(dx, dx[lag:], dx[lag + 1:]):
        u = pos[updates[a.layer].id]
        # the update of a's CONV follows every PIM task b waits for, and precedes those of c
        waited = [by_id[d] for d in b.deps if by_id[d].side == "pim"]
        assert waited and all(u > pos[w.id] for w in waited)
        later = [by_id[d] for d in c.deps if by_id[d].side == "pim"]
        assert later and all(u < pos[w.id] for w in later)
    if exchange == "sgd":                                   # no task waits for an update
        assert not any(u.id in t.deps for u in updates.values() for t in s.tasks)


def test_projection_shortcut_runs_after_the_branchs_first_conv():
    """A block's projection shortcut (a CONV reading the block's input, like its first CONV)
    comes in the host's order right after the branch's first CONV, its batch norm in the
    PIM's order before the branch's second batch norm; in backward its dX and dW come
    between the branch's second and first CONVs. The serial baseline keeps the same order."""
    g = capture(small_cnn([8, 16], [False, False], None, project=True), (2, 3, 8, 8))
    prefix = next(n.name for n in g.nodes if n.name.endswith("shortcut_0"))[:-len("shortcut_0")]
    block = [n.name for n in g.nodes if n.name.startswith(prefix)]
    conv1, conv2, short = (next(b for b in block if b.endswith(k))
                           for k in ("conv1", "conv2", "shortcut_0"))
    bn2, short_bn = (next(b for b in block if b.endswith(k)) for k in ("bn2", "shortcut_1"))
    for pipelined in (True, False):
        s = build_schedule(g, 2, pipelined=pipelined)
        host = [(t.layer, t.phase) for t in s.tasks if t.side == "host"]
        fwd = [layer for layer, phase in host if phase == "fwd" and layer in block]
        assert [k for k, _ in itertools.groupby(fwd)] == [conv1, short, conv2]
        pim = [t.layer for t in s.tasks if t.side == "pim" and t.phase == "fwd"]
        assert pim.index(short_bn) < pim.index(bn2)
        dx = [layer for layer, phase in host if phase == "bwd_data" and layer in block]
        assert dx == [conv2, short, conv1]
        keys = [(t.layer, t.kind, t.phase, t.group) for t in s.tasks]
        assert len(keys) == len(set(keys))
        pos = {t.id: i for i, t in enumerate(s.tasks)}
        assert all(pos[d] < pos[t.id] for t in s.tasks for d in t.deps)


def test_concat_gradient_runs_part_by_part_newest_first():
    """Backward of batch norm and ReLU on a concatenation: one task per part, the newest part
    first in the PIM's order, each waiting only for its own part; the CONV that produced the
    newest part computes its dX without waiting for the older parts."""
    g = capture(_DenseBlock(), (2, 3, 8, 8))
    s = build_schedule(g, 4)
    by_id = {t.id: t for t in s.tasks}
    pos = {t.id: i for i, t in enumerate(s.tasks)}
    relu = [t for t in s.tasks if t.layer == "l2_1" and t.phase == "bwd"]
    bn = [t for t in s.tasks if t.layer == "l2_0" and t.phase == "bwd"]
    for tasks in (relu, bn):
        assert [t.part for t in tasks] == [1, 0]                # the newest part first
        assert [t.span for t in tasks] == [(8 / 12, 1.0), (0.0, 8 / 12)]
        assert sum(t.numel for t in tasks) == g["l2_0"].numel
    for b in bn:                                                # part k after ReLU part k only
        assert [by_id[d] for d in b.deps] == [r for r in relu if r.part == b.part]
    assert pos[relu[0].id] < pos[bn[0].id] < pos[relu[1].id] < pos[bn[1].id]   # chain by part
    dx = [t for t in s.tasks if t.layer == "l1_2" and t.phase == "bwd_data"][0]
    seen = _ancestors(dx, by_id)
    assert bn[0].id in seen and bn[1].id not in seen          # not the older part
    r = time_step(g, "authority", 4)
    for t in r.schedule.tasks:
        assert all(r.start[t.id] >= r.end[d] for d in t.deps)


@settings(max_examples=30, deadline=None)
@given(n=st.sampled_from([2, 4, 8]), c=st.integers(1, 5), hw=st.integers(1, 4),
       shift=st.sampled_from([0.0, 3.0, 30.0]), seed=st.integers(0, 2 ** 16),
       slices=st.sampled_from([2, 4]))
def test_batch_norm_statistics_by_slices_agree_with_the_whole_batch(n, c, hw, shift, seed,
                                                                    slices):
    """Batch norm's statistics taken per batch slice and combined on the host give the whole
    batch's mean and variance to within fp32 rounding (against float64), and one slice is
    the whole-batch computation bit for bit."""
    from pimrt.pim.golden import GoldenBackend
    from pimrt.pim.kernels import batchnorm_forward_2pass
    assume(n % slices == 0)
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, c, hw, hw)) * 2 + shift).astype(np.float32)
    gamma, beta = np.ones(c, np.float32), np.zeros(c, np.float32)
    b = GoldenBackend()
    y1, m1, i1 = batchnorm_forward_2pass(b, x, gamma, beta)
    ys, ms, is_ = batchnorm_forward_2pass(b, x, gamma, beta, slices=slices)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=(0, 2, 3))
    inv = 1 / np.sqrt(x64.var(axis=(0, 2, 3)) + 1e-5)
    for m, i in ((m1, i1), (ms, is_)):
        assert np.allclose(m, mean, rtol=1e-6, atol=1e-6 * (abs(shift) + 1))
        assert np.allclose(i, inv, rtol=1e-4)
    assert np.abs(ys - y1).max() <= 1e-4 * (np.abs(y1).max() + 1)


@pytest.mark.slow      # two MobileNetV2 steps on the golden model and a float64 one: ~50 s CPU
def test_functional_step_runs_relu6_on_the_pim_and_matches_torch(monkeypatch):
    """MobileNetV2 (ReLU6, dropout, linear bottlenecks): ReLU6 runs on the PIM's relu6
    programs, dropout draws the same masks in every step, and the gradients that cancel to
    rounding noise (a projection batch norm's bias) are judged against float64; a ReLU6 that
    ran as a ReLU on the PIM must fail it."""
    from pimrt.pim import kernels
    from pimrt.runtime import functional
    ran = []
    fwd = kernels.relu6_forward
    monkeypatch.setattr(functional, "_RELUS", {**functional._RELUS, "relu6": (
        lambda b, x, dt: ran.append(1) or fwd(b, x, dt), *functional._RELUS["relu6"][1:])})
    r = functional.check_step("mobilenetv2", 4, 32, "golden", groups=1, slices=2)
    assert ran and r["loss_abs_diff"] < 1e-5 and r["grads_within_tolerance"]
    assert all(j["pim_vs_float64"] <= 1e-4 + functional.NOISE_FACTOR * j["torch_vs_float64"]
               for j in r["judged_by_float64"].values())
    assert r["relu_mask_hard_flips"] == 0
    # a ReLU6 run as a ReLU on the unit: its decisions replayed in torch would hide it, but
    # they differ from torch's far from any threshold (at init few activations pass 6, so the
    # unit's ReLU is also given a gradient it must not pass: every element's)
    monkeypatch.setattr(functional, "_RELUS", {**functional._RELUS, "relu6": (
        kernels.relu_forward, lambda b, y, dy, dt: dy,
        lambda y, mask: np.ones(y.shape, np.int8))})
    bad = functional.check_step("mobilenetv2", 4, 32, "golden", groups=1, slices=2)
    assert bad["relu_mask_hard_flips"] > 0 and not bad["grads_within_tolerance"]
