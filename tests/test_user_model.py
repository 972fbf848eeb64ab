"""A user's own model on the command line: `--model FILE.py:NAME` / `module:NAME`, run
functional and timed; unsupported ops refused (or run on the host with --allow-unsupported);
a model that cannot be loaded or built is a clear error before any work."""
import csv
import json
import warnings

import pytest

from pimrt import zoo
from pimrt.cli import main
from pimrt.runtime.session import captured
from pimrt.zoo.user import UserModelError

NETS = '''
import torch
from torch import nn


class SmallNet(nn.Module):
    def __init__(self, classes=7):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))

    def forward(self, x):
        return self.body(x)


class GeluNet(SmallNet):
    def __init__(self):
        super().__init__()
        self.body[2] = nn.GELU()


def needs_args(width):
    return SmallNet(width)


def not_a_model():
    return [1, 2]


class PoolNet(SmallNet):            # a 3x3 max pool the PIM has no program for
    def __init__(self):
        super().__init__()
        self.body[6] = nn.MaxPool2d(3, 2, 1)


class Segmenter(SmallNet):
    def forward(self, x):
        return self.body[:6](x)

BROKEN = 1 / 0 if __name__ == "never" else None
'''


@pytest.fixture()
def nets(tmp_path):
    (tmp_path / "nets.py").write_text(NETS)
    return tmp_path / "nets.py"


def _layer_rows(out) -> dict:
    """A run folder's layers.csv by layer name."""
    with open(out / "layers.csv") as fh:
        return {r["layer"]: r for r in csv.DictReader(fh)}


def test_a_users_model_runs_functional_and_timed(nets, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--model", f"{nets}:SmallNet", "--batch", "4", "--input", "16",
                 "--groups", "2", "--out", str(out), "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["model"] == f"{nets}:SmallNet"
    f = s["functional"]
    assert f["loss_abs_diff"] < 1e-5 and f["groups_equal"]
    assert s["speedup_vs_serial"] > 0 and s["serial_makespan_cycles"] > 0
    with open(out / "layers.csv") as fh:
        kinds = [r["kind"] for r in csv.DictReader(fh)]
    assert kinds[:3] == ["conv", "batchnorm", "relu"] and "linear" in kinds
    m = zoo.build(f"{nets}:SmallNet", input_size=16, device="meta")
    assert m.num_classes == 7 and m.pimrt_name == "SmallNet"
    with pytest.raises(zoo.ZooError, match="num_classes and variant are for zoo models"):
        zoo.build(f"{nets}:SmallNet", num_classes=10, input_size=16)


def test_module_name_from_the_current_folder(nets, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    m = zoo.build("nets:SmallNet", input_size=16, device="meta")
    assert m.num_classes == 7


def test_unsupported_ops_are_refused_or_run_on_the_host(nets, tmp_path, capsys):
    assert main(["run", "--model", f"{nets}:GeluNet", "--input", "16", "--functional", "none",
                 "--out", str(tmp_path / "refused"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "unsupported op at fx node 'body_2': module type GELU" in err
    assert "Pass --allow-unsupported" in err
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "allowed"
    assert main(["run", "--model", f"{nets}:GeluNet", "--allow-unsupported", "--batch", "4",
                 "--input", "16", "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "warning: pimrt.graph.capture: node 'body_2'" in err and "host_fallback" in err
    rows = _layer_rows(out)
    assert rows["body_2"]["kind"] == "host_fallback" and rows["body_2"]["side"] == "host_fallback"
    assert float(rows["body_2"]["host_busy_cycles"]) > 0
    assert float(rows["body_2"]["pim_busy_cycles"]) == 0


@pytest.mark.parametrize("precision", ["amp-fp16", "amp-bf16"])
def test_under_amp_an_op_with_no_pim_kernel_is_refused_or_run_on_the_host(
        nets, tmp_path, capsys, precision):
    """Issue 41's bad input: under AMP too, an op with no (16-bit) PIM kernel is refused
    before any work naming the fx node, or with --allow-unsupported run on the host in the
    dtype autocast gives it (its input's: the CONV's 16 bits)."""
    base = ["run", "--model", f"{nets}:GeluNet", "--batch", "2", "--input", "8",
            "--precision", precision, "--functional", "none", "--quiet"]
    assert main([*base, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "unsupported op at fx node 'body_2': module type GELU" in err
    assert "Traceback" not in err and not (tmp_path / "refused").exists()
    out = tmp_path / "allowed"
    assert main([*base, "--allow-unsupported", "--out", str(out)]) == 0
    assert "node 'body_2'" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["precision"] == precision
    rows = _layer_rows(out)
    assert rows["body_2"]["side"] == "host_fallback"
    assert float(rows["body_2"]["pim_busy_cycles"]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = captured(f"{nets}:GeluNet", 2, 8, allow_unsupported=True, precision=precision)
    half = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}[precision]
    assert g.node("body_2").dtype == g.node("body_0").dtype == half


def test_a_pool_the_pim_cannot_run_is_said_to_run_on_the_host(nets, tmp_path, capsys):
    """A 3x3 max pool and a global average pool run on the host: the run says so once, and
    layers.csv and the graph give the side each layer ran on."""
    out = tmp_path / "out"
    assert main(["run", "--model", f"{nets}:PoolNet", "--batch", "2", "--input", "16",
                 "--functional", "none", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    notes = [line for line in printed.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1, printed
    assert "body_6 (maxpool 3x3, stride 2, padding 1)" in notes[0]
    assert "body_7 (global average pool)" in notes[0]
    rows = _layer_rows(out)
    assert rows["body_6"]["kind"] == "maxpool" and rows["body_6"]["side"] == "host_fallback"
    assert rows["body_7"]["side"] == "host_fallback"
    assert float(rows["body_6"]["pim_busy_cycles"]) == 0
    assert (rows["body_0"]["side"], rows["body_1"]["side"], rows["body_2"]["side"],
            rows["body_9"]["side"]) == ("host", "pim", "pim", "host")
    from pimrt.runtime.session import captured
    g = captured(f"{nets}:PoolNet", 2, 16)
    assert (g.node("body_6").placement, g.node("body_7").placement) == ("host", "host")
    where = {line.split()[1]: line.split()[3] for line in g.summary().splitlines()
             if line.split() and line.split()[0].isdigit()}
    assert where["body_6"] == "host" and where["body_1"] == "pim"


@pytest.mark.parametrize("name, message", [
    ("{nets}:Nope", "has no 'Nope' (it has: GeluNet, PoolNet, Segmenter, SmallNet, "
                    "needs_args, not_a_model)"),
    ("{dir}/missing.py:Net", "no file"),
    ("no_such_module_xyz:Net", "cannot import module 'no_such_module_xyz'"),
    ("{nets}:needs_args", "building it failed: TypeError"),
    ("{nets}:not_a_model", "returned a list, not a torch.nn.Module"),
    ("{nets}:Segmenter", "returns (2, 32, 16, 16) for a batch of 2"),
    ("{nets}:BROKEN", "BROKEN is a NoneType, not a class or function"),
    ("{nets}:", "expected FILE.py:NAME or module:NAME"),
])
def test_a_model_that_cannot_be_built_is_a_clear_error(nets, tmp_path, capsys, name, message):
    spec = name.format(nets=nets, dir=tmp_path)
    with pytest.raises(UserModelError, match=None) as exc:
        zoo.build(spec, input_size=16, device="meta")
    assert message in str(exc.value) and repr(spec) in str(exc.value)
    assert main(["run", "--model", spec, "--input", "16", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_compare_names_a_users_model_folder_after_it(nets, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--models", f"{nets}:SmallNet,resnet_cifar_20", "--policies",
                 "authority", "--batch", "2", "--input", "32", "--out", str(out),
                 "--quiet"]) == 0
    assert (out / "nets.SmallNet" / "authority" / "layers.csv").exists()
    assert (out / "resnet_cifar_20" / "authority" / "layers.csv").exists()
    results = json.loads((out / "compare.json").read_text())
    assert results[0]["model"] == f"{nets}:SmallNet"


def test_compare_folders_are_distinct():
    from pimrt.runtime.session import folder_names
    assert folder_names(["resnet18", "a/nets.py:Net", "b/nets.py:Net", "pkg.mod:Net"]) == {
        "resnet18": "resnet18", "a/nets.py:Net": "nets.Net", "b/nets.py:Net": "nets.Net-2",
        "pkg.mod:Net": "pkg.mod.Net"}
