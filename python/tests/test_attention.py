"""attention_forward / attention_backward and their tuners against float64 NumPy."""
import numpy as np
import pytest

import clkit
import refs


def qkv(rng, dt, b=1, hq=2, hkv=1, lq=5, lk=7, d=16):
    q, qv = refs.rand(rng, (b, hq, lq, d), dt)
    k, kv = refs.rand(rng, (b, hkv, lk, d), dt)
    v, vv = refs.rand(rng, (b, hkv, lk, d), dt)
    return (q, k, v), (qv, kv, vv)


# f32 only: each dtype builds its own forward and backward programs (half a minute cold on
# PoCL); the f16/bf16 marshalling is covered by the other ops
@pytest.mark.parametrize("dt", ["f32"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention(ctx, rng, dt, causal):
    (q, k, v), (qv, kv, vv) = qkv(rng, dt)
    o, lse = ctx.attention_forward(q, k, v, causal=causal)
    want_o, want_lse, _ = refs.attention_forward(qv, kv, vv, causal)
    assert o.dtype == q.dtype and lse.shape == q.shape[:3] and lse.dtype == np.float32
    refs.close(o, want_o, dt, atol=1e-5)
    refs.close(lse, want_lse, "f32", atol=1e-5)

    dout, doutv = refs.rand(rng, q.shape, dt)
    dq, dk, dv = ctx.attention_backward(q, k, v, o, dout, lse, causal=causal)
    # the reference takes delta = rowsum(dout * o) from the o the device stored
    want = refs.attention_backward(qv, kv, vv, refs.load(o), doutv, causal)
    atol = 1e-5 if dt == "f32" else 4e-3
    for name, got, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        assert got.shape == w.shape
        refs.close(got, w, dt, atol=atol, what=name)


# Decoding shapes (a few queries, many keys: the keys split over work-groups) with
# grouped-query heads, bottom-right causal and none
@pytest.mark.parametrize("causal,lq,lk", [("bottom_right", 3, 300), (clkit.CAUSAL_NONE, 1, 513)])
def test_attention_decoding(ctx, rng, causal, lq, lk):
    (q, k, v), (qv, kv, vv) = qkv(rng, "f32", b=1, hq=4, hkv=2, lq=lq, lk=lk, d=32)
    o, lse = ctx.attention_forward(q, k, v, causal=causal)
    want_o, want_lse, _ = refs.attention_forward(qv, kv, vv, causal)
    refs.close(o, want_o, "f32", atol=1e-5)
    refs.close(lse, want_lse, "f32", atol=1e-5)


def test_attention_bad_causal(ctx, rng):
    (q, k, v), _ = qkv(rng, "f32")
    with pytest.raises(ValueError):
        ctx.attention_forward(q, k, v, causal="diagonal")
    with pytest.raises(clkit.InvalidValueError):
        ctx.attention_forward(q, k, v, causal=3)


def test_attention_scale_views_no_lse(ctx, rng):
    (q, k, v), (qv, kv, vv) = qkv(rng, "f32", b=2, hq=2, hkv=2, lq=4, lk=4, d=16)
    # (B, L, H, D) memory seen as (B, H, L, D): strided views as a fused QKV projection gives
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    o, lse = ctx.attention_forward(qt, k, v, scale=0.25, lse=False)
    assert lse is None
    refs.close(o, refs.attention_forward(qv, kv, vv, False, 0.25)[0], "f32", atol=1e-5)
    opt = clkit.attention_defaults()
    assert (opt.causal, opt.scale) == (0, 0.0)


def test_tune_attention(tune_ctx, rng):
    ctx = tune_ctx
    (q, k, v), (qv, kv, vv) = qkv(rng, "f32", lq=8, lk=8)
    steps = []
    o, lse = ctx.tune_attention_forward(q, k, v, causal=True, budget_s=1e-3,
                                        progress=steps.append)
    assert steps and steps[0].done == 1
    want_o, want_lse, _ = refs.attention_forward(qv, kv, vv, True)
    refs.close(o, want_o, "f32", atol=1e-5)  # the tuner writes the call's outputs
    dout, doutv = refs.rand(rng, q.shape, "f32")
    dq, dk, dv = ctx.tune_attention_backward(q, k, v, o, dout, lse, causal=True, budget_s=1e-3)
    want = refs.attention_backward(qv, kv, vv, refs.load(o), doutv, True)
    for got, w in zip((dq, dk, dv), want):
        refs.close(got, w, "f32", atol=1e-5)
    ops = {e.op for e in ctx.tuned_list()}
    assert any(op.startswith("attention") for op in ops), ops
