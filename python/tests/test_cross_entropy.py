"""cross_entropy and linear_cross_entropy with their options, against float64 NumPy."""
import numpy as np
import pytest

import clkit
import refs

OPTIONS = [
    dict(),
    dict(reduction="sum"),
    dict(reduction="none", label_smoothing=0.1),
    dict(softcap=3.0, z_loss_scale=1e-2),
    dict(reduction="none", softcap=2.0, label_smoothing=0.2, z_loss_scale=0.5, ignore_index=3),
]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o) or "defaults")
@pytest.mark.parametrize("tdt", [np.int32, np.int64])
def test_cross_entropy(ctx, rng, opts, tdt):
    t, v = 6, 45
    z, zv = refs.rand(rng, (t, v), "f32", -3, 3)
    targets = rng.integers(0, v, size=t).astype(tdt)
    targets[1] = opts.get("ignore_index", -100)  # one ignored token
    r = ctx.cross_entropy(z, targets, dlogits=True, z_loss=True, **opts)
    loss, zl, g = refs.cross_entropy(zv, targets, **opts)
    assert r.loss.shape == ((t,) if opts.get("reduction") == "none" else (1,))
    refs.close(r.loss, loss, "f32", atol=1e-5)
    refs.close(r.z_loss, zl, "f32", atol=1e-5)
    refs.close(r.dlogits, g, "f32", atol=1e-6)


@pytest.mark.parametrize("dt", ["f16"])
def test_cross_entropy_half(ctx, rng, dt):
    z, zv = refs.rand(rng, (5, 70), dt, -3, 3)
    targets = rng.integers(0, 70, size=5)
    r = ctx.cross_entropy(z, targets, reduction="sum", dlogits=True)
    loss, _, g = refs.cross_entropy(zv, targets, reduction="sum")
    assert r.z_loss is None and r.dlogits.dtype == z.dtype
    refs.close(r.loss, loss, "f32", atol=1e-5)
    refs.close(r.dlogits, g, dt, atol=1e-4)


def test_cross_entropy_in_place_gradient(ctx, rng):
    z, zv = refs.rand(rng, (4, 20), "f32")
    targets = np.array([0, 5, 19, 7], np.int64)
    r = ctx.cross_entropy(z, targets, dlogits=z)  # the gradient overwrites the logits
    loss, _, g = refs.cross_entropy(zv, targets)
    refs.close(r.loss, loss, "f32", atol=1e-6)
    refs.close(z, g, "f32", atol=1e-7)
    # the options struct, as clkit_cross_entropy_defaults gives it
    o = clkit.cross_entropy_defaults()
    assert (o.ignore_index, o.reduction, o.label_smoothing, o.softcap, o.z_loss_scale) == \
        (-100, 0, 0.0, 0.0, 0.0)
    o.reduction = 1
    z2, z2v = refs.rand(rng, (4, 20), "f32")
    refs.close(ctx.cross_entropy(z2, targets, options=o).loss,
               refs.cross_entropy(z2v, targets, reduction="sum")[0], "f32", atol=1e-5)


@pytest.mark.parametrize("dt", ["f32"])
@pytest.mark.parametrize("opts", [dict(), dict(reduction="none", z_loss_scale=0.1,
                                               label_smoothing=0.1)],
                         ids=["mean", "none-z-smooth"])
def test_linear_cross_entropy(ctx, rng, dt, opts):
    t, d, v = 7, 16, 50
    x, xv = refs.rand(rng, (t, d), dt)
    w, wv = refs.rand(rng, (v, d), dt)
    b, bv = refs.rand(rng, (v,), dt)
    targets = rng.integers(0, v, size=t).astype(np.int32)
    targets[2] = -100
    r = ctx.linear_cross_entropy(x, w, targets, b, dx=True, dweight=True, dbias=True,
                                 z_loss=True, **opts)
    z = xv @ wv.T + bv
    loss, zl, g = refs.cross_entropy(z, targets, **opts)
    # f32 logits: rounding scales with sum |x w|, then through the loss
    atol = 1e-4 if dt == "f32" else 2e-2
    refs.close(r.loss, loss, "f32", atol=atol, rtol=1e-4)
    refs.close(r.z_loss, zl, "f32", atol=atol, rtol=1e-4)
    gs = 1e-5 if dt == "f32" else 2e-2 * np.abs(g).max()
    refs.close(r.dx, g @ wv, dt, atol=gs * d)
    refs.close(r.dweight, g.T @ xv, dt, atol=gs * d)
    refs.close(r.dbias, g.sum(axis=0), dt, atol=gs * 4)


def test_linear_cross_entropy_forward_only(ctx, rng):
    x, xv = refs.rand(rng, (3, 16), "f32")
    w, wv = refs.rand(rng, (20, 16), "f32")
    targets = np.array([1, 2, 3], np.int64)
    r = ctx.linear_cross_entropy(x, w, targets)
    assert r.dx is None and r.dweight is None and r.dbias is None and r.z_loss is None
    refs.close(r.loss, refs.cross_entropy(xv @ wv.T, targets)[0], "f32", atol=1e-5)
