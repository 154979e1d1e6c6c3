"""Arrays: NumPy arrays, clkit.DeviceArray, pyopencl arrays and raw clkit.Tensor descriptors,
and the marshalling of one call's arguments into clkit_tensor descriptors.

NumPy arrays go to the device for the call and come back after it. Views keep their layout:
the bytes the view spans are uploaded as they are and the descriptor carries the view's
strides (negative, zero and transposed included) and offset, so the library sees the same
layout the array has. Arrays of one call whose memory overlaps share one device buffer, so
in-place calls (out=x) run in place and forbidden overlaps fail as they would in C.
"""

import numpy as np

from . import _cl, _lib
from .errors import DtypeError, NdimError

try:  # optional: pyopencl arrays are taken when pyopencl is importable
    import pyopencl as _pyopencl
    import pyopencl.array as _pyopencl_array
except Exception:  # ImportError, or a broken ICD setup inside pyopencl
    _pyopencl = None
    _pyopencl_array = None

# ---- dtypes ----

_NP_TO_CLKIT = {
    np.dtype(np.float32): _lib.CLKIT_F32,
    np.dtype(np.float16): _lib.CLKIT_F16,
    np.dtype(np.uint16): _lib.CLKIT_BF16,  # bf16 bit patterns (clkit has no u16)
    np.dtype(np.uint8): _lib.CLKIT_U8,
    np.dtype(np.int32): _lib.CLKIT_I32,
    np.dtype(np.int64): _lib.CLKIT_I64,
}
_CLKIT_TO_NP = {v: k for k, v in _NP_TO_CLKIT.items()}

_NAMES = {
    "f32": _lib.CLKIT_F32, "float32": _lib.CLKIT_F32,
    "f16": _lib.CLKIT_F16, "float16": _lib.CLKIT_F16, "half": _lib.CLKIT_F16,
    "bf16": _lib.CLKIT_BF16, "bfloat16": _lib.CLKIT_BF16,
    "u8": _lib.CLKIT_U8, "uint8": _lib.CLKIT_U8,
    "i32": _lib.CLKIT_I32, "int32": _lib.CLKIT_I32,
    "i64": _lib.CLKIT_I64, "int64": _lib.CLKIT_I64,
}


def clkit_dtype(dt):
    """The clkit dtype (CLKIT_F32 ...) of a NumPy dtype, a name ("f32", "bf16", "float16") or
    a clkit dtype value. NumPy uint16 and ml_dtypes' bfloat16 are bf16."""
    if isinstance(dt, (int, np.integer)) and not isinstance(dt, bool):
        if 0 <= int(dt) < len(_lib.DTYPE_NAMES):
            return int(dt)
        raise DtypeError(_lib.CLKIT_ERR_DTYPE, "no clkit dtype has the value %d" % dt)
    if isinstance(dt, str) and dt.lower() in _NAMES:
        return _NAMES[dt.lower()]
    try:
        d = np.dtype(dt)
    except TypeError:
        raise DtypeError(_lib.CLKIT_ERR_DTYPE, "%r is not a dtype" % (dt,)) from None
    if d.name == "bfloat16" and d.itemsize == 2:  # ml_dtypes.bfloat16, if in use
        return _lib.CLKIT_BF16
    key = d.newbyteorder("=") if d.byteorder not in "=|" else d
    if key in _NP_TO_CLKIT:
        return _NP_TO_CLKIT[key]
    raise DtypeError(_lib.CLKIT_ERR_DTYPE,
                     "NumPy dtype %s has no clkit dtype (float32, float16, uint16 as bf16, "
                     "uint8, int32, int64)" % d)


def numpy_dtype(dt):
    """The NumPy dtype that holds a clkit dtype (bf16: uint16)."""
    if isinstance(dt, np.dtype) and dt.name == "bfloat16":
        return dt
    return _CLKIT_TO_NP[clkit_dtype(dt)]


def as_held(a, held):
    """a as the NumPy dtype `held` that a clkit dtype's array holds: floats into bf16 (uint16)
    are rounded to bf16 bit patterns and bf16 bit patterns into floats are widened, not cast
    as integers; everything else as NumPy casts."""
    a = np.asarray(a)
    if held == np.uint16 and a.dtype.kind == "f":
        return to_bf16(a)
    if held.kind == "f" and a.dtype == np.uint16:
        return from_bf16(a).astype(held)
    return np.ascontiguousarray(a, dtype=held)


def to_bf16(a):
    """float array -> bf16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded.reshape(np.shape(a))


def from_bf16(b):
    """bf16 bit patterns (uint16) -> float32."""
    b = np.asarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


# ---- device arrays ----


class DeviceArray:
    """A view over a cl_mem of a Context, without pyopencl: ops that take DeviceArray inputs
    return DeviceArray outputs and stay on the device (asynchronous until ctx.finish() or
    .get()). strides are in elements, offset in bytes, as in clkit_tensor."""

    def __init__(self, ctx, mem, shape, dtype, strides=None, offset=0, base=None):
        self.ctx = ctx
        self.mem = mem
        self.shape = tuple(int(s) for s in shape)
        self.dtype = numpy_dtype(dtype)
        if strides is None:
            strides, acc = [], 1
            for s in reversed(self.shape):
                strides.insert(0, acc)
                acc *= max(s, 1)
        self.strides = tuple(int(s) for s in strides)
        self.offset = int(offset)
        self._base = base  # the array that owns mem (None: this one does)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __repr__(self):
        return "DeviceArray(shape=%s, dtype=%s, strides=%s, offset=%d)" % (
            self.shape, self.dtype, self.strides, self.offset)

    def _contiguous(self):
        acc, want = 1, []
        for s in reversed(self.shape):
            want.insert(0, acc)
            acc *= max(s, 1)
        return tuple(want) == self.strides or self.size <= 1

    def get(self):
        """Waits for the context's queue and returns the contents as a NumPy array."""
        out = np.empty(self.shape, self.dtype)
        self.ctx._check_open()
        if self.size == 0:
            return out
        if self._contiguous():
            _cl.read(self.ctx._queue, self.mem, self.offset, out.nbytes, out.ctypes.data)
            return out
        src = self.ctx.copy(self, out=out)  # strided: one copy kernel, then a dense read
        return src

    def set(self, a):
        """Copies a NumPy array (of this shape) into the view (blocking)."""
        a = np.asarray(a)
        if a.shape != self.shape:
            raise ValueError("set: shape %s into %s" % (a.shape, self.shape))
        self.ctx._check_open()
        a = as_held(a, self.dtype)
        if self._contiguous():
            _cl.write(self.ctx._queue, self.mem, self.offset, a.nbytes, a.ctypes.data)
        else:
            self.ctx.copy(a, out=self)
            self.ctx.finish()

    def transpose(self, *axes):
        """A view with permuted dimensions (no copy)."""
        if not axes:
            axes = tuple(reversed(range(self.ndim)))
        elif len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return DeviceArray(self.ctx, self.mem, [self.shape[a] for a in axes], self.dtype,
                           [self.strides[a] for a in axes], self.offset, self._base or self)

    @property
    def T(self):
        return self.transpose()

    def release(self):
        """Releases the buffer now (views of it become invalid); else the garbage collector
        does it."""
        if self._base is None and self.mem:
            _cl.release(self.mem)
        self.mem = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


def is_pyopencl_array(v):
    return _pyopencl_array is not None and isinstance(v, _pyopencl_array.Array)


def shape_of(v):
    if isinstance(v, _lib.Tensor):
        return tuple(v.shape[:max(0, min(v.ndim, 4))])
    return tuple(np.shape(v)) if not hasattr(v, "shape") else tuple(v.shape)


def dtype_of(v):
    """The NumPy dtype an argument holds (bf16 as uint16)."""
    if isinstance(v, _lib.Tensor):
        return numpy_dtype(v.dtype)
    if hasattr(v, "dtype"):
        return v.dtype
    return np.asarray(v).dtype


# ---- one call's arguments ----


class _NumpyArg:
    __slots__ = ("orig", "arr", "stage", "output", "reads", "tensor", "lo", "hi", "name")


class Call:
    """Collects the arguments of one C call, turns them into clkit_tensor descriptors and
    runs it: uploads NumPy inputs, runs the function, reads NumPy outputs back."""

    def __init__(self, ctx, fname):
        self.ctx = ctx
        self.fname = fname
        self.numpy = []     # _NumpyArg
        self.empty = []     # tensors of empty NumPy arrays: given a placeholder buffer
        self.foreign_queues = []
        self.kind = "numpy"  # what outputs are allocated as
        self.kind_queue = None
        self.keep = []

    # arguments

    def arg(self, v, name, output=False, reads=None):
        """A descriptor for v (None: NULL). reads: the call reads an output's prior contents
        (matmul's C with beta != 0); inputs are always read."""
        if v is None:
            return None
        if reads is None:
            reads = not output
        if isinstance(v, _lib.Tensor):
            self.kind = self.kind if self.kind != "numpy" else "raw"
            self.keep.append(v)
            return v
        if isinstance(v, DeviceArray):
            return self._device_arg(v, name)
        if is_pyopencl_array(v):
            return self._pyopencl_arg(v, name)
        if output and not isinstance(v, np.ndarray):
            raise TypeError("%s: output %s must be a NumPy array, a clkit.DeviceArray, a "
                            "pyopencl array or a clkit.Tensor, not %s"
                            % (self.fname, name, type(v).__name__))
        return self._numpy_arg(v, name, output, reads)

    def _tensor(self, dtype, shape, strides, buffer, offset, name):
        if len(shape) > _lib.CLKIT_MAX_DIMS:
            raise NdimError(_lib.CLKIT_ERR_NDIM, "%s has %d dims; clkit tensors have at most 4"
                            % (name, len(shape)), self.fname)
        t = _lib.Tensor()
        t.buffer = buffer
        t.offset = offset
        t.dtype = clkit_dtype(dtype)
        t.ndim = len(shape)
        for i, (n, s) in enumerate(zip(shape, strides)):
            t.shape[i] = n
            t.strides[i] = s
        self.keep.append(t)
        return t

    def _device_arg(self, v, name):
        if v.ctx is not self.ctx:
            raise ValueError("%s: %s belongs to another clkit.Context" % (self.fname, name))
        if not v.mem:
            raise ValueError("%s: %s was released" % (self.fname, name))
        if self.kind == "numpy":
            self.kind = "device"
        return self._tensor(v.dtype, v.shape, v.strides, v.mem, v.offset, name)

    def _pyopencl_arg(self, v, name):
        ctx_ptr = self.ctx._cl_context
        if v.context.int_ptr != ctx_ptr:
            raise ValueError(
                "%s: %s lives in another OpenCL context than this clkit.Context's; make the "
                "Context from the array's queue (clkit.Context(queue=q)) or the arrays on "
                "ctx.pyopencl_queue()" % (self.fname, name))
        q = v.queue
        if q is not None and q.int_ptr != self.ctx._queue:
            if all(fq.int_ptr != q.int_ptr for fq in self.foreign_queues):
                self.foreign_queues.append(q)
        if self.kind != "pyopencl":
            self.kind, self.kind_queue = "pyopencl", q
        isz = v.dtype.itemsize
        if any(s % isz for s in v.strides):
            raise ValueError("%s: %s has strides %s, not multiples of its %d-byte elements"
                             % (self.fname, name, v.strides, isz))
        strides = [s // isz for s in v.strides]
        if v.base_data is None:  # an empty array has no buffer
            return self._empty_arg(v.dtype, v.shape, strides, name)
        return self._tensor(v.dtype, v.shape, strides, v.base_data.int_ptr, v.offset, name)

    def _empty_arg(self, dtype, shape, strides, name):
        t = self._tensor(dtype, shape, strides, None, 0, name)
        self.empty.append(t)
        return t

    def _numpy_arg(self, v, name, output, reads):
        orig = v
        arr = np.asarray(v)
        try:
            clkit_dtype(arr.dtype)
        except DtypeError as e:
            raise DtypeError(_lib.CLKIT_ERR_DTYPE, "%s: %s" % (name, e.detail), self.fname) from None
        if output and not arr.flags.writeable:
            raise ValueError("%s: output %s is read-only" % (self.fname, name))
        isz = arr.dtype.itemsize
        a = _NumpyArg()
        a.orig, a.output, a.reads, a.name, a.stage = orig, output, reads, name, None
        if arr.size == 0:
            a.arr = arr
            a.tensor = self._empty_arg(arr.dtype, arr.shape,
                                       [s // isz if s % isz == 0 else 0 for s in arr.strides], name)
            return a.tensor
        native = arr.dtype.byteorder in "=|"
        span = self._span(arr)
        if (not native or any(s % isz for s in arr.strides)
                or span[1] - span[0] > 2 * arr.nbytes + 65536):
            # unusual layouts go through a dense copy (written back for outputs)
            dt = arr.dtype.newbyteorder("=") if not native else arr.dtype
            stage = np.ascontiguousarray(arr, dtype=dt)
            if output:
                a.stage = arr
            arr = stage
            span = self._span(arr)
        a.arr = arr
        a.lo, a.hi = span
        data = arr.__array_interface__["data"][0]
        a.tensor = self._tensor(arr.dtype, arr.shape, [s // isz for s in arr.strides], None,
                                data - a.lo, name)
        self.numpy.append(a)
        return a.tensor

    @staticmethod
    def _span(arr):
        data = arr.__array_interface__["data"][0]
        lo = hi = data
        for n, s in zip(arr.shape, arr.strides):
            ext = (n - 1) * s
            if ext < 0:
                lo += ext
            else:
                hi += ext
        return lo, hi + arr.dtype.itemsize

    # outputs

    def alloc(self, shape, dtype, zero=False):
        """An output of the kind the inputs are: NumPy, DeviceArray or pyopencl."""
        dt = numpy_dtype(dtype)
        shape = tuple(int(s) for s in shape)
        if self.kind == "numpy":
            return np.zeros(shape, dt) if zero else np.empty(shape, dt)
        if self.kind == "device":
            d = self.ctx.empty(shape, dt)
            if zero and d.size:
                d.set(np.zeros(shape, dt))
            return d
        if self.kind == "pyopencl":
            q = self.kind_queue or self.ctx.pyopencl_queue()
            f = _pyopencl_array.zeros if zero else _pyopencl_array.empty
            return f(q, shape, dt)
        raise ValueError("%s: pass every output explicitly when the inputs are clkit.Tensor "
                         "descriptors" % self.fname)

    # running

    def run(self, fn, *args):
        """Calls fn(ctx, *args), raising clkit.Error on a non-OK status."""
        ctx = self.ctx
        ctx._check_open()
        queue = ctx._queue
        buffers = []
        groups = []
        try:
            for t in self.empty:
                m = _cl.create_buffer(ctx._cl_context, 64)
                buffers.append(m)
                t.buffer = m
            for g in self._groups():
                lo = min(a.lo for a in g)
                hi = max(a.hi for a in g)
                m = _cl.create_buffer(ctx._cl_context, hi - lo)
                buffers.append(m)
                for a in g:
                    a.tensor.buffer = m
                    a.tensor.offset += a.lo - lo
                if any(a.reads for a in g):
                    _cl.write(queue, m, 0, hi - lo, lo)
                groups.append((g, m, lo, hi))
            for q in self.foreign_queues:
                q.finish()
            status = fn(ctx._handle, *args)
            if status != 0:
                raise ctx._error(status, fn.__name__)
            for g, m, lo, hi in groups:
                outs = [a for a in g if a.output]
                if not outs:
                    continue
                tmp = np.empty(hi - lo, np.uint8)
                _cl.read(queue, m, 0, hi - lo, tmp.ctypes.data)
                for a in outs:
                    data = a.arr.__array_interface__["data"][0]
                    a.arr[...] = np.ndarray(a.arr.shape, a.arr.dtype, buffer=tmp,
                                            offset=data - lo, strides=a.arr.strides)
                    if a.stage is not None:
                        a.stage[...] = a.arr
            if self.foreign_queues or buffers:
                # foreign queues wait for clkit's; temporaries are released once drained
                # (not after a failure, which enqueued nothing: clkit_last_error stays)
                ctx.finish()
        finally:
            for m in buffers:
                _cl.release(m)

    def _groups(self):
        """NumPy arguments grouped by overlapping host memory."""
        args = sorted(self.numpy, key=lambda a: a.lo)
        groups, hi = [], None
        for a in args:
            if groups and a.lo < hi:
                groups[-1].append(a)
                hi = max(hi, a.hi)
            else:
                groups.append([a])
                hi = a.hi
        return groups
