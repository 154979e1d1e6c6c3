"""Bad input raises the clkit.Error subclass of its status, with the status name and
clkit_last_error; nothing is written."""
import pickle

import numpy as np
import pytest

import clkit

f32 = np.float32


def z(*shape, dt=f32):
    return np.zeros(shape, dt)


def raises(cls, fn, *args, **kw):
    with pytest.raises(cls) as info:
        fn(*args, **kw)
    e = info.value
    assert isinstance(e, clkit.Error)
    assert e.status == cls.status and e.status_name == clkit.STATUS_NAMES[cls.status]
    assert e.status_name in str(e) and e.status_text in str(e)
    return e


def test_error_carries_status_and_detail(ctx):
    e = raises(clkit.ShapeError, ctx.add, z(2, 3), z(3, 2))
    assert e.status_name == "CLKIT_ERR_SHAPE"
    assert e.status_text == "bad or mismatched shape" == clkit.status_string(e.status)
    assert e.function == "clkit_add"
    assert "(2,3)" in e.detail and "(3,2)" in e.detail
    assert e.detail == ctx.last_error
    assert str(e).startswith("clkit_add: CLKIT_ERR_SHAPE (bad or mismatched shape): ")
    assert isinstance(e, ValueError)  # also the built-in it means
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is clkit.ShapeError and str(e2) == str(e)


def test_nothing_written_on_error(ctx):
    out = np.full((2, 3), 9.0, f32)
    with pytest.raises(clkit.Error):
        ctx.add(z(2, 3), z(2, 3, dt=np.float16), out=out)
    assert np.all(out == 9.0)


BAD = [
    # (expected error, op, args, kwargs)
    (clkit.DtypeError, "add", (z(2, 3), z(2, 3, dt=np.float16)), {}),
    (clkit.DtypeError, "add", (z(2, 3, dt=np.float64), z(2, 3, dt=np.float64)), {}),
    (clkit.DtypeError, "softmax", (z(2, 3, dt=np.int32),), {}),
    (clkit.NdimError, "add", (z(1, 1, 1, 1, 2), z(1, 1, 1, 1, 2)), {}),
    (clkit.NdimError, "softmax", (z(2, 3, 4),), {}),
    (clkit.ShapeError, "softmax", (z(2, 0),), {}),
    (clkit.InvalidValueError, "dropout", (z(4), 1.5, 0), {}),
    (clkit.InvalidValueError, "dropout", (z(4), float("nan"), 0), {}),
    (clkit.InvalidValueError, "swizzle2d", (z(4, 4), 0), {}),
    (clkit.ShapeError, "rgb_to_gray", (z(4, 5, 6, dt=np.uint8),), {}),
    (clkit.DtypeError, "rgb_to_gray", (z(3, 2, 2, dt=np.float16),), {}),
    (clkit.ShapeError, "matmul", (z(2, 3), z(4, 5)), {}),
    (clkit.InvalidValueError, "matmul", (z(2, 2), z(2, 2)), dict(allow_tf32=True, exact_f32=True)),
    (clkit.UnsupportedError, "matmul", (z(8, 8), z(8, 8)),
     dict(provider="clblast", activation="relu")),
    (clkit.InvalidValueError, "matmul", (z(2, 2), z(2, 2)), dict(activation="gelu")),
    (clkit.InvalidValueError, "layernorm_forward", (z(2, 4),), dict(eps=0.0)),
    (clkit.ShapeError, "layernorm_forward", (z(2, 4), z(5)), {}),
    (clkit.InvalidValueError, "cross_entropy", (z(2, 4), np.array([0, 4], np.int64)), {}),
    (clkit.DtypeError, "cross_entropy", (z(2, 4), z(2)), {}),
    (clkit.InvalidValueError, "cross_entropy", (z(2, 4), np.array([0, 1])), dict(reduction="avg")),
    (clkit.ShapeError, "linear_cross_entropy", (z(2, 4), z(5, 3), np.array([0, 1])), {}),
    (clkit.UnsupportedError, "attention_forward", (z(1, 1, 2, 24), z(1, 1, 2, 24), z(1, 1, 2, 24)), {}),
    (clkit.ShapeError, "attention_forward", (z(1, 3, 2, 16), z(1, 2, 2, 16), z(1, 2, 2, 16)), {}),
    (clkit.InvalidValueError, "attention_forward", (z(1, 1, 2, 16),) * 3, dict(scale=-1.0)),
]


@pytest.mark.parametrize("cls,op,args,kw", BAD,
                         ids=["%s-%s-%d" % (b[1], b[0].__name__, i) for i, b in enumerate(BAD)])
def test_bad_input(ctx, cls, op, args, kw):
    raises(cls, getattr(ctx, op), *args, **kw)


def test_overlap_and_stride(ctx):
    a = z(12)
    raises(clkit.OverlapError, ctx.swizzle2d, a[:6].reshape(2, 3), 1, out=a[:6].reshape(2, 3))
    # a zero-stride output writes one element twice
    out = np.lib.stride_tricks.as_strided(z(3), shape=(2, 3), strides=(0, 4))
    raises(clkit.StrideError, ctx.add, z(2, 3), z(2, 3), out=out)
    raises(clkit.OverlapError, ctx.matmul, a[:4].reshape(2, 2), z(2, 2), a[2:6].reshape(2, 2))


def test_context_errors(ctx):
    raises(clkit.InvalidValueError, ctx.fast_paths, "no_such_op")
    with pytest.raises(clkit.NoDeviceError) as info:
        clkit.Context(device="no-such-device-anywhere")
    assert "no-such-device-anywhere" in str(info.value)
    with pytest.raises(clkit.FileIOError) as info:
        ctx.tuned_import("/nonexistent/tuned.json")
    assert isinstance(info.value, OSError) and "CLKIT_ERR_IO" in str(info.value)
    with clkit.Context() as c:
        pass
    with pytest.raises(ValueError, match="released"):
        c.add(z(2), z(2))
    c.release()  # idempotent
    with pytest.raises(clkit.DtypeError):
        clkit.clkit_dtype(np.complex64)
    with pytest.raises(ValueError):
        clkit.Context(queue=1, device="cpu")


def test_profiling_needs_profiling_queue():
    with clkit.Context(profiling=False) as c:
        with pytest.raises(clkit.Error):
            c.profile_begin()
            c.add(z(4), z(4))
            c.profile_end()
