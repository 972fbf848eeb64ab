"""pimrt.zoo: parameter counts against torchvision's, output shapes at 32 and 224, CIFAR ResNets
of any depth. Models are built on the meta device (no weights allocated) except where a real
forward is the point."""
import pytest
import torch

from pimrt import zoo
from pimrt.errors import ConfigError, PimrtError

MAIN = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg16_bn",
        "densenet121", "mobilenetv2", "wide_resnet"]

TORCHVISION_PARAMS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "vgg16_bn": 138_365_992,
    "densenet121": 7_978_856,
    "mobilenetv2": 3_504_872,     # torchvision mobilenet_v2
    "wide_resnet": 68_883_240,    # torchvision wide_resnet50_2
}


_BUILT: dict = {}


def built(name):
    """Meta-device zoo models, built once per test session."""
    if name not in _BUILT:
        _BUILT[name] = zoo.build(name, device="meta")
    return _BUILT[name]


def meta_forward(model, batch, size):
    return model(torch.empty(batch, 3, size, size, device="meta"))


@pytest.mark.parametrize("name", MAIN)
def test_param_count_matches_torchvision(name):
    model = zoo.build(name, input_size=224, device="meta")
    assert zoo.count_params(model) == TORCHVISION_PARAMS[name]
    assert zoo.CANONICAL_PARAMS[name] == TORCHVISION_PARAMS[name]


def test_aliases():
    assert zoo.count_params(zoo.build("vgg16", device="meta")) == 138_365_992
    assert zoo.count_params(zoo.build("mobilenet_v2", device="meta")) == 3_504_872
    assert zoo.count_params(zoo.build("wide_resnet50_2", device="meta")) == 68_883_240
    assert zoo.count_params(zoo.build("WRN-28-10", device="meta")) == 36_479_194


@pytest.mark.parametrize("name", MAIN)
@pytest.mark.parametrize("size", [32, 224])
def test_output_shape(name, size):
    model = zoo.build(name, input_size=size, device="meta")
    out = meta_forward(model, 2, size)
    expected_classes = 10 if size == 32 else 1000
    assert tuple(out.shape) == (2, expected_classes)
    assert model.num_classes == expected_classes
    assert model.variant == ("cifar" if size == 32 else "imagenet")


def test_num_classes_override():
    model = zoo.build("resnet50", num_classes=100, input_size=32, device="meta")
    assert tuple(meta_forward(model, 3, 32).shape) == (3, 100)


def test_cifar_stems():
    r18 = zoo.build("resnet18", input_size=32, device="meta")
    assert r18.conv1.kernel_size == (3, 3) and r18.conv1.stride == (1, 1)
    assert r18.maxpool is None
    # CIFAR ResNet-18: 11,173,962 parameters (the usual kuangliu/pytorch-cifar number).
    assert zoo.count_params(r18) == 11_173_962
    # WRN-28-10 for CIFAR-10: 36.5 M parameters.
    assert zoo.count_params(zoo.build("wide_resnet", input_size=32, device="meta")) == 36_479_194
    # VGG CIFAR: a 1x1x512 final map feeding a single Linear.
    vgg = zoo.build("vgg16_bn", input_size=32, device="meta")
    assert vgg.features(torch.empty(1, 3, 32, 32, device="meta")).shape[1:] == (512, 1, 1)
    # DenseNet / MobileNetV2 CIFAR variants end on a 4x4 map.
    dn = zoo.build("densenet121", input_size=32, device="meta")
    assert dn.features(torch.empty(1, 3, 32, 32, device="meta")).shape[2:] == (4, 4)
    mb = zoo.build("mobilenetv2", input_size=32, device="meta")
    assert mb.features(torch.empty(1, 3, 32, 32, device="meta")).shape[2:] == (4, 4)


def test_real_forward_small_model():
    torch.manual_seed(0)
    model = zoo.build("resnet18", num_classes=10, input_size=32)
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    assert model.pimrt_name == "resnet18"


@pytest.mark.parametrize("depth,params", [
    (20, 272_474), (56, 855_770), (110, 1_730_714), (1202, 19_424_026),
])
def test_resnet_cifar_param_counts(depth, params):
    # He et al. 2015 report 0.27 M, 0.85 M, 1.7 M and 19.4 M. pimrt uses 1x1-conv shortcuts
    # (option B, 2,752 parameters) so every layer is a supported kind.
    model = built(f"resnet_cifar_{depth}")
    assert zoo.count_params(model) == params
    if depth <= 110:      # (the 1202-layer forward is in the slow graph test)
        assert tuple(meta_forward(model, 2, 32).shape) == (2, 10)


def test_resnet_cifar_names_and_blocks():
    m = built("resnet_cifar_1202")
    assert zoo.build("resnet56", device="meta").depth == 56
    assert m.depth == 1202 and m.input_size == 32 and m.num_classes == 10
    convs = sum(isinstance(x, torch.nn.Conv2d) for x in m.modules())
    assert convs == 1201 + 2          # 1 stem + 2*600 block convs + 2 projection shortcuts
    b = zoo.build("resnet101_bottleneck", device="meta")     # CIFAR bottleneck, 9n+2
    assert isinstance(b.layer1[0], zoo.Bottleneck) and len(b.layer1) == 11
    assert isinstance(zoo.build("resnet_cifar_164", device="meta").layer1[0], zoo.Bottleneck)
    assert isinstance(zoo.build("resnet_cifar_164_basic", device="meta").layer1[0],
                      zoo.BasicBlock)
    assert isinstance(zoo.build("resnet56", device="meta").layer1[0], zoo.BasicBlock)
    assert zoo.resnet_cifar(29, block="bottleneck").layer1.__len__() == 3


@pytest.mark.parametrize("bad", [
    dict(name="resnet19"), dict(name="resnet7"), dict(name="alexnet"),
    dict(name="resnet18", input_size=16), dict(name="resnet18", num_classes=0),
    dict(name="vgg16_bn", input_size=48), dict(name="resnet18", variant="tiny"),
])
def test_bad_requests_raise_clear_errors(bad):
    with pytest.raises(ConfigError) as info:
        zoo.build(**bad, device="meta")
    assert isinstance(info.value, PimrtError)
    assert str(info.value)


def test_list_models():
    names = zoo.list_models()
    for n in MAIN + ["resnet_cifar_1202"]:
        assert n in names
    for n in names:
        if n not in ("resnet_cifar_1001", "resnet_cifar_1202"):    # built elsewhere
            zoo.build(n, device="meta")


def test_only_supported_module_kinds():
    allowed = (torch.nn.Conv2d, torch.nn.Linear, torch.nn.BatchNorm2d, torch.nn.ReLU,
               torch.nn.ReLU6, torch.nn.MaxPool2d, torch.nn.AvgPool2d,
               torch.nn.AdaptiveAvgPool2d, torch.nn.Dropout)
    for n in MAIN + ["resnet_cifar_20"]:
        for size in (32, 224):
            for mod in zoo.build(n, input_size=size, device="meta").modules():
                if not list(mod.children()):
                    assert isinstance(mod, allowed), (n, type(mod))
