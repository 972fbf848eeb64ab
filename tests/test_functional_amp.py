"""The functional step in mixed precision (pimrt.runtime.functional_amp): a real AMP step with
the PIM's ops in 16 bits and its update on the PIM against torch's own AMP step."""
from __future__ import annotations

import pytest

from pimrt.errors import ConfigError
from pimrt.runtime.functional_amp import AMP_TOLERANCE, check, check_step_amp


@pytest.mark.parametrize("precision", ["amp-bf16", "amp-fp16"])
def test_amp_step_matches_torchs(precision):
    r = check_step_amp("resnet_cifar_20", 4, 32, "golden", precision, groups=2)
    assert r["loss_abs_diff"] < 2e-3
    assert r["relu_mask_hard_flips"] == 0
    # the PIM's decisions differ from fp32's about as often as torch's own AMP step's do
    assert r["pim_vs_fp32_flips"] <= 1.5 * r["torch_amp_vs_fp32_flips"]
    assert r["max_grad_rel_diff_same_masks"] < AMP_TOLERANCE[precision]
    assert r["grads_within_tolerance"] and r["groups_equal"]
    assert r["found_inf"] is r["found_inf_ref"] is False
    assert r["weight_copies_equal_torch_cast"]          # sgd_amp's copy: torch's w.to(dtype)
    assert r["max_param_rel_diff"] < 0.5
    if precision == "amp-fp16":
        assert r["loss_scale"] == 2.0 ** 16 / 2 ** r["steps_skipped_first"]
    else:
        assert r["loss_scale"] is None


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "vgg16_bn"])
def test_amp_step_on_larger_models_within_torchs_own_distance_from_fp32(model):
    r = check_step_amp(model, 8, 32, "golden", "amp-fp16", groups=2)
    assert r["grads_within_tolerance"] and r["weight_copies_equal_torch_cast"]
    assert r["found_inf"] == r["found_inf_ref"]


@pytest.mark.parametrize("kw, match", [
    ({"update": "gradsa"}, "--update gradsa under AMP is timed but not run"),
    ({"backend": "torch"}, "golden or rtl backend")])
def test_what_the_amp_step_cannot_run_is_refused(kw, match):
    args = {"backend": "golden", "update": "sgd", **kw}
    with pytest.raises(ConfigError, match=match):
        check("resnet_cifar_20", 4, 32, args["backend"], update=args["update"],
              precision="amp-bf16")


def test_run_refuses_gradsa_functional_under_amp_before_work(tmp_path, capsys):
    from pimrt.cli import main
    rc = main(["run", "--precision", "amp-fp16", "--update", "gradsa", "--out",
               str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "--functional none" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
