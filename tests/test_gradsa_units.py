"""GradSA pure pieces: warm-up, selection, residual bookkeeping, baselines' codecs, registry."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as hs

from pimrt.gradsa import baselines as bl, registry, state as st
from pimrt.gradsa.encoding import encode_values
from pimrt.gradsa.errors import GradSAError
from pimrt.gradsa.sparsify import density_at, k_for, select


# ---------------------------------------------------------------- sparsify
def test_density_warmup_schedule():
    ds = [density_at(s, 0.001, 20, 0.05) for s in range(25)]
    assert ds[0] == pytest.approx(0.05) and all(a > b for a, b in zip(ds[:20], ds[1:21]))
    assert ds[20:] == [0.001] * 5
    assert density_at(0, 0.01, 0) == 0.01
    for bad in (0.0, -1.0, 1.5):
        with pytest.raises(GradSAError):
            density_at(0, bad)


@given(hs.integers(1, 10**7), hs.floats(1e-6, 1.0))
def test_k_for(n, d):
    k = k_for(n, d)
    assert 1 <= k <= n and k >= min(n, math.ceil(d * n))


@given(hs.integers(1, 3000), hs.floats(1e-3, 1.0), hs.integers(0, 1000))
def test_select_exact_on_small_layers(n, d, seed):
    v = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    k = k_for(n, d)
    idx = select(v, k, sample_size=4096)
    assert torch.equal(idx, torch.sort(idx).values) and idx.numel() == k
    if k < n:
        assert v.abs()[idx].min() >= torch.topk(v.abs(), k).values.min()


def test_select_sampled_on_large_layer():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(200_000, generator=g)
    idx = select(v, 200, sample_size=4096, generator=g)
    assert 100 <= idx.numel() <= 200 and torch.all(idx[1:] > idx[:-1])
    assert v.abs()[idx].min() > 2.5  # well into the tail: these are large elements
    assert select(torch.zeros(100_000), 100).numel() == 0  # zeros are never sent


# ---------------------------------------------------------------- residual bookkeeping
@given(hs.integers(0, 10**6), hs.sampled_from([0.0, 0.9]), hs.sampled_from(["fp32", "fp16", "int8", "sign"]),
       hs.booleans(), hs.integers(1, 8))
def test_sent_plus_held_equals_produced(seed, momentum, vcodec, nesterov, steps):
    g = torch.Generator().manual_seed(seed)
    n = 500
    ps = st.ParamState.zeros(n, "cpu", track_age=True)
    produced = torch.zeros(n, dtype=torch.float64)
    sent = torch.zeros(n, dtype=torch.float64)
    dropped = torch.zeros(n, dtype=torch.float64)
    for _ in range(steps):
        grad = torch.randn(n, generator=g)
        produced += st.accumulate(ps, grad, momentum, nesterov, return_added=True).double()
        d = st.damp_stale(ps, 3, 0.5)
        if d is not None:
            dropped += d.double()
        idx = select(ps.v, 25)
        _, dec = encode_values(ps.v[idx].numpy(), vcodec)
        dec = torch.from_numpy(dec)
        np.add.at(sent.numpy(), idx.numpy(), dec.double().numpy())
        st.commit(ps, idx, dec, masking=True)
        assert torch.all(ps.u[idx] == 0)  # momentum factor masking
        assert torch.all(ps.age[idx] == 0)
    torch.testing.assert_close(sent + ps.v.double() + dropped, produced, rtol=0, atol=1e-5)


def test_momentum_correction_matches_formula():
    ps = st.ParamState.zeros(3, "cpu")
    g1, g2 = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 1.0, 1.0])
    st.accumulate(ps, g1, 0.9)
    st.accumulate(ps, g2, 0.9)
    torch.testing.assert_close(ps.u, 0.9 * g1 + g2)
    torch.testing.assert_close(ps.v, g1 + 0.9 * g1 + g2)


def test_residual_store_checkpoint_checks_names_and_shapes():
    s = st.ResidualStore()
    s.get("w", 10, "cpu").v += 1
    d = s.state_dict()
    t = st.ResidualStore()
    t.load_state_dict(d, {"w": 10})
    assert torch.equal(t.params["w"].v, torch.ones(10))
    with pytest.raises(GradSAError, match="'w'.*10 elements.*has 12"):
        t.load_state_dict(d, {"w": 12})
    with pytest.raises(GradSAError, match="'w'"):
        t.load_state_dict(d, {"b": 10})
    with pytest.raises(GradSAError, match="'w'"):
        t.get("w", 11, "cpu")


# ---------------------------------------------------------------- baselines (pure parts)
@given(hs.lists(hs.sampled_from([-1, 0, 1]), min_size=1, max_size=99))
def test_ternary_pack_round_trip(ts):
    t = torch.tensor(ts, dtype=torch.int8)
    packed = bl.pack_ternary(t)
    assert packed.size == (len(ts) + 3) // 4
    assert np.array_equal(bl.unpack_ternary(packed, len(ts)), np.array(ts, np.float32))


def test_stochastic_quantizers_are_unbiased():
    g = torch.linspace(-1, 1, 101)
    gen = torch.Generator().manual_seed(0)
    acc8 = torch.zeros(101)
    acct = torch.zeros(101)
    for _ in range(2000):
        s, q = bl.quantize_int8(g, gen)
        acc8 += q.float() * s
        s, t = bl.ternarize(g, gen, clip_sigma=0)
        acct += t.float() * s
    torch.testing.assert_close(acc8 / 2000, g, atol=2e-3, rtol=0)
    torch.testing.assert_close(acct / 2000, g, atol=0.06, rtol=0)


def test_dgc_format_round_trip_and_size():
    f = bl.DGCFormat(32)
    layers = [(np.array([1, 7]), np.array([0.5, -2.0], np.float32), 10), (np.array([], np.int64),
              np.array([], np.float32), 5)]
    buf, dec = f.encode(layers)
    assert len(buf) == 4 + 2 * 8 + 4  # count + (fp32 value + int32 index) per kept element
    out = f.decode(np.frombuffer(buf, np.uint8), [10, 5])
    assert np.array_equal(out[0][0], [1, 7]) and np.array_equal(out[0][1], [0.5, -2.0]) and out[1][0].size == 0
    assert len(bl.DGCFormat(64).encode(layers)[0]) == 4 + 2 * 12 + 4


# ---------------------------------------------------------------- registry
def test_unknown_compressor_lists_valid_ones():
    with pytest.raises(GradSAError, match="unknown compressor 'zip'.*gradsa.*dense.*powersgd"):
        registry.get("zip")


@pytest.mark.parametrize("kw,match", [
    ({"density": 0.0}, "impossible density"), ({"density": 1.5}, "impossible density"),
    ({"ratio": 0.5}, "impossible compression ratio"), ({"ratio": 10, "density": 0.1}, "either"),
    ({"value_codec": "int3"}, "value codec"), ({"index_codec": "zip"}, "index codec"),
    ({"momentum": 1.0}, "momentum"), ({"warmup_steps": -1}, "warm-up"), ({"powersgd_rank": 0}, "PowerSGD"),
    ({"ratio": float("inf")}, r"ratio inf \(--ratio\): it must be a finite number >= 1"),
    ({"warmup_start_density": 0.0}, r"warm-up start density 0.0 \(--warmup-start-density\)"),
    ({"warmup_start_density": float("nan")}, "warm-up start density nan"),
])
def test_impossible_options_fail_validation(kw, match):
    with pytest.raises(GradSAError, match=match):
        registry.CompressorOptions(**kw).validate()


def test_ratio_sets_density():
    assert registry.CompressorOptions(ratio=1000).sparse_config().density == pytest.approx(0.001)


# ---------------------------------------------------------------- DGC's recipe
def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))


def test_dgc_recipe_is_the_default_and_each_part_can_be_turned_off():
    dgc, _ = registry.build("dgc", _net())
    gradsa, _ = registry.build("gradsa", _net())
    assert (dgc.config.clip_norm, dgc.config.momentum, dgc.config.masking) == (1.0, 0.9, True)
    assert dgc.config.warmup_steps == 20 and dgc.config.warmup_start_density == 0.05
    assert registry.get("dgc").lr_warmup and not registry.get("gradsa").lr_warmup
    assert gradsa.config.clip_norm == 0.0
    off, _ = registry.build("dgc", _net(), None, registry.CompressorOptions(
        clip_norm=0.0, masking=False, momentum=0.0, warmup_steps=0))
    assert (off.config.clip_norm, off.config.masking, off.config.momentum, off.config.warmup_steps) == (0, False, 0, 0)
    assert off.density() == off.config.density


@given(hs.floats(0.0, 100.0), hs.integers(1, 256))
def test_local_clipping_threshold_scales_with_the_inverse_root_of_the_ranks(clip, world):
    o = registry.CompressorOptions(clip_norm=clip, world_size=world)
    assert o.effective_clip() == pytest.approx(clip / math.sqrt(world))
    assert o.sparse_config().clip_norm == pytest.approx(clip / math.sqrt(world))
    assert registry.CompressorOptions(clip_norm=clip, world_size=world, clip_scale=False).effective_clip() == clip


def test_local_clipping_bounds_what_each_layer_adds():
    from pimrt.gradsa.hook import compress_bucket
    model = _net()
    state, _ = registry.build("dgc", model, None, registry.CompressorOptions(
        density=1.0, momentum=0.0, warmup_steps=0, clip_norm=0.5, world_size=4))   # 0.5 / 2 = 0.25
    params = list(model.parameters())
    grads = [torch.full_like(p, 10.0) for p in params]
    payload, numels = compress_bucket(state, params, grads)
    layers = state.fmt.decode(np.frombuffer(payload, np.uint8), numels)
    for idx, vals in layers:                     # density 1, fp32 values: each layer as clipped
        assert np.linalg.norm(vals) == pytest.approx(0.25, rel=1e-5)
        assert np.allclose(vals, vals[0])        # a scaled copy of the gradient


@given(hs.integers(1, 50), hs.integers(0, 80), hs.sampled_from(["const", "cosine"]))
def test_lr_warmup_is_linear_then_the_schedule(warm, step, schedule):
    from types import SimpleNamespace
    from pimrt.train.loop import lr_at
    a = SimpleNamespace(lr=0.1, lr_schedule=schedule, lr_warmup_steps=warm)
    plain = lr_at(SimpleNamespace(lr=0.1, lr_schedule=schedule, lr_warmup_steps=0), step, 100)
    assert lr_at(a, step, 100) == pytest.approx(plain * min(1.0, (step + 1) / warm))


def test_trainer_options_of_the_recipe():
    from pimrt.train import cli
    a = cli.parse(["--compressor", "dgc", "--warmup-steps", "7"])
    assert a.lr_warmup_steps == 7 and cli.momentum_in_hook(a)
    assert cli.compressor_options(a).clip_norm is None          # the compressor's default (1.0)
    assert cli.parse(["--compressor", "gradsa"]).lr_warmup_steps == 0
    assert cli.parse(["--compressor", "dgc", "--lr-warmup-steps", "0"]).lr_warmup_steps == 0
    b = cli.parse(["--compressor", "dgc", "--no-momentum-correction", "--no-momentum-masking",
                   "--no-clip-scaling", "--clip-norm", "0"])
    o = cli.compressor_options(b)
    assert not cli.momentum_in_hook(b) and (o.momentum, o.weight_decay, o.masking, o.clip_scale) == (0, 0, False, False)
