"""GradSA wire format: round trips (hypothesis), sizes, golden bytes, corrupt input."""
import numpy as np
import pytest
from hypothesis import given, strategies as hs

from pimrt.gradsa import bits, encoding as E
from pimrt.gradsa.errors import GradSAError

u63 = hs.integers(0, 2**63 - 1)


@given(hs.lists(u63, max_size=200))
def test_varint_round_trip(xs):
    x = np.array(xs, dtype=np.uint64)
    buf = bits.varint_encode(x)
    assert len(buf) == int(bits.varint_sizes(x).sum()) if xs else len(buf) == 0
    out, used = bits.varint_decode(np.frombuffer(buf + b"\x07junk", np.uint8), len(xs))
    assert used == len(buf) and np.array_equal(out, x)
    for v in xs[:5]:
        assert bits.read_varint(bits.write_varint(v), 0) == (v, len(bits.write_varint(v)))


@given(hs.integers(1, 63).flatmap(lambda w: hs.tuples(hs.just(w), hs.lists(hs.integers(0, 2**w - 1), max_size=100))))
def test_bitpack_round_trip(case):
    w, xs = case
    x = np.array(xs, dtype=np.uint64)
    buf = bits.pack_bits(x, w)
    assert len(buf) == (len(xs) * w + 7) // 8
    assert np.array_equal(bits.unpack_bits(np.frombuffer(buf, np.uint8), len(xs), w), x)


@given(hs.lists(hs.integers(0, 100000), max_size=200), hs.integers(0, 20))
def test_rice_round_trip(xs, r):
    x = np.array(xs, dtype=np.uint64)
    unary, rem = bits.rice_encode(x, r)
    assert 8 * len(unary) + 8 * len(rem) >= bits.rice_cost_bits(x, r)
    out = bits.rice_decode(np.frombuffer(unary, np.uint8), np.frombuffer(rem, np.uint8), len(xs), r)
    assert np.array_equal(out, x)


@hs.composite
def sparse_layer(draw):
    numel = draw(hs.integers(1, 5000))
    k = draw(hs.integers(0, min(numel, 300)))
    seed = draw(hs.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(numel, k, replace=False)).astype(np.int64)
    scale = draw(hs.sampled_from([1e-6, 1e-3, 1.0, 1e3]))
    vals = (rng.standard_normal(k) * scale).astype(np.float32)
    return idx, vals, numel


@pytest.mark.parametrize("vcodec", E.VALUE_CODECS)
@pytest.mark.parametrize("icodec", ("auto",) + E.INDEX_CODECS)
@given(layer=sparse_layer())
def test_layer_round_trip(icodec, vcodec, layer):
    idx, vals, numel = layer
    rec, decoded, used = E.encode_layer(idx, vals, numel, vcodec, icodec)
    assert icodec == "auto" or used == icodec or idx.size == 0
    L, off = E.decode_layer(np.frombuffer(rec + b"\xff\xff", np.uint8), 0, numel)
    assert off == len(rec)
    assert np.array_equal(L.indices, idx)
    assert np.array_equal(L.values, decoded)  # the receiver sees exactly what the sender accounts
    if idx.size == 0:
        return
    peak = float(np.abs(vals).max())
    err = np.abs(decoded - vals)
    if vcodec == "fp32":
        assert np.array_equal(decoded, vals)
    elif vcodec in ("fp16", "bf16"):
        assert np.all(err <= np.abs(vals) * (2**-10 if vcodec == "fp16" else 2**-7) + 1e-7)
    elif vcodec in ("int8", "int4"):
        levels = 127 if vcodec == "int8" else 7
        assert np.all(err <= peak / levels / 2 * 1.0001 + 1e-30)
    else:  # sign
        nz = vals != 0
        assert np.all(np.sign(decoded[nz]) == np.sign(vals[nz]))


@given(layer=sparse_layer())
def test_auto_picks_smallest_and_sizes_are_exact(layer):
    idx, _, numel = layer
    if idx.size == 0:
        return
    sizes = E.index_sizes(E.gaps_of(idx), numel)
    for codec in E.INDEX_CODECS:
        assert len(E.encode_indices(idx, numel, codec)[1]) == sizes[codec], codec
    used, buf = E.encode_indices(idx, numel, "auto")
    assert len(buf) == min(sizes.values())


@given(hs.lists(sparse_layer(), min_size=1, max_size=6), hs.sampled_from(E.VALUE_CODECS))
def test_payload_round_trip_with_padding(layers, vcodec):
    payload, decoded = E.encode_payload(layers, vcodec)
    got = E.decode_payload(payload + bytes(17), [n for _, _, n in layers])
    for (idx, _, _), dec, L in zip(layers, decoded, got):
        assert np.array_equal(L.indices, idx) and np.array_equal(L.values, dec)


def test_golden_bytes():
    """The wire format, byte by byte (docs/gradsa.md shows this example)."""
    payload, _ = E.encode_payload([(np.array([3, 5, 300]), np.array([1.0, -0.5, 0.25], np.float32), 1000)],
                                  value_codec="int8", index_codec="varint")
    assert payload.hex(" ") == ("47 01 01 "          # magic, version, 1 layer
                                "08 03 "             # flags: varint (0) | int8 (2) << 2; k = 3
                                "03 01 a6 02 "       # gaps 3, 1, 294 as LEB128
                                "04 02 01 3c "       # scale 1/127 = 0x3c010204, little-endian f32
                                "7f c0 20")          # q = 127, -64 (0xc0; -63.5 rounds to even), 32


def test_corrupt_payloads_raise_gradsa_error():
    payload, _ = E.encode_payload([(np.array([1, 2]), np.array([1.0, 2.0], np.float32), 10)])
    with pytest.raises(GradSAError, match="magic"):
        E.decode_payload(b"\x00" + payload[1:], [10])
    with pytest.raises(GradSAError, match="layers"):
        E.decode_payload(payload, [10, 10])
    for cut in range(3, len(payload)):
        with pytest.raises(GradSAError):
            E.decode_payload(payload[:cut], [10])
    with pytest.raises(GradSAError, match="strictly increasing"):
        E.encode_layer(np.array([2, 1]), np.array([1.0, 1.0], np.float32), 10)
    with pytest.raises(GradSAError, match="out of range"):
        E.encode_layer(np.array([1, 10]), np.array([1.0, 1.0], np.float32), 10)
    with pytest.raises(GradSAError, match="value codec"):
        E.encode_layer(np.array([1]), np.array([1.0], np.float32), 10, "int3")
