"""`pimrt bench layrub`: every variant on one yardstick (pimrt.memory_meter), checkpointing
variants that give plain torch's gradients, bad variants named."""
import argparse
import contextlib
import json

import pytest
import torch
from torch import nn

from pimrt.bench import layrub as bench
from pimrt.layrub.errors import LayrubError


def _args(tmp_path, variants=",".join(bench.VARIANTS)):
    return argparse.Namespace(models="resnet_cifar_20", batch=2, input_size=32, steps=1, variants=variants,
                              device="cpu", threads=None, json=tmp_path / "out.json")


def test_every_variant_on_one_yardstick(tmp_path, capsys):
    assert bench.run(_args(tmp_path)) == 0
    rows = {r["variant"]: r for r in json.loads((tmp_path / "out.json").read_text())["rows"]}
    assert list(rows) == list(bench.VARIANTS)
    plain = rows["plain"]
    assert plain["host_peak_bytes"] == 0 and plain["device_peak_bytes"] > 0
    for v in ("save_on_cpu", "checkpoint-block", "checkpoint-seq", "layrub-offload", "layrub"):
        assert rows[v]["device_peak_bytes"] < plain["device_peak_bytes"], v
    for v in ("checkpoint-block", "checkpoint-seq", "layrub-reuse"):
        assert rows[v]["host_peak_bytes"] == 0, v
    # save_on_cpu copies every saved tensor (parameters too, shared storages once each save):
    # its host peak is the bytes of all saves of the step, counted here independently
    from pimrt import zoo
    torch.manual_seed(0)
    model = zoo.build("resnet_cifar_20", input_size=32)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel() * t.element_size()) or t,
                                                  lambda t: t):
        loss = nn.functional.cross_entropy(model(torch.randn(2, 3, 32, 32)), torch.tensor([1, 2]))
    assert rows["save_on_cpu"]["host_peak_bytes"] == sum(saved)
    # Layrub's host memory is its preallocated pool: at least what it held at its peak
    for v in ("layrub-offload", "layrub"):
        assert rows[v]["host_peak_bytes"] >= rows[v]["layrub_host_peak_bytes"] > 0, v
        assert rows[v]["host_peak_bytes"] < rows["save_on_cpu"]["host_peak_bytes"], v
    out = capsys.readouterr().out
    assert "device MiB" in out and "host MiB" in out and "checkpoint-seq" in out


def _grads(model, x, y, ctx):
    model.zero_grad(set_to_none=True)
    with ctx:
        nn.functional.cross_entropy(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("how", ["block", "seq"])
def test_checkpointing_variants_give_plain_gradients(how):
    from pimrt import zoo
    torch.manual_seed(0)
    flat = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                         nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 8 * 8, 3))
    assert bench._bounds(flat, 3) is not None          # torch's even cut would start at an in-place ReLU
    # DenseNet-121's stem (conv, norm, in-place ReLU) between composite blocks: checkpointed
    # alone, the ReLU modified its own saved input (found on the GPU machine, 2026-12-04)
    dense = zoo.build("densenet121", input_size=32).eval()
    assert [len(r) for r in bench._blocks(dense.features)][:2] == [3, 1]
    for model in (flat, zoo.build("resnet_cifar_20", input_size=32).eval(), dense):
        x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 1])
        plain = _grads(model, x, y, contextlib.nullcontext())
        for a, b in zip(plain, _grads(model, x, y, bench._checkpointed(model, how))):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_unknown_variant_is_named(tmp_path):
    with pytest.raises(LayrubError, match=r"unknown variant\(s\) \['zip'\] in --variants"):
        bench.run(_args(tmp_path, "plain,zip"))
