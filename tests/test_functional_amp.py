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


@pytest.mark.parametrize("precision, update", [("amp-fp16", "gradsa"), ("amp-bf16", "laysa")])
def test_gradsa_update_under_amp_matches_pimrt_gradsa(precision, update):
    """GradSA's step on the PIM on the unscaled fp32 gradients (fold, select, apply: fp32;
    a CONV's apply writes its 16-bit copy) against GradSA in torch on the same gradients,
    within the ulp torch's fused add-with-alpha differs by, as the fp32 step's."""
    r = check_step_amp("resnet_cifar_20", 4, 32, "golden", precision, groups=2, update=update,
                       density=0.01)
    u = r["update_check"]
    assert u["update"] == update and u["kept_elements"] > 0 and u["density"] == 0.01
    assert u["max_param_rel_diff"] < 1e-6 and u["max_residual_rel_diff"] < 1e-6
    from torch import nn
    from pimrt import zoo
    lowered = sum(len(list(m.parameters(recurse=False))) for m in
                  zoo.build("resnet_cifar_20", input_size=32).modules()
                  if isinstance(m, (nn.Conv2d, nn.Linear)))
    assert u["weight_copies"] == lowered == 23     # 21 CONVs, the linear layer's weight and bias
    assert r["weight_copies_equal_torch_cast"]     # sgd_apply_amp's copy: torch's w.to(dtype)
    assert r["found_inf"] is r["found_inf_ref"] is False
    assert r["grads_within_tolerance"] and r["groups_equal"]


@pytest.mark.parametrize("update", ["sgd", "gradsa"])
def test_a_scale_that_overflows_skips_the_step_on_both_sides(update):
    """At a loss scale whose gradients overflow fp16 the PIM's check finds the inf as torch's
    scaler does, and neither step changes a parameter (GradSA: nothing folded either)."""
    r = check_step_amp("resnet_cifar_20", 2, 32, "golden", "amp-fp16", groups=2, update=update,
                       loss_scale=2.0 ** 40)
    assert r["found_inf"] is r["found_inf_ref"] is True
    assert r["max_param_rel_diff"] == 0.0          # both models as they were built
    assert r["update_check"] is None and r["loss_scale"] == 2.0 ** 40


@pytest.mark.parametrize("kw, match", [
    ({"update": "laysa", "precision": "amp-fp16"}, "laysa with --precision amp-fp16: LaySA"),
    ({"update": "powersgd"}, "unknown update 'powersgd'"),
    ({"backend": "torch"}, "golden or rtl backend")])
def test_what_the_amp_step_cannot_run_is_refused(kw, match):
    args = {"backend": "golden", "update": "sgd", "precision": "amp-bf16", **kw}
    with pytest.raises(ConfigError, match=match):
        check("resnet_cifar_20", 4, 32, args["backend"], update=args["update"],
              precision=args["precision"])


def test_run_refuses_laysa_functional_under_amp_fp16_before_work(tmp_path, capsys):
    from pimrt.cli import main
    rc = main(["run", "--precision", "amp-fp16", "--update", "laysa", "--out",
               str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "use amp-bf16" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
