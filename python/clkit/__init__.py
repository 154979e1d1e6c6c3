"""clkit: Python bindings (ctypes) for libclkit, portable OpenCL kernels of the Triton
tutorials.

    import numpy as np, clkit
    with clkit.Context() as ctx:              # $CLKIT_DEVICE, else first GPU, else first device
        y = ctx.softmax(np.random.rand(4, 100).astype(np.float32))

Dtypes: NumPy float32, float16, uint16 (bf16 bit patterns: clkit.to_bf16 / clkit.from_bf16),
uint8, int32, int64. Failures raise clkit.Error subclasses (clkit.ShapeError, ...) carrying the
status name and clkit_last_error. The library is found through $CLKIT_LIBRARY,
ctypes.util.find_library("clkit"), the loader's path, then build/ of a source checkout.
"""
from . import _lib
from ._arrays import DeviceArray, clkit_dtype, from_bf16, numpy_dtype, to_bf16
from ._lib import (AttentionOptions, BenchmarkOptions, CrossEntropyOptions, DeviceProps,
                   LibraryNotFoundError, MatmulOptions, Options, Tensor, TuneOptions)
from .context import (AttentionGrads, AttentionResult, BenchmarkResult, Context,
                      CrossEntropyResult, Device, LayerNormGrads, LayerNormResult,
                      LinearCrossEntropyResult, TunedEntry, TuneStep)
from .errors import (BuildError, DtypeError, Error, FileIOError, InvalidValueError, NdimError,
                     NoDeviceError, NullArgumentError, OpenCLError, OutOfBoundsError,
                     OutOfMemoryError, OverlapError, ShapeError, SizeOverflowError, StrideError,
                     UnsupportedError, error_for, status_string)

__version__ = _lib.VERSION

F32, F16, BF16, U8, I32, I64 = (_lib.CLKIT_F32, _lib.CLKIT_F16, _lib.CLKIT_BF16, _lib.CLKIT_U8,
                                _lib.CLKIT_I32, _lib.CLKIT_I64)
STATUS_NAMES = _lib.STATUS_NAMES
# clkit_attention_options.causal (CLKIT_CAUSAL_*): where the mask's diagonal sits when Lq != Lk
CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = 0, 1, 2


_log_callback = None  # the ctypes callback clkit holds, kept alive here


def set_log_callback(fn):
    """clkit_set_log_callback: the library's diagnostics go to fn(level, message) instead of
    stderr, level one of "error", "warn", "info", "debug" (CLKIT_LOG decides which reach it,
    default warn and above); None sends them to stderr again. Process-wide, for every
    context and thread; fn runs on the thread that logs, and an exception in it is reported
    as unraisable (sys.unraisablehook) rather than raised into the library."""
    global _log_callback
    lib = _lib.load()
    if fn is None:
        lib.clkit_set_log_callback(_lib.LOG_FN(), None)
        _log_callback = None
        return

    def deliver(_user, level, message):
        fn(_lib.LOG_LEVEL_NAMES.get(level, str(level)), (message or b"").decode(errors="replace"))

    callback = _lib.LOG_FN(deliver)
    lib.clkit_set_log_callback(callback, None)
    _log_callback = callback


def f32_to_f16(x):
    """clkit_f32_to_f16: the f16 bit pattern (an int) of float x, rounded to nearest even."""
    return int(_lib.load().clkit_f32_to_f16(x))


def f16_to_f32(h):
    """clkit_f16_to_f32: the float an f16 bit pattern holds (exact)."""
    return float(_lib.load().clkit_f16_to_f32(h))


def f32_to_bf16(x):
    """clkit_f32_to_bf16: the bf16 bit pattern (an int) of float x, rounded to nearest even."""
    return int(_lib.load().clkit_f32_to_bf16(x))


def bf16_to_f32(b):
    """clkit_bf16_to_f32: the float a bf16 bit pattern holds (exact)."""
    return float(_lib.load().clkit_bf16_to_f32(b))


def library():
    """The loaded libclkit (ctypes.CDLL, every prototype of clkit.h set), for direct calls."""
    return _lib.load()


def library_path():
    """Where libclkit was loaded from."""
    return _lib.library_path()


def library_version():
    """clkit_version(): the version of the libclkit loaded ("0.3.0")."""
    return _lib.load().clkit_version().decode()


def dtype_name(dtype):
    """clkit_dtype_name ("f32", "bf16", ...)."""
    return _lib.load().clkit_dtype_name(clkit_dtype(dtype)).decode()


def dtype_size(dtype):
    """clkit_dtype_size in bytes."""
    return int(_lib.load().clkit_dtype_size(clkit_dtype(dtype)))


def tensor(buffer, dtype, shape, strides=None, offset=0):
    """A clkit.Tensor descriptor over a cl_mem you own (an int handle or a pyopencl Buffer);
    strides in elements (default row-major), offset in bytes."""
    t = Tensor()
    t.buffer = buffer if isinstance(buffer, int) or buffer is None else buffer.int_ptr
    t.offset = int(offset)
    t.dtype = clkit_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if len(shape) > 4:
        raise NdimError(_lib.CLKIT_ERR_NDIM, "%d dims; clkit tensors have at most 4" % len(shape))
    if strides is None:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.insert(0, acc)
            acc *= s
    t.ndim = len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        t.shape[i], t.strides[i] = n, int(s)
    return t


def matmul_defaults():
    """clkit_matmul_defaults() as a clkit.MatmulOptions."""
    return _lib.load().clkit_matmul_defaults()


def cross_entropy_defaults():
    """clkit_cross_entropy_defaults() as a clkit.CrossEntropyOptions."""
    return _lib.load().clkit_cross_entropy_defaults()


def attention_defaults():
    """clkit_attention_defaults() as a clkit.AttentionOptions."""
    return _lib.load().clkit_attention_defaults()


__all__ = [n for n in dir() if not n.startswith("_")]
