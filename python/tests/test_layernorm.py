"""layernorm_forward / layernorm_backward against float64 NumPy."""
import numpy as np
import pytest

import refs


@pytest.mark.parametrize("dt", ["f32", "bf16"])  # f16: as bf16, another cold build
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm(ctx, rng, dt, affine):
    m, n, eps = 5, 33, 1e-5
    x, xv = refs.rand(rng, (m, n), dt, -2, 2)
    w, wv = refs.rand(rng, (n,), dt, 0.5, 1.5) if affine else (None, None)
    b, bv = refs.rand(rng, (n,), dt) if affine else (None, None)
    y, mean, rstd = ctx.layernorm_forward(x, w, b, eps)
    assert y.dtype == x.dtype and mean.dtype == np.float32 and mean.shape == (m,)
    want_y, want_mean, want_rstd = refs.layernorm_forward(xv, wv, bv, eps)
    refs.close(mean, want_mean, "f32", atol=1e-6)
    refs.close(rstd, want_rstd, "f32", rtol=1e-5)
    refs.close(y, want_y, dt, atol=1e-5)

    dy, dyv = refs.rand(rng, (m, n), dt)
    dx, dw, db = ctx.layernorm_backward(dy, x, w, mean, rstd)
    # the reference starts from the device's statistics, as the library's backward does
    want_dx, want_dw, want_db = refs.layernorm_backward(dyv, xv, wv, refs.load(mean),
                                                        refs.load(rstd))
    scale = np.abs(dyv).max() * refs.load(rstd).max()
    refs.close(dx, want_dx, dt, atol=1e-5 * scale * n + (0 if dt == "f32" else refs.RTOL[dt] * scale))
    refs.close(dw, want_dw, dt, atol=1e-5 * m * 4)
    refs.close(db, want_db, dt, atol=1e-5 * m)


def test_layernorm_options(ctx, rng):
    x, xv = refs.rand(rng, (4, 16), "f32")
    # no statistics asked for; in place; the gradients one at a time
    y, mean, rstd = ctx.layernorm_forward(x.copy(), eps=1e-3, mean=False, rstd=False)
    assert mean is None and rstd is None
    refs.close(y, refs.layernorm_forward(xv, None, None, 1e-3)[0], "f32", atol=1e-5)
    xi = x.copy()
    ctx.layernorm_forward(xi, out=xi, mean=False, rstd=False)
    refs.close(xi, refs.layernorm_forward(xv, None, None, 1e-5)[0], "f32", atol=1e-5)
    _, mean, rstd = ctx.layernorm_forward(x)
    dy, dyv = refs.rand(rng, (4, 16), "f32")
    dx, dw, db = ctx.layernorm_backward(dy, x, None, mean, rstd, dweight=False, dbias=False)
    assert dw is None and db is None
    refs.close(dx, refs.layernorm_backward(dyv, xv, None, refs.load(mean), refs.load(rstd))[0],
               "f32", atol=1e-5)
