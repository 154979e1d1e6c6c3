"""The array kinds: NumPy views, clkit.DeviceArray, raw clkit.Tensor descriptors over buffers
the caller owns, and pyopencl arrays (skipped without pyopencl)."""
import ctypes

import numpy as np
import pytest

import clkit
from clkit import _cl
import refs


def test_bf16_helpers():
    x = np.array([1.0, -2.5, 3.14159, 1e-3, np.inf, -np.inf, 65504.0, 1.00390625], np.float32)
    b = clkit.to_bf16(x)
    assert b.dtype == np.uint16
    np.testing.assert_array_equal(clkit.from_bf16(b)[:3], [1.0, -2.5, 3.140625])
    assert clkit.from_bf16(b)[7] == 1.0  # a tie rounds to even
    assert np.isnan(clkit.from_bf16(clkit.to_bf16(np.array([np.nan], np.float32))))[0]
    assert clkit.clkit_dtype(np.uint16) == clkit.BF16 == clkit.clkit_dtype("bf16")
    assert clkit.dtype_name(np.float16) == "f16" and clkit.dtype_size("i64") == 8


def test_scalar_conversions_match_numpy():
    x = np.array([0.0, -0.0, 1.0, -2.5, 3.14159, 1e-3, 6e-8, 1e-6, 65504.0, 65520.0, 1e6,
                  np.inf, -np.inf, 1.00048828125, 1.00390625, 1e-40], np.float32)
    for v in x:
        with np.errstate(over="ignore"):  # 65520 and 1e6 overflow to infinity, as they should
            want = np.float16(v)
        h = clkit.f32_to_f16(float(v))
        assert h == int(want.view(np.uint16)), v  # numpy rounds to nearest even too
        assert clkit.f16_to_f32(h) == float(want)
        b = clkit.f32_to_bf16(float(v))
        assert b == int(clkit.to_bf16(np.array([v], np.float32))[0]), v
        assert clkit.bf16_to_f32(b) == float(clkit.from_bf16(np.array([b], np.uint16))[0])
    assert np.isnan(clkit.f16_to_f32(clkit.f32_to_f16(float("nan"))))
    assert np.isnan(clkit.bf16_to_f32(clkit.f32_to_bf16(float("nan"))))


def test_numpy_overlap_shares_a_buffer(ctx, rng):
    # out and x are views of one array: clkit sees one buffer, so a partial overlap fails as
    # it does in C, and nothing is written
    a, _ = refs.rand(rng, (10,), "f32")
    before = a.copy()
    with pytest.raises(clkit.OverlapError):
        ctx.softmax(a[:8].reshape(2, 4), out=a[2:].reshape(2, 4))
    np.testing.assert_array_equal(a, before)
    # disjoint halves of one array are fine
    x = a[:5].reshape(1, 5)
    ctx.softmax(x, out=a[5:].reshape(1, 5))
    refs.close(a[5:], refs.softmax(refs.load(before[:5]).reshape(1, 5))[0], "f32", atol=1e-7)


def test_numpy_unusual_layouts(ctx, rng):
    # byte-swapped and sparse views go through a dense staging copy
    x, xv = refs.rand(rng, (3, 4), "f32")
    be = x.astype(">f4")
    refs.close(ctx.add(be, be), 2 * xv, "f32")
    big = np.zeros((3, 40000), np.float32)
    sparse = big[:, ::10000]  # span far larger than the view
    ctx.copy(x, out=sparse)
    np.testing.assert_array_equal(big[:, ::10000], x)
    assert np.count_nonzero(big) == np.count_nonzero(x)
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        ctx.copy(x, out=ro)


def test_device_array(ctx, rng):
    x, xv = refs.rand(rng, (6, 5), "f32")
    y, yv = refs.rand(rng, (6, 5), "f32")
    dx, dy = ctx.to_device(x), ctx.to_device(y)
    dz = ctx.add(dx, dy)  # DeviceArray in, DeviceArray out, no transfer
    assert isinstance(dz, clkit.DeviceArray) and dz.shape == (6, 5)
    refs.close(dz.get(), xv + yv, "f32")
    c = ctx.matmul(dx.T, dy)  # a transposed view of a device buffer
    refs.close(c.get(), xv.T @ yv, "f32", atol=1e-5)
    refs.close(dx.T.get(), xv.T, "f32")  # strided get goes through the copy kernel
    s = ctx.softmax(dx, out=dx)  # in place on the device
    assert s is dx
    refs.close(dx.get(), refs.softmax(xv), "f32", atol=1e-7)
    e = ctx.empty((2, 3), "bf16")
    e.set(clkit.to_bf16(np.ones((2, 3))))
    np.testing.assert_array_equal(clkit.from_bf16(e.get()), 1.0)
    r = ctx.layernorm_forward(dx)
    assert all(isinstance(a, clkit.DeviceArray) for a in r)
    for a in (dx, dy, dz, c, e):
        a.release()
    with pytest.raises(ValueError):
        ctx.add(dx, dx)


def test_floats_into_bf16_round_not_cast(ctx, rng):
    """to_device / set with a bf16 target take float values as values (rounded to bf16 bit
    patterns), not as integers cast to uint16; bf16 bit patterns into a float array widen."""
    x = rng.standard_normal((3, 7)).astype(np.float32) * 100
    want = clkit.from_bf16(clkit.to_bf16(x))
    np.testing.assert_array_equal(clkit.from_bf16(ctx.to_device(x, "bf16").get()), want)
    np.testing.assert_array_equal(clkit.from_bf16(ctx.to_device(x.astype(np.float64), "bf16").get()), want)
    d = ctx.empty((3, 7), "bf16")
    d.set(x)
    np.testing.assert_array_equal(clkit.from_bf16(d.get()), want)
    d.T.set(x.T.copy() * 2)  # strided view: through the copy kernel
    np.testing.assert_array_equal(clkit.from_bf16(d.get()), clkit.from_bf16(clkit.to_bf16(x * 2)))
    f = ctx.to_device(clkit.to_bf16(x), "f32")
    np.testing.assert_array_equal(f.get(), want)
    for a in (d, f):
        a.release()


def test_raw_tensor(ctx, rng):
    # buffers the caller owns, described by clkit.Tensor as in C
    x, xv = refs.rand(rng, (4, 8), "f32")
    cl_ctx, queue, _ = ctx.cl_handles
    xb = _cl.create_buffer(cl_ctx, x.nbytes + 16)
    ob = _cl.create_buffer(cl_ctx, x.nbytes)
    try:
        _cl.write(queue, xb, 16, x.nbytes, x.ctypes.data)
        tx = clkit.tensor(xb, "f32", (4, 8), offset=16)
        to = clkit.tensor(ob, np.float32, (4, 8))
        assert ctx.softmax(tx, out=to) is to
        with pytest.raises(ValueError):
            ctx.softmax(tx)  # outputs cannot be allocated for raw descriptors
        ctx.finish()
        got = np.empty_like(x)
        _cl.read(queue, ob, 0, got.nbytes, got.ctypes.data)
        refs.close(got, refs.softmax(xv), "f32", atol=1e-7)
        # the struct as clkit_tensor_contiguous fills it
        shape = (ctypes.c_int64 * 2)(4, 8)
        t = clkit.library().clkit_tensor_contiguous(ob, clkit.F32, 2, shape)
        assert (t.ndim, tuple(t.shape[:2]), tuple(t.strides[:2]), t.offset) == (2, (4, 8), (8, 1), 0)
        assert t.buffer == ob
        with pytest.raises(clkit.OutOfBoundsError):
            ctx.softmax(clkit.tensor(xb, "f32", (4, 9)), out=clkit.tensor(ob, "f32", (4, 9)))
        with pytest.raises(clkit.NullArgumentError):
            ctx.softmax(clkit.tensor(None, "f32", (4, 8)), out=to)
        with pytest.raises(clkit.StrideError):  # offset not a multiple of the element size
            ctx.softmax(clkit.tensor(xb, "f32", (4, 8), offset=2), out=to)
    finally:
        _cl.release(xb)
        _cl.release(ob)


@pytest.fixture
def cl_array():
    try:
        import pyopencl.array as cla
    except Exception:
        pytest.skip("pyopencl is not installed")
    return cla


def test_pyopencl_shared_queue(ctx, rng, cl_array):
    q = ctx.pyopencl_queue()
    x, xv = refs.rand(rng, (5, 9), "f32")
    y, yv = refs.rand(rng, (5, 9), "f32")
    gx, gy = cl_array.to_device(q, x), cl_array.to_device(q, y)
    gz = ctx.add(gx, gy)
    assert isinstance(gz, cl_array.Array)
    refs.close(gz.get(), xv + yv, "f32")
    # offsets and strides of pyopencl views are honoured
    refs.close(ctx.softmax(gx[1:4]).get(), refs.softmax(xv[1:4]), "f32", atol=1e-7)
    c = ctx.matmul(gx, gy.T)  # a transposed pyopencl view: strides, no copy
    assert isinstance(c, cl_array.Array) and c.shape == (5, 5)
    refs.close(c.get(), xv @ yv.T, "f32", atol=1e-5)
    # numpy and pyopencl arguments in one call
    out = np.empty((5, 9), np.float32)
    ctx.add(gx, y, out=out)
    refs.close(out, xv + yv, "f32")


def test_pyopencl_adopted_queue(rng, cl_array):
    import pyopencl as cl

    with clkit.Context() as base:
        dev = cl.Device.from_int_ptr(base.cl_handles[2])
    pctx = cl.Context([dev])
    q = cl.CommandQueue(pctx)
    with clkit.Context(queue=q) as ctx:
        x, xv = refs.rand(rng, (3, 6), "f32")
        gx = cl_array.to_device(q, x)
        refs.close(ctx.softmax(gx).get(), refs.softmax(xv), "f32", atol=1e-7)
        # an array of a foreign queue of the same context: synchronised, still correct
        q2 = cl.CommandQueue(pctx)
        g2 = cl_array.to_device(q2, x)
        refs.close(ctx.add(g2, gx).get(), 2 * xv, "f32")
        with clkit.Context() as other:
            with pytest.raises(ValueError, match="another OpenCL context"):
                other.add(gx, gx)
