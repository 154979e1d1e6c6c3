"""add, copy, rgb_to_gray, swizzle2d, dropout, softmax against float64 NumPy references."""
import numpy as np
import pytest

import refs

FLOATS = ["f32", "f16", "bf16"]


@pytest.mark.parametrize("dt", FLOATS)
def test_add(ctx, rng, dt):
    x, xv = refs.rand(rng, (5, 7), dt)
    y, yv = refs.rand(rng, (5, 7), dt)
    out = ctx.add(x, y)
    assert out.dtype == x.dtype and out.shape == x.shape
    refs.close(out, xv + yv, dt)


def test_add_views(ctx, rng):
    # transposed, negative-stride and broadcast (zero-stride) inputs, strided output
    x, xv = refs.rand(rng, (6, 4), "f32")
    y, yv = refs.rand(rng, (4,), "f32")
    yb = np.broadcast_to(y, (6, 4))
    refs.close(ctx.add(x[::-1], yb), xv[::-1] + yv, "f32")
    refs.close(ctx.add(x.T, x.T[:, ::-1]), xv.T + xv.T[:, ::-1], "f32")
    big = np.full((6, 9), 7.0, np.float32)
    out = big[:, ::2]
    res = ctx.add(x[:, :1].repeat(5, 1), x[:, :1].repeat(5, 1), out=out)
    assert res is out
    refs.close(big[:, ::2], 2 * np.repeat(xv[:, :1], 5, 1), "f32")
    assert np.all(big[:, 1::2] == 7.0), "elements between the view's must be untouched"


def test_add_in_place(ctx, rng):
    x, xv = refs.rand(rng, (3, 8), "f32")
    y, yv = refs.rand(rng, (3, 8), "f32")
    assert ctx.add(x, y, out=x) is x
    refs.close(x, xv + yv, "f32")


def test_add_4d_and_empty(ctx, rng):
    x, xv = refs.rand(rng, (2, 3, 2, 5), "f32")
    refs.close(ctx.add(x, x), 2 * xv, "f32")
    e = np.zeros((0, 3), np.float32)
    assert ctx.add(e, e).shape == (0, 3)


@pytest.mark.parametrize("src,dst", [("f32", "f16"), ("f32", "bf16"), ("f16", "f32"),
                                     ("bf16", "f32"), ("f32", "f32")])
def test_copy_convert(ctx, rng, src, dst):
    x, xv = refs.rand(rng, (4, 6), src, -3, 3)
    out = ctx.copy(x, dtype=dst)
    assert out.dtype == refs.NP[dst]
    refs.close(out, xv, dst)
    # exact: the conversion rounds to nearest even, as NumPy / to_bf16 do
    np.testing.assert_array_equal(out, refs.store(xv, dst))


def test_copy_layouts(ctx, rng):
    x, xv = refs.rand(rng, (5, 3), "f32")
    out = np.zeros((3, 5), np.float32).T  # a column-major destination
    ctx.copy(x, out=out)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(ctx.copy(x[::-2, ::-1]), x[::-2, ::-1])


@pytest.mark.parametrize("dt", ["u8", "f32"])
def test_rgb_to_gray(ctx, rng, dt):
    if dt == "u8":
        rgb = rng.integers(0, 256, size=(3, 5, 7), dtype=np.uint8)
        gray = ctx.rgb_to_gray(rgb)
        want = refs.rgb_to_gray(rgb.astype(np.float64))
        assert gray.dtype == np.uint8 and gray.shape == (5, 7)
        assert np.all(np.abs(gray.astype(np.float64) - want) <= 0.5 + 1e-4)
    else:
        rgb, v = refs.rand(rng, (3, 4, 6), "f32", 0, 1)
        refs.close(ctx.rgb_to_gray(rgb), refs.rgb_to_gray(v), "f32", atol=1e-6)


@pytest.mark.parametrize("group", [1, 3, 100])
def test_swizzle2d(ctx, rng, group):
    x, xv = refs.rand(rng, (7, 5), "f32")
    np.testing.assert_array_equal(ctx.swizzle2d(x, group), refs.swizzle2d(x, min(group, 7)))


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout(ctx, rng, dt, p):
    x, xv = refs.rand(rng, (9, 13), dt, 0.5, 1.5)  # no zeros in x: a zero out is a drop
    seed = 0x123456789ABCDEF
    out = ctx.dropout(x, p, seed)
    want = refs.dropout(xv, p, seed)
    refs.close(out, want, dt, rtol=refs.RTOL[dt] if dt != "f32" else 0)
    # the same stream whatever the layout: element index is the view's row-major index
    xt = np.ascontiguousarray(x.T).T
    np.testing.assert_array_equal(ctx.dropout(xt, p, seed), out)
    if 0 < p < 1:
        assert 0 < (refs.load(out) == 0).sum() < out.size


def test_dropout_seed_changes_mask(ctx):
    x = np.ones(256, np.float32)
    a, b = ctx.dropout(x, 0.5, 1), ctx.dropout(x, 0.5, 2)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, refs.dropout(np.ones(256), 0.5, 1))


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_softmax(ctx, rng, dt):
    x, xv = refs.rand(rng, (6, 37), dt, -4, 4)
    refs.close(ctx.softmax(x), refs.softmax(xv), dt, atol=1e-7)


def test_softmax_strided_and_in_place(ctx, rng):
    x, xv = refs.rand(rng, (8, 20), "f32", -4, 4)
    refs.close(ctx.softmax(x[::2, 3:]), refs.softmax(xv[::2, 3:]), "f32", atol=1e-7)
    y = x.copy()
    ctx.softmax(y, out=y)
    refs.close(y, refs.softmax(xv), "f32", atol=1e-7)
