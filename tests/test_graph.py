"""pimrt.graph: capture of zoo and hand-written models, shapes vs a real forward, FLOPs,
liveness properties (hypothesis over random small models), unsupported ops, validate_split."""
import json
import operator
import time
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, strategies as st
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from pimrt import zoo
from pimrt.errors import ConfigError, PimrtError
from pimrt.graph import (BACKWARD_RULES, KINDS, PIM_KINDS, GraphError, LayerGraph, SplitError,
                         UnsupportedOpError, UnsupportedOpWarning, capture, valid_group_counts,
                         validate_split)
from pimrt.graph.layer import runs_on_pim

MAIN = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg16_bn",
        "densenet121", "mobilenetv2", "wide_resnet"]

_CACHE: dict = {}


def graph_of(name, size=224, batch=1):
    key = (name, size, batch)
    if key not in _CACHE:
        _CACHE[key] = capture(zoo.build(name, input_size=size, device="meta"),
                              (batch, 3, size, size))
    return _CACHE[key]


def real_shapes(model, x):
    """fx node name -> output shape from a real CPU forward (ShapeProp on real tensors)."""
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        ShapeProp(gm).propagate(x)
    return {n.name: tuple(n.meta["tensor_meta"].shape) for n in gm.graph.nodes
            if isinstance(n.meta.get("tensor_meta"), tuple) and hasattr(n.meta["tensor_meta"],
                                                                         "shape")}


def check_graph_invariants(g: LayerGraph):
    names = [n.name for n in g.nodes]
    assert len(set(names)) == len(names)
    assert g.nodes[0].kind == "input" and g.nodes[-1].kind == "output"
    pos = {n.name: i for i, n in enumerate(g.nodes)}
    for i, n in enumerate(g.nodes):
        assert n.index == i
        assert n.kind in KINDS
        assert n.on_pim == (n.kind in PIM_KINDS and runs_on_pim(n, "fwd"))
        for src in n.inputs:
            assert pos[src] < i, (src, n.name)
            assert n.name in g.node(src).consumers
        for c in n.consumers:
            assert pos[c] > i
            assert n.name in g.node(c).inputs
    json.dumps(g.to_dict())


# ------------------------------------------------------------------------------------------
# Zoo capture

@pytest.mark.parametrize("name", MAIN)
@pytest.mark.parametrize("size", [32, 224])
def test_capture_zoo(name, size):
    g = graph_of(name, size)
    check_graph_invariants(g)
    model = zoo.build(name, input_size=size, device="meta")
    assert g.param_count() == zoo.count_params(model)
    assert g.param_bytes() == 4 * zoo.count_params(model)
    assert g.nodes[-1].shape == (1, 10 if size == 32 else 1000)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(g.layers_of_kind("conv")) == len(convs)
    assert not g.layers_of_kind("host_fallback")


def test_resnet50_counts_and_flops():
    g = graph_of("resnet50")
    c = g.kind_counts()
    assert c["conv"] == 53 and c["batchnorm"] == 53 and c["add"] == 16
    assert c["linear"] == 1 and c["maxpool"] == 1 and c["adaptive_avgpool"] == 1
    assert c["relu"] == 49 and c["flatten"] == 1
    downsample = [n for n in g.layers_of_kind("conv") if "downsample" in n.module_path]
    assert len(downsample) == 4
    # ~4.1 GMACs -> 8.2 GFLOPs forward per image.
    assert g.total_flops() == pytest.approx(8.2e9, rel=0.02)
    assert g.total_flops("training") == g.total_flops() + g.total_flops("backward")
    # First conv needs no dX.
    assert g.node("conv1").attrs["needs_input_grad"] is False
    assert g.node("conv1").backward_flops == g.node("conv1").flops


def test_conv_attrs_and_flops():
    g = graph_of("resnet50")
    conv1 = g.node("conv1")
    a = conv1.attrs
    assert (a["in_channels"], a["out_channels"], a["kernel"], a["stride"], a["padding"],
            a["groups"], a["dilation"]) == (3, 64, (7, 7), (2, 2), (3, 3), 1, (1, 1))
    assert conv1.shape == (1, 64, 112, 112) and conv1.input_shapes == [(1, 3, 224, 224)]
    assert conv1.flops == 2 * 64 * 112 * 112 * 3 * 49
    assert conv1.params == {"conv1.weight": (64, 3, 7, 7)}
    assert conv1.param_bytes == 64 * 3 * 49 * 4
    assert conv1.placement == "host" and not conv1.on_pim
    bn = g.node("bn1")
    assert bn.on_pim and bn.attrs["num_features"] == 64 and bn.attrs["eps"] == 1e-5
    assert set(bn.buffers) == {"bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"}
    assert g.node("maxpool").attrs["kernel"] == (3, 3)
    assert g.node("maxpool").placement == "host"          # the PIM pools 2x2 windows only
    fc = g.node("fc")
    assert fc.flops == 2 * 2048 * 1000 and fc.attrs["out_features"] == 1000
    mb = graph_of("mobilenetv2")
    dw = [n for n in mb.layers_of_kind("conv") if n.attrs["groups"] > 1]
    assert dw and all(n.attrs["groups"] == n.attrs["in_channels"] for n in dw)
    assert len(mb.layers_of_kind("relu6")) == 35


def test_densenet_concats():
    g = graph_of("densenet121")
    assert len(g.layers_of_kind("concat")) == 58
    assert len(g.layers_of_kind("conv")) == 120 and len(g.layers_of_kind("avgpool")) == 3
    cat = g.layers_of_kind("concat")[0]
    assert cat.attrs["dim"] == 1 and cat.placement == "layout" and not cat.on_pim
    assert cat.shape == (1, 96, 56, 56)
    last = g.layers_of_kind("concat")[-1]
    assert last.shape == (1, 1024, 7, 7)


def test_batch_scales_shapes_and_flops():
    g1 = graph_of("resnet18", 32, 1)
    g8 = capture(zoo.build("resnet18", input_size=32, device="meta"), (8, 3, 32, 32))
    assert g8.total_flops() == 8 * g1.total_flops()
    assert g8.activation_bytes() == 8 * g1.activation_bytes()
    assert g8.param_bytes() == g1.param_bytes()
    assert g8.batch == 8


def test_resnet152_batch32_captures_fast():
    model = zoo.build("resnet152", device="meta")
    t = time.perf_counter()
    g = capture(model, (32, 3, 224, 224))
    elapsed = time.perf_counter() - t
    assert elapsed < 20, elapsed
    assert len(g.layers_of_kind("conv")) == 155
    assert g.node("conv1").shape == (32, 64, 112, 112)


def test_capture_does_not_touch_model():
    torch.manual_seed(0)
    model = zoo.build("resnet18", input_size=32)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    capture(model, (4, 3, 32, 32))
    assert model.training
    after = model.state_dict()
    assert all(after[k].device.type == "cpu" and torch.equal(after[k], v)
               for k, v in before.items())


def test_resnet_cifar_110_capture():
    g = capture(zoo.build("resnet110", device="meta"), (2, 3, 32, 32))
    assert len(g.layers_of_kind("conv")) == 109 + 2
    assert len(g.layers_of_kind("add")) == 54
    assert g.param_count() == 1_730_714


@pytest.mark.slow
def test_resnet_cifar_1202_capture():
    g = capture(zoo.build("resnet1202", device="meta"), (128, 3, 32, 32))
    assert len(g.layers_of_kind("conv")) == 1201 + 2
    assert len(g.layers_of_kind("add")) == 600
    assert len(g) > 4000
    lives = g.liveness()
    assert all(l.producer <= l.last_forward_reader for l in lives.values())


# ------------------------------------------------------------------------------------------
# Shapes equal a real forward

class _MobileBlocks(nn.Module):
    """Stem + two inverted residuals (one with the residual add) + head, from pimrt.zoo."""

    def __init__(self):
        super().__init__()
        from pimrt.zoo.mobilenet import ConvBNReLU6, InvertedResidual
        self.features = nn.Sequential(ConvBNReLU6(3, 8, stride=2), InvertedResidual(8, 8, 1, 6),
                                      InvertedResidual(8, 16, 2, 6))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), (1, 1)), 1))


SMALL_VARIANTS = {   # same code paths as the zoo models, a fraction of the compute
    "resnet_cifar_20": lambda: zoo.build("resnet_cifar_20"),
    "resnet18_224": lambda: zoo.ResNet(zoo.BasicBlock, [1, 1, 1, 1], widths=(8, 16, 16, 16)),
    "mobilenetv2_blocks": lambda: _MobileBlocks(),
    "densenet": lambda: zoo.DenseNet(8, (2, 2, 2, 2), 16, num_classes=10, stem="cifar"),
    "wrn": lambda: zoo.wrn(10, 2, 10),
    "vgg": lambda: zoo.vgg16_bn(10, classifier="cifar", input_size=32),
}


@pytest.mark.parametrize("name", list(SMALL_VARIANTS))
def test_shapes_equal_real_forward(name):
    torch.manual_seed(0)
    model = SMALL_VARIANTS[name]().eval()
    size = 64 if name.endswith("_224") else 32
    x = torch.randn(1, 3, size, size)
    g = capture(model, tuple(x.shape))
    real = real_shapes(model, x)
    compared = 0
    for n in g.nodes:
        if n.kind == "output":
            continue
        assert real[n.name] == n.shape, n.name
        compared += 1
    assert compared == len(g) - 1
    with torch.no_grad():
        assert tuple(model(x).shape) == g.nodes[-1].shape


class FunctionalNet(nn.Module):
    """Uses the functional / method spellings of every supported op."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.conv3 = nn.Conv2d(16, 16, 1)
        self.skip = nn.Identity()
        self.fc = nn.Linear(16 * 4 * 4, 12)
        self.fc2 = nn.Linear(12, 5)
        self.fc3 = nn.Linear(16, 5)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.conv2(x))
        y = torch.add(y, self.skip(x))
        y = operator.add(y, x)
        y = y.relu_()
        y += x
        z = torch.cat([x, y], dim=1)
        z = torch.clamp(self.conv3(z), 0, 6)
        z = F.max_pool2d(z, 2)
        z = F.avg_pool2d(z, kernel_size=2, stride=2)
        z = F.relu6(z)
        h = z.contiguous().view(z.size(0), -1)
        h = self.drop(self.fc(h))
        g = z.mean([2, 3])
        h = h.reshape(h.shape[0], -1) + torch.flatten(h, 1)
        return self.fc2(h) + self.fc3(F.dropout(torch.clamp(g, min=0), 0.1))


def test_functional_spellings():
    model = FunctionalNet()
    x = torch.randn(2, 3, 16, 16)
    g = capture(model, (2, 3, 16, 16))
    c = g.kind_counts()
    assert c["conv"] == 3 and c["linear"] == 3 and c["batchnorm"] == 1
    assert c["relu"] == 4 and c["relu6"] == 2 and c["add"] == 5 and c["concat"] == 1
    assert c["maxpool"] == 1 and c["avgpool"] == 1 and c["flatten"] == 2
    assert c["dropout"] == 2 and c["adaptive_avgpool"] == 1
    # No layers for the Identity, .contiguous(), .size() and the no-op reshape.
    assert not {"skip", "contiguous", "size", "reshape"} & {n.name for n in g.nodes}
    real = real_shapes(model, x)
    for n in g.nodes[:-1]:
        assert real[n.name] == n.shape, n.name
    view = [n for n in g.layers_of_kind("flatten") if n.attrs.get("from") == "view"][0]
    assert view.view_of is not None and view.attrs["start_dim"] == 1
    check_graph_invariants(g)


class MeanPoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.conv(x).mean(dim=(2, 3)))


def test_mean_is_global_pool():
    g = capture(MeanPoolNet(), (3, 3, 10, 10))
    pool = g.layers_of_kind("adaptive_avgpool")
    # the PIM has no program for a global mean: it runs on the host, and the graph says so
    assert len(pool) == 1 and pool[0].shape == (3, 4) and pool[0].placement == "host"
    assert g.node("fc").inputs == [pool[0].name]


def test_shared_module_params_counted_once():
    class Shared(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(self.conv(x))

    g = capture(Shared(), (1, 4, 8, 8))
    assert len(g.layers_of_kind("conv")) == 2
    assert g.param_count() == 4 * 4 * 9 + 4
    assert g.param_info()["conv.weight"]["layers"] == ["conv", "conv_1"]


# ------------------------------------------------------------------------------------------
# Liveness

def test_liveness_rules_resnet18():
    g = graph_of("resnet18", 32)
    lives = g.liveness()
    assert list(lives) == [n.name for n in g.nodes[:-1]]
    conv1, bn1, relu = g.node("conv1"), g.node("bn1"), g.node("relu")
    # conv1's output is read by bn1 forward and by bn1's backward (BN reads its input).
    assert lives["conv1"].readers == [bn1.index]
    assert lives["conv1"].backward_full == [bn1.index]
    # The input batch is kept for conv1's dW.
    assert lives["x"].backward_full == [conv1.index]
    # bn1's output is only read by relu forward; relu's backward reads a mask of relu's output.
    assert lives["bn1"].backward_full == [] and lives["bn1"].backward_mask == []
    assert relu.index in lives["relu"].backward_mask
    # relu's output feeds layer1.0.conv1 (dW needs it) and the residual add.
    assert g.node("layer1_0_conv1").index in lives["relu"].backward_full
    add = g.layers_of_kind("add")[0]
    assert add.index in lives["relu"].readers
    assert lives["relu"].last_forward_reader == add.index
    assert lives["relu"].last_backward_reader == relu.index
    # Extra state.
    assert bn1.extra_saved_bytes == 2 * 64 * 4
    assert g.node("fc").grad_inplace is False and relu.grad_inplace and add.grad_inplace
    flat = g.layers_of_kind("flatten")[0]
    assert lives[flat.name].view_of == g.layers_of_kind("adaptive_avgpool")[0].name
    assert BACKWARD_RULES["maxpool"].extra == "indices"
    mp = graph_of("resnet18", 224).node("maxpool")
    assert mp.extra_saved_bytes == mp.numel


@st.composite
def small_models(draw):
    """A random CNN of supported layers: conv/bn/relu/relu6/pool stages, residual blocks,
    dense (concat) blocks, then global pool + flatten + linear."""
    blocks = []
    c = draw(st.sampled_from([3, 4]))
    size = 16
    in_c = c
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["conv", "bn", "relu", "relu6", "maxpool", "avgpool",
                                     "res", "dense", "dropout"]))
        if kind == "conv":
            out = draw(st.sampled_from([4, 6, 8]))
            stride = draw(st.sampled_from([1, 2])) if size >= 4 else 1
            k = draw(st.sampled_from([1, 3]))
            blocks.append(nn.Conv2d(c, out, k, stride=stride, padding=k // 2,
                                    bias=draw(st.booleans())))
            c, size = out, (size + stride - 1) // stride
        elif kind == "bn":
            blocks.append(nn.BatchNorm2d(c))
        elif kind == "relu":
            blocks.append(nn.ReLU(inplace=draw(st.booleans())))
        elif kind == "relu6":
            blocks.append(nn.ReLU6())
        elif kind in ("maxpool", "avgpool") and size >= 2:
            blocks.append(nn.MaxPool2d(2) if kind == "maxpool" else nn.AvgPool2d(2))
            size //= 2
        elif kind == "res":
            blocks.append(_Res(c, draw(st.booleans())))
        elif kind == "dense":
            g = draw(st.sampled_from([2, 4]))
            blocks.append(_Dense(c, g))
            c += g
        elif kind == "dropout":
            blocks.append(nn.Dropout(0.2))
    return _Seq(blocks, c, draw(st.integers(2, 5))), in_c


class _Res(nn.Module):
    def __init__(self, c, project):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.proj = nn.Conv2d(c, c, 1) if project else None

    def forward(self, x):
        y = self.conv2(F.relu(self.bn1(self.conv1(x))))
        s = self.proj(x) if self.proj is not None else x
        return F.relu(y + s)


class _Dense(nn.Module):
    def __init__(self, c, growth):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        self.conv = nn.Conv2d(c, growth, 3, padding=1)

    def forward(self, x):
        return torch.cat([x, self.conv(torch.relu(self.bn(x)))], 1)


class _Seq(nn.Module):
    def __init__(self, blocks, c, classes):
        super().__init__()
        self.body = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.body(x)), 1))


@given(small_models(), st.integers(1, 3))
def test_liveness_properties(model_and_c, batch):
    model, in_c = model_and_c
    g = capture(model, (batch, in_c, 16, 16))
    check_graph_invariants(g)
    lives = g.liveness()
    for name, life in lives.items():
        node = g.node(name)
        assert life.producer == node.index
        for r in life.readers:
            assert r > life.producer                       # producer precedes its readers
            assert name in g.nodes[r].inputs
        assert life.last_forward_reader >= max(life.readers, default=life.producer)
        assert sorted(life.readers) == sorted(g.node(c).index for c in node.consumers)
        for b in life.backward_readers:
            assert b >= life.producer                       # only the producer or later
            layer = g.nodes[b]
            assert b == life.producer or name in layer.inputs
        if life.backward_readers:
            assert life.last_backward_reader == min(life.backward_readers)
        # Rule per kind: every conv/linear/bn input is saved in full.
    for n in g.nodes:
        rule = BACKWARD_RULES[n.kind]
        if rule.inputs == "full":
            assert all(n.index in lives[i].backward_full for i in n.inputs)
        if n.kind in ("relu", "relu6"):
            assert n.index in lives[n.name].backward_mask
    if batch == 1:
        x = torch.randn(1, in_c, 16, 16)
        real = real_shapes(model.eval(), x)
        assert all(real[n.name] == n.shape for n in g.nodes[:-1])


# ------------------------------------------------------------------------------------------
# Unsupported ops

class WithGELU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.block = nn.Sequential(nn.BatchNorm2d(4), nn.GELU())
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        x = self.block(self.conv(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Inner(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x)


class WithSigmoid(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.gate = Inner()
        self.norm = nn.LayerNorm([4, 6, 6])

    def forward(self, x):
        y = self.conv(x)
        return self.norm(y * self.gate(y))


def test_unsupported_module_error_names_node():
    with pytest.raises(UnsupportedOpError) as info:
        capture(WithGELU(), (1, 3, 8, 8))
    err = info.value
    assert isinstance(err, PimrtError)
    assert err.node == "block_1" and err.module_path == "block.1"
    assert "GELU" in err.target
    msg = str(err)
    assert "block_1" in msg and "GELU" in msg and "'block.1'" in msg
    assert "allow_unsupported=True" in msg


def test_unsupported_function_error_lists_all():
    with pytest.raises(UnsupportedOpError) as info:
        capture(WithSigmoid(), (1, 3, 8, 8))
    err = info.value
    assert err.node == "sigmoid" and err.target == "torch.sigmoid"
    assert err.module_path == "gate"
    # Ops unsupported whatever the shapes are reported together, before shape propagation;
    # the elementwise y * gate(y) is only known once shapes are (see test_broadcast_add...).
    assert [n for n, _, _ in err.others] == ["norm"]
    assert "LayerNorm" in str(err)
    assert "torch.sigmoid" in str(err) and "'gate'" in str(err)


def test_allow_unsupported_gives_host_fallback_and_warning():
    with pytest.warns(UnsupportedOpWarning, match="block_1"):
        g = capture(WithGELU(), (2, 3, 8, 8), allow_unsupported=True)
    fb = g.layers_of_kind("host_fallback")
    assert [n.name for n in fb] == ["block_1"]
    assert fb[0].placement == "host" and not fb[0].on_pim
    assert fb[0].shape == (2, 4, 6, 6) and fb[0].attrs["reason"]
    lives = g.liveness()
    assert fb[0].index in lives["block_0"].backward_full
    check_graph_invariants(g)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g2 = capture(WithSigmoid(), (1, 3, 8, 8), allow_unsupported=True)
    named = " ".join(str(w.message) for w in caught if w.category is UnsupportedOpWarning)
    assert "sigmoid" in named and "norm" in named and "mul" in named
    assert len(g2.layers_of_kind("host_fallback")) == 3
    assert g2.node("norm").params == {"norm.weight": (4, 6, 6), "norm.bias": (4, 6, 6)}


class ScalarAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bias = nn.Parameter(torch.zeros(4, 1, 1))

    def forward(self, x):
        return self.conv(x) + self.bias


def test_broadcast_add_is_unsupported():
    with pytest.raises(UnsupportedOpError, match="parameter"):
        capture(ScalarAdd(), (1, 3, 8, 8))
    with pytest.warns(UnsupportedOpWarning):
        g = capture(ScalarAdd(), (1, 3, 8, 8), allow_unsupported=True)
    fb = g.layers_of_kind("host_fallback")[0]
    assert fb.params == {"bias": (4, 1, 1)}


def test_bad_input_shape_and_untraceable():
    model = zoo.build("resnet18", input_size=32, device="meta")
    with pytest.raises(GraphError, match="conv1"):
        capture(model, (1, 4, 32, 32))
    with pytest.raises(GraphError, match="input_shape"):
        capture(model, (1, 3, -2, 32))
    with pytest.raises(GraphError, match="input_shape"):
        capture(model, 32)

    class Dynamic(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x

    with pytest.raises(GraphError, match="torch.fx could not trace"):
        capture(Dynamic(), (1, 3, 4, 4))


# ------------------------------------------------------------------------------------------
# validate_split

def test_validate_split():
    g = graph_of("resnet50")
    per = validate_split(g, batch=32, groups=4)
    assert per["conv1"] == 16 and len(per) == 53
    assert valid_group_counts(g) == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(SplitError) as info:
        validate_split(g, batch=32, groups=3)
    msg = str(info.value)
    assert "'conv1'" in msg and "64 output channels" in msg and "1, 2, 4, 8, 16, 32, 64" in msg
    assert isinstance(info.value, ConfigError)
    with pytest.raises(SplitError, match="128"):
        validate_split(g, batch=32, groups=128)
    for bad in (0, -1):
        with pytest.raises(SplitError, match="batch"):
            validate_split(g, batch=bad, groups=1)
    with pytest.raises(SplitError, match="groups"):
        validate_split(g, batch=1, groups=0)
    with pytest.raises(SplitError, match="batch"):
        validate_split(g, batch=2.5, groups=1)
    assert len(validate_split(g, batch=32, groups=2, micro_batches=4)) == 53
    with pytest.raises(SplitError, match="1, 2, 3, 4, 6, 12"):
        validate_split(g, batch=12, groups=1, micro_batches=5)
    mb = graph_of("mobilenetv2")
    assert valid_group_counts(mb) == [1, 2, 4, 8]
    with pytest.raises(SplitError, match="16"):
        validate_split(mb, batch=1, groups=16)


# ------------------------------------------------------------------------------------------
# Output helpers

def test_summary_and_to_dict():
    g = graph_of("resnet18", 32)
    s = g.summary()
    assert "conv1" in s and "GFLOPs" in s and "batchnorm" in s
    short = g.summary(max_rows=10)
    assert "more" in short and len(short.splitlines()) < 20
    d = json.loads(json.dumps(g.to_dict()))
    assert d["totals"]["param_count"] == 11_173_962
    assert d["nodes"][1]["attrs"]["kernel"] == [3, 3]
    assert d["nodes"][2]["on_pim"] is True
    assert g.activation_bytes(include_input=False) == g.activation_bytes() - 4 * 3 * 32 * 32
    with pytest.raises(GraphError):
        g.layers_of_kind("lstm")
    with pytest.raises(GraphError):
        g.node("nope")
    assert [n.kind for n in g.host_layers].count("conv") == 20
    assert all(n.on_pim for n in g.pim_layers)


def test_batchnorm_channel_mismatch_named():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(4))
    with pytest.raises(GraphError, match="'1' expects 4 channels"):
        capture(model, (2, 3, 8, 8))


def test_unsupported_message_format():
    with pytest.raises(UnsupportedOpError) as info:
        capture(WithGELU(), (1, 3, 8, 8))
    assert str(info.value).startswith(
        "unsupported op at fx node 'block_1': module type GELU; target block.1 "
        "(torch.nn.modules.activation.GELU), in module 'block.1'.")


@pytest.mark.slow
def test_fake_tensor_fallback(monkeypatch):
    """When the leaf modules cannot be copied to meta, capture uses FakeTensors instead."""
    import pimrt.graph.tracer as tracer

    def broken(*args, **kwargs):
        raise RuntimeError("cannot copy")

    model = zoo.build("resnet18", input_size=32)
    expected = capture(model, (2, 3, 32, 32))
    monkeypatch.setattr(tracer, "_meta_graph_module", broken)
    g = capture(model, (2, 3, 32, 32))
    assert [(n.name, n.kind, n.shape) for n in g.nodes] == \
        [(n.name, n.kind, n.shape) for n in expected.nodes]
    assert model.training and next(model.parameters()).device.type == "cpu"
