"""matmul with its options, and tune_matmul, against float64 NumPy."""
import numpy as np
import pytest

import clkit
import refs


def mm_close(got, want, a, b, dt, out_dt="f32", alpha=1.0, beta=0.0, c=None):
    # error of K-term f32 sums scales with sum |a||b|; the output's rounding with |want|
    mag = abs(alpha) * np.matmul(np.abs(a), np.abs(b))
    if beta:
        mag = mag + abs(beta) * np.abs(c)
    tol = 1e-5 * mag + refs.RTOL[out_dt] * np.abs(want) + 1e-6
    err = np.abs(refs.load(got) - want)
    i = np.unravel_index(np.argmax(err - tol), err.shape)
    assert np.all(err <= tol), "error %g at %s, tolerance %g" % (err[i], i, tol[i])


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_matmul(ctx, rng, dt):
    a, av = refs.rand(rng, (9, 13), dt)
    b, bv = refs.rand(rng, (13, 6), dt)
    c = ctx.matmul(a, b)
    assert c.dtype == np.float32 and c.shape == (9, 6)
    mm_close(c, av @ bv, av, bv, dt)


@pytest.mark.parametrize("out_dt", ["f16", "bf16"])
def test_matmul_half_output(ctx, rng, out_dt):
    a, av = refs.rand(rng, (8, 16), out_dt)
    b, bv = refs.rand(rng, (16, 8), out_dt)
    c = ctx.matmul(a, b, out_dtype=out_dt)
    assert c.dtype == refs.NP[out_dt]
    mm_close(c, av @ bv, av, bv, out_dt, out_dt)


def test_matmul_options(ctx, rng):
    a, av = refs.rand(rng, (7, 5), "f32")
    b, bv = refs.rand(rng, (5, 11), "f32")
    c0, cv = refs.rand(rng, (7, 11), "f32")
    for act in ["none", "relu", "leaky_relu"]:
        c = c0.copy()
        ctx.matmul(a, b, c, alpha=0.5, beta=-2.0, activation=act, leaky_slope=0.1)
        mm_close(c, refs.matmul(av, bv, cv, 0.5, -2.0, act, 0.1), av, bv, "f32",
                 alpha=0.5, beta=-2.0, c=cv)
    # beta = 0 never reads C: NaN there does not reach the result
    c = np.full((7, 11), np.nan, np.float32)
    ctx.matmul(a, b, c)
    mm_close(c, av @ bv, av, bv, "f32")


def test_matmul_options_struct(ctx, rng):
    o = clkit.matmul_defaults()
    assert (o.alpha, o.beta, o.activation, o.provider, o.config) == (1.0, 0.0, 0, 0, None)
    assert abs(o.leaky_slope - 0.01) < 1e-7
    o.alpha = 3.0
    a, av = refs.rand(rng, (4, 4), "f32")
    mm_close(ctx.matmul(a, a, options=o), 3 * av @ av, av, av, "f32", alpha=3.0)


def test_matmul_views_and_batch(ctx, rng):
    a, av = refs.rand(rng, (6, 10), "f32")
    b, bv = refs.rand(rng, (8, 6), "f32")
    # A^T (10, 6) @ B^T (6, 8): transposed views, no copies
    mm_close(ctx.matmul(a.T, b.T), av.T @ bv.T, av.T, bv.T, "f32")
    ab, abv = refs.rand(rng, (3, 4, 5), "f32")
    bb, bbv = refs.rand(rng, (5, 7), "f32")  # 2-D B broadcasts over the batch
    c = ctx.matmul(ab, bb)
    assert c.shape == (3, 4, 7)
    mm_close(c, abv @ bbv, abv, bbv, "f32")
    bz = np.broadcast_to(bb, (3, 5, 7))  # batch stride 0
    mm_close(ctx.matmul(ab, bz), abv @ bbv, abv, bbv, "f32")


@pytest.mark.parametrize("provider,config", [("clkit", "KERNEL=0,TILE=16"),
                                             ("clkit", "KERNEL=1,TILE=8"),
                                             ("clblast", None)])
def test_matmul_provider_config(ctx, rng, provider, config):
    a, av = refs.rand(rng, (16, 8), "f32")
    b, bv = refs.rand(rng, (8, 16), "f32")
    c = ctx.matmul(a, b, provider=provider, config=config, exact_f32=True)
    mm_close(c, av @ bv, av, bv, "f32")


def test_matmul_k0(ctx):
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)
    c = np.full((3, 4), 2.0, np.float32)
    ctx.matmul(a, b, c, beta=0.5)
    np.testing.assert_array_equal(c, 1.0)


def test_tune_matmul(tune_ctx, rng, tmp_path):
    ctx = tune_ctx
    a, av = refs.rand(rng, (12, 12), "f32")
    b, bv = refs.rand(rng, (12, 12), "f32")
    c = np.full((12, 12), 5.0, np.float32)
    steps = []
    ctx.tune_matmul(a, b, c, budget_s=1e-3, progress=steps.append, provider="clkit")
    assert steps and steps[0].done == 1 and steps[0].total >= 1 and steps[0].config
    assert steps[-1].best_ms > 0
    assert np.all(c == 5.0), "the tuner must not modify C"
    entries = ctx.tuned_list()
    assert any(e.op == "matmul" and e.shape.replace(" ", "").startswith("[12,12,12")
               for e in entries), entries
    # export and import round trip
    path = tmp_path / "tuned.json"
    ctx.tuned_export(path)
    assert path.stat().st_size > 0
    ctx.tuned_import(path)
    assert len(ctx.tuned_list()) == len(entries)
    # a tuned shape serves matmul
    mm_close(ctx.matmul(a, b), av @ bv, av, bv, "f32")


def test_tune_progress_exception_propagates(tune_ctx, rng):
    a, _ = refs.rand(rng, (12, 12), "f32")

    def boom(step):
        raise KeyError("from progress")

    with pytest.raises(KeyError):
        tune_ctx.tune_matmul(a, a, budget_s=1e-3, progress=boom)
