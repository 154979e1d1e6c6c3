"""NumPy references in float64 for every op, and test helpers (quantisation, tolerances)."""
import numpy as np

import clkit

# Relative error of one rounding to the dtype (half an ulp), with headroom for f32 arithmetic.
RTOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}
NP = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def store(v, dt):
    """float64 values -> an array of dtype dt ("f32", "f16", "bf16": uint16 bit patterns)."""
    if dt == "bf16":
        return clkit.to_bf16(np.asarray(v, np.float64).astype(np.float32))
    return np.asarray(v).astype(NP[dt])


def load(a):
    """A clkit array (bf16 as uint16) as float64."""
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return clkit.from_bf16(a).astype(np.float64)
    return a.astype(np.float64)


def rand(rng, shape, dt, lo=-1.0, hi=1.0):
    """(array of dtype dt, its exact float64 values)."""
    a = store(rng.uniform(lo, hi, size=shape), dt)
    return a, load(a)


def close(got, want, dt, atol=0.0, rtol=None, what=""):
    """got (a clkit array) against want (float64), |got - want| <= atol + rtol |want|."""
    got = load(got)
    rtol = RTOL[dt] if rtol is None else rtol
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


# ---- references ----


def softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def rgb_to_gray(rgb):
    return 0.2989 * rgb[0] + 0.5870 * rgb[1] + 0.1140 * rgb[2]


def swizzle2d_index(i, j, size_i, size_j, size_g):
    """Triton's tl.swizzle2d."""
    ij = i * size_j + j
    size_gj = size_g * size_j
    group_id = ij // size_gj
    off_i = group_id * size_g
    size_g = min(size_i - off_i, size_g)
    ij = ij % size_gj
    return off_i + ij % size_g, ij // size_g


def swizzle2d(x, group):
    out = np.zeros_like(x)
    m, n = x.shape
    for i in range(m):
        for j in range(n):
            ni, nj = swizzle2d_index(i, j, m, n, group)
            out[ni, nj] = x[i, j]
    return out


_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32_10(q, seed):
    """Philox4x32-10 of counters {lo(q), hi(q), 0, 0} and key {lo(seed), hi(seed)}, for a
    uint64 array q: four uint64 arrays of 32-bit words."""
    q = np.asarray(q, np.uint64)
    c0, c1 = q & _MASK, q >> np.uint64(32)
    c2 = c3 = np.zeros_like(q)
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for _ in range(10):
        p0 = np.uint64(_M0) * c0
        p1 = np.uint64(_M1) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & _MASK,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & _MASK)
        k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def dropout(x, p, seed):
    """clkit_dropout's output for x (float64, row-major order is the element index)."""
    n = x.size
    i = np.arange(n, dtype=np.uint64)
    words = philox4x32_10(i // np.uint64(4), seed)
    r = np.choose((i % np.uint64(4)).astype(np.int64), words)
    u = (r >> np.uint64(8)).astype(np.float64) * 2.0 ** -24
    p32 = float(np.float32(p))
    scale = np.float32(1) / (np.float32(1) - np.float32(p32)) if p32 < 1 else np.float32(0)
    y = (x.ravel().astype(np.float32) * scale).astype(np.float64)
    return np.where(u < p32, 0.0, y).reshape(x.shape)


def matmul(a, b, c=None, alpha=1.0, beta=0.0, act="none", slope=0.01):
    r = alpha * np.matmul(a, b)
    if beta != 0:
        r = r + beta * c
    if act == "relu":
        r = np.maximum(r, 0)
    elif act == "leaky_relu":
        r = np.where(r >= 0, r, slope * r)
    return r


def layernorm_forward(x, w, b, eps):
    mean = x.mean(axis=1)
    var = ((x - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1 / np.sqrt(var + eps)
    y = (x - mean[:, None]) * rstd[:, None]
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y, mean, rstd


def layernorm_backward(dy, x, w, mean, rstd):
    xhat = (x - mean[:, None]) * rstd[:, None]
    wdy = dy * (w if w is not None else 1.0)
    n = x.shape[1]
    c1 = (xhat * wdy).sum(axis=1, keepdims=True) / n
    c2 = wdy.sum(axis=1, keepdims=True) / n
    dx = (wdy - (xhat * c1 + c2)) * rstd[:, None]
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def cross_entropy(z, targets, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  softcap=0.0, z_loss_scale=0.0):
    """(loss, z_loss, dlogits) as clkit_cross_entropy defines them (tests/ref/cross_entropy.c)."""
    t, v = z.shape
    eps, zs, cap = label_smoothing, z_loss_scale, softcap
    c = cap * np.tanh(z / cap) if cap > 0 else z
    keep = targets != ignore_index
    count = int(keep.sum())
    scale = (1.0 / count if count else 0.0) if reduction == "mean" else 1.0
    m = c.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(c - m).sum(axis=1, keepdims=True)))[:, 0]
    tgt = np.where(keep, targets, 0)
    zl = zs * lse ** 2 if zs > 0 else np.zeros(t)
    loss = lse - (1 - eps) * c[np.arange(t), tgt] - (eps * c.sum(axis=1) / v if eps > 0 else 0) + zl
    loss, zl = np.where(keep, loss, 0.0), np.where(keep, zl, 0.0)
    onehot = np.zeros_like(c)
    onehot[np.arange(t), tgt] = 1
    tt = c / cap if cap > 0 else 0
    g = scale * (np.exp(c - lse[:, None]) * (1 + 2 * zs * lse[:, None]) - (1 - eps) * onehot
                 - eps / v) * (1 - tt * tt)
    g = np.where(keep[:, None], g, 0.0)
    if reduction != "none":
        loss, zl = np.array([loss.sum() * scale]), np.array([zl.sum() * scale])
    return loss, zl, g


def attention_forward(q, k, v, causal=False, scale=0.0):
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    scale = scale or 1 / np.sqrt(d)
    rep = hq // hkv
    kk, vv = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = scale * q @ kk.transpose(0, 1, 3, 2)
    if causal:  # True / 1: top-left; "bottom_right" / 2: the last query sees every key
        shift = lk - lq if causal in ("bottom_right", 2) else 0
        s = np.where(np.arange(lk)[None, :] <= np.arange(lq)[:, None] + shift, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(axis=-1, keepdims=True)))[..., 0]
    p = e / e.sum(axis=-1, keepdims=True)
    return p @ vv, lse, p


def attention_backward(q, k, v, o, dout, causal=False, scale=0.0):
    b, hq, lq, d = q.shape
    hkv = k.shape[1]
    scale = scale or 1 / np.sqrt(d)
    rep = hq // hkv
    kk, vv = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    _, _, p = attention_forward(q, k, v, causal, scale)
    dv = p.transpose(0, 1, 3, 2) @ dout
    dp = dout @ vv.transpose(0, 1, 3, 2)
    delta = (dout * o).sum(axis=-1, keepdims=True)
    ds = p * (dp - delta)
    dq = scale * ds @ kk
    dk = scale * ds.transpose(0, 1, 3, 2) @ q
    fold = lambda g: g.reshape(b, hkv, rep, *g.shape[2:]).sum(axis=2)
    return dq, fold(dk), fold(dv)
