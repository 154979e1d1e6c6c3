"""clkit.Context: one device and one in-order queue (clkit_context), and every op.

Array arguments may be NumPy arrays (uploaded for the call, outputs read back: the call
returns when the results are in the arrays), clkit.DeviceArray or pyopencl arrays (the call
enqueues and returns, like the C API; ctx.finish() waits), or raw clkit.Tensor descriptors
over buffers you own. Outputs left out (None) are allocated like the inputs: NumPy arrays for
NumPy inputs, DeviceArray for DeviceArray inputs, pyopencl arrays for pyopencl inputs.

Optional outputs (mean, rstd, dlogits, dweight, ...) take an array to write into, True to
have one allocated, or False / None for none (NULL in C). Results come back as the array, or
a named tuple of arrays (None for those not asked for).
"""
import collections
import ctypes

import numpy as np

from . import _arrays, _cl, _lib
from ._arrays import Call, DeviceArray, as_held, clkit_dtype, dtype_of, numpy_dtype, shape_of
from .errors import InvalidValueError, error_for

LayerNormResult = collections.namedtuple("LayerNormResult", "y mean rstd")
LayerNormGrads = collections.namedtuple("LayerNormGrads", "dx dweight dbias")
CrossEntropyResult = collections.namedtuple("CrossEntropyResult", "loss dlogits z_loss")
LinearCrossEntropyResult = collections.namedtuple("LinearCrossEntropyResult",
                                                  "loss dx dweight dbias z_loss")
AttentionResult = collections.namedtuple("AttentionResult", "out lse")
AttentionGrads = collections.namedtuple("AttentionGrads", "dq dk dv")
TunedEntry = collections.namedtuple("TunedEntry", "op dtype layout shape config ms")
TuneStep = collections.namedtuple("TuneStep", "done total config ms best_ms")
BenchmarkResult = collections.namedtuple(
    "BenchmarkResult", "median_ms p20_ms p80_ms min_ms max_ms mean_ms quantile_ms timing reps "
    "warmup batch calls flush_bytes")
# clkit_benchmark's options as Context.benchmark's keywords (None: the library's default)
_BENCH_KEYS = ("warmup_ms", "rep_ms", "wall_limit_ms", "min_reps", "max_reps", "reps",
               "flush_bytes")


class Device(collections.namedtuple("Device", [f[0] for f in _lib.DeviceProps._fields_])):
    """struct clkit_device_props as Python values (strings decoded, flags as bool)."""

    __slots__ = ()

    def __str__(self):
        return "%s (%s, %s)" % (self.name, self.platform, self.device_version)


_ACTIVATIONS = {"none": _lib.CLKIT_ACT_NONE, None: _lib.CLKIT_ACT_NONE,
                "relu": _lib.CLKIT_ACT_RELU, "leaky_relu": _lib.CLKIT_ACT_LEAKY_RELU}
_PROVIDERS = {"auto": _lib.CLKIT_PROVIDER_AUTO, None: _lib.CLKIT_PROVIDER_AUTO,
              "clkit": _lib.CLKIT_PROVIDER_CLKIT, "clblast": _lib.CLKIT_PROVIDER_CLBLAST}
_REDUCTIONS = {"mean": _lib.CLKIT_REDUCTION_MEAN, "sum": _lib.CLKIT_REDUCTION_SUM,
               "none": _lib.CLKIT_REDUCTION_NONE}


def _enum(value, table, what):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    try:
        return table[value.lower() if isinstance(value, str) else value]
    except (KeyError, AttributeError):
        raise InvalidValueError(_lib.CLKIT_ERR_INVALID_VALUE,
                                "%s %r: one of %s" % (what, value,
                                                      ", ".join(k for k in table if k))) from None


_ALLOC = object()


def _want(v):
    """An optional output argument: True -> _ALLOC (allocate one), False/None -> None (NULL),
    else the array itself."""
    if v is True:
        return _ALLOC
    if v is False or v is None:
        return None
    return v


class Context:
    """A clkit_context: one OpenCL device and one in-order queue, plus clkit's caches.

    Context(device=None, profiling=False, cache_dir=None, queue=None)

    device     None: $CLKIT_DEVICE, else the first GPU, else the first device. An index
               ("1") or a case-insensitive substring of "platform platform-vendor device
               vendor type" ("nvidia", "amd", "pocl", "cpu", "gpu").
    profiling  a profiling queue, needed for profile_begin / profile_end / profile().
    cache_dir  None: $CLKIT_CACHE_DIR or the default; "": no on-disk cache.
    queue      adopt an existing in-order queue instead (a pyopencl.CommandQueue or a
               cl_command_queue handle as an int): clkit_context_from_queue.

    Use it as a context manager, or call release(); a Context is not thread-safe.
    """

    def __init__(self, device=None, profiling=False, cache_dir=None, queue=None):
        self._lib = _lib.load()
        _cl.load()
        self._handle = None
        self._pyopencl_ctx = self._pyopencl_queue = None
        h = ctypes.c_void_p()
        if queue is not None:
            if device is not None or profiling or cache_dir is not None:
                raise ValueError("Context(queue=...) takes the queue's device and properties; "
                                 "device, profiling and cache_dir do not apply")
            qptr = queue if isinstance(queue, int) else queue.int_ptr
            s = self._lib.clkit_context_from_queue(ctypes.byref(h), ctypes.c_void_p(qptr))
            if s != 0:
                raise error_for(s, "could not adopt the queue (clkit logs why on stderr; "
                                   "CLKIT_LOG=info for more)", "clkit_context_from_queue")
            if not isinstance(queue, int):
                self._pyopencl_queue = queue
        else:
            opt = _lib.Options()
            opt.device = device.encode() if isinstance(device, str) else (
                str(device).encode() if device is not None else None)
            opt.cache_dir = cache_dir.encode() if cache_dir is not None else None
            opt.profiling = 1 if profiling else 0
            s = self._lib.clkit_context_create(ctypes.byref(h), ctypes.byref(opt))
            if s != 0:
                what = ("no device matches %r" % device if device is not None
                        else "no OpenCL device (CLKIT_DEVICE, ICDs: see `clinfo -l`)")
                raise error_for(s, what, "clkit_context_create")
        self._handle = h
        c, q, d = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self._lib.clkit_context_cl(h, ctypes.byref(c), ctypes.byref(q),
                                               ctypes.byref(d)), "clkit_context_cl")
        self._cl_context, self._queue, self._cl_device = c.value, q.value, d.value
        self._profiling = bool(profiling)
        self._device = None

    # ---- lifetime ----

    def release(self):
        """clkit_context_release. Idempotent; NumPy-backed calls have already finished."""
        if self._handle is not None and self._handle.value:
            self._pyopencl_queue = self._pyopencl_ctx = None
            self._lib.clkit_context_release(self._handle)
        self._handle = None

    close = release

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.finish()
        finally:
            self.release()
        return False

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self):
        if self._handle is None:
            return "<clkit.Context released>"
        return "<clkit.Context %s>" % (self.device,)

    def _check_open(self):
        if self._handle is None:
            raise ValueError("this clkit.Context was released")

    def _error(self, status, function):
        detail = self._lib.clkit_last_error(self._handle) if self._handle is not None else b""
        return error_for(status, (detail or b"").decode(errors="replace"), function)

    def _check(self, status, function):
        if status != 0:
            raise self._error(status, function)

    # ---- the context ----

    def finish(self):
        """clkit_finish: waits for everything enqueued."""
        self._check_open()
        self._check(self._lib.clkit_finish(self._handle), "clkit_finish")

    @property
    def last_error(self):
        """clkit_last_error: detail of the last failure on this context ("" if none)."""
        self._check_open()
        return (self._lib.clkit_last_error(self._handle) or b"").decode(errors="replace")

    @property
    def device(self):
        """clkit_device_props as a clkit.Device named tuple."""
        if self._device is None:
            self._check_open()
            p = _lib.DeviceProps()
            self._check(self._lib.clkit_device_props(self._handle, ctypes.byref(p)),
                        "clkit_device_props")
            vals = []
            for name, typ in _lib.DeviceProps._fields_:
                v = getattr(p, name)
                if isinstance(v, bytes):
                    v = v.decode(errors="replace")
                elif name in ("is_gpu", "is_cpu", "fp16", "fp64", "subgroups"):
                    v = bool(v)
                vals.append(v)
            self._device = Device(*vals)
        return self._device

    @property
    def cl_handles(self):
        """(cl_context, cl_command_queue, cl_device_id) as ints (clkit_context_cl)."""
        self._check_open()
        return self._cl_context, self._queue, self._cl_device

    def pyopencl_context(self):
        """The context's cl_context as a pyopencl.Context (needs pyopencl)."""
        self._check_open()
        if _arrays._pyopencl is None:
            raise ImportError("pyopencl is not installed")
        if self._pyopencl_ctx is None:
            self._pyopencl_ctx = _arrays._pyopencl.Context.from_int_ptr(self._cl_context,
                                                                        retain=True)
        return self._pyopencl_ctx

    def pyopencl_queue(self):
        """The context's queue as a pyopencl.CommandQueue: pyopencl arrays made on it share
        clkit's in-order queue, so ops on them need no synchronisation."""
        self._check_open()
        if _arrays._pyopencl is None:
            raise ImportError("pyopencl is not installed")
        if self._pyopencl_queue is None:
            self._pyopencl_queue = _arrays._pyopencl.CommandQueue.from_int_ptr(self._queue,
                                                                               retain=True)
        return self._pyopencl_queue

    def fast_paths(self, op):
        """clkit_fast_paths: the vendor fast paths op family op ("matmul", "attention",
        "cross_entropy", "softmax", "layernorm") may take now, as a set of names
        ("nv_mma", "nv_wgmma", "amd_mfma", ...)."""
        self._check_open()
        bits = ctypes.c_uint(0)
        self._check(self._lib.clkit_fast_paths(self._handle, op.encode(), ctypes.byref(bits)),
                    "clkit_fast_paths")
        return frozenset(n for n, b in _lib.FAST_PATHS.items() if bits.value & b)

    def profile_begin(self):
        """clkit_profile_begin (needs Context(profiling=True))."""
        self._check_open()
        self._check(self._lib.clkit_profile_begin(self._handle), "clkit_profile_begin")

    def profile_end(self):
        """clkit_profile_end: waits, and returns the kernel time (ms) since profile_begin."""
        self._check_open()
        ms = ctypes.c_double(0)
        self._check(self._lib.clkit_profile_end(self._handle, ctypes.byref(ms)),
                    "clkit_profile_end")
        return ms.value

    def profile(self):
        """with ctx.profile() as p: ...ops...  then p.ms is their kernel time."""
        return _Profile(self)

    def scratch_peak(self, reset=False):
        """clkit_scratch_peak: most bytes of scratch the ops held at once."""
        self._check_open()
        return int(self._lib.clkit_scratch_peak(self._handle, 1 if reset else 0))

    def trim(self):
        """clkit_context_trim: frees pooled scratch buffers."""
        self._check_open()
        self._lib.clkit_context_trim(self._handle)

    # ---- events and benchmarking (clkit.h's hooks) ----

    def wait_events(self, *events):
        """clkit_wait_events: every op enqueued after this waits for the events (pyopencl
        Events, clkit cl_events from enqueue_marker, or cl_event handles as ints) of any queue
        of this context's cl_context."""
        self._check_open()
        handles = (ctypes.c_void_p * max(len(events), 1))(
            *[e if isinstance(e, int) else e.int_ptr for e in events])
        self._check(self._lib.clkit_wait_events(self._handle, len(events), handles),
                    "clkit_wait_events")

    def enqueue_marker(self):
        """clkit_enqueue_marker: an event that completes once every op enqueued so far has;
        a pyopencl.Event where pyopencl is installed, else a clkit cl_event (wait(),
        int_ptr, release())."""
        self._check_open()
        h = ctypes.c_void_p()
        self._check(self._lib.clkit_enqueue_marker(self._handle, ctypes.byref(h)),
                    "clkit_enqueue_marker")
        if _arrays._pyopencl is not None:
            return _arrays._pyopencl.Event.from_int_ptr(h.value, retain=False)
        return _cl.Event(h.value)

    def benchmark_flush_bytes(self):
        """clkit_benchmark_flush_bytes: what benchmark writes before each timed repeat when
        flush_bytes is left out."""
        self._check_open()
        return int(self._lib.clkit_benchmark_flush_bytes(self._handle))

    def benchmark(self, fn, *, timing="auto", flush=True, flush_buffer=None, quantiles=(),
                  **options):
        """clkit_benchmark: times fn(ctx) as triton.testing.do_bench and `clkit bench` do, and
        returns a clkit.BenchmarkResult (times in ms; timing as its name).

        fn enqueues its work on this context: ops on DeviceArrays or pyopencl arrays return
        without waiting, as in C; ops on NumPy arrays copy in and out on every call, and those
        copies are timed too (with timing "wall"). An exception in fn ends the benchmark and
        is raised from here. timing: "auto" (events on a profiling context, else wall),
        "events", "wall" or "wall_batched". flush: write a buffer before each timed repeat
        (flush_buffer: a cl_mem of this context to write, as an int or with int_ptr).
        quantiles: up to 8 in [0, 1], reported in quantile_ms. Other keywords:
        warmup_ms, rep_ms, wall_limit_ms, min_reps, max_reps, reps, flush_bytes."""
        self._check_open()
        unknown = set(options) - set(_BENCH_KEYS)
        if unknown:
            raise TypeError("benchmark() got unexpected keyword arguments %s" % sorted(unknown))
        if timing not in _lib.TIMING_NAMES:
            raise ValueError("timing %r is not one of %s" % (timing, list(_lib.TIMING_NAMES)))
        opt = self._lib.clkit_benchmark_defaults()
        opt.timing = _lib.TIMING_NAMES.index(timing)
        opt.flush = 1 if flush else 0
        if flush_buffer is not None:
            opt.flush_buffer = (flush_buffer if isinstance(flush_buffer, int)
                                else flush_buffer.int_ptr)
        for key, value in options.items():
            if value is not None:
                setattr(opt, key, value)
        quantiles = tuple(quantiles)
        if len(quantiles) > _lib.CLKIT_BENCHMARK_MAX_QUANTILES:
            raise ValueError("at most %d quantiles" % _lib.CLKIT_BENCHMARK_MAX_QUANTILES)
        opt.nquantiles = len(quantiles)
        for i, q in enumerate(quantiles):
            opt.quantiles[i] = q
        raised = []

        def call(_ctx, _user):
            try:
                fn(self)
                return _lib.CLKIT_OK
            except BaseException as e:  # ends the benchmark (Ctrl-C too); raised again below
                raised.append(e)
                return getattr(e, "status", 0) or _lib.CLKIT_ERR_INVALID_VALUE

        res = _lib.BenchmarkResult()
        status = self._lib.clkit_benchmark(self._handle, _lib.BENCHMARK_FN(call), None,
                                           ctypes.byref(opt), ctypes.byref(res))
        if raised:
            raise raised[0]
        self._check(status, "clkit_benchmark")
        return BenchmarkResult(res.median_ms, res.p20_ms, res.p80_ms, res.min_ms, res.max_ms,
                               res.mean_ms, tuple(res.quantile_ms[:len(quantiles)]),
                               _lib.TIMING_NAMES[res.timing], res.reps, res.warmup, res.batch,
                               res.calls, res.flush_bytes)

    @property
    def cache_dir(self):
        """clkit_cache_dir: the cache directory in use ("" when disabled)."""
        self._check_open()
        return (self._lib.clkit_cache_dir(self._handle) or b"").decode(errors="replace")

    # ---- device arrays ----

    def empty(self, shape, dtype):
        """An uninitialised DeviceArray (a fresh buffer of this context)."""
        self._check_open()
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        dt = numpy_dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        return DeviceArray(self, _cl.create_buffer(self._cl_context, n), shape, dt)

    def to_device(self, a, dtype=None):
        """A DeviceArray holding a copy of a NumPy array (dense, row-major), as dtype if given:
        float values into "bf16" are rounded to bf16 bit patterns, as clkit.to_bf16 does."""
        a = np.asarray(a) if dtype is None else as_held(a, numpy_dtype(dtype))
        clkit_dtype(a.dtype)
        d = self.empty(a.shape, a.dtype)
        if d.size:
            d.set(a)
        return d

    # ---- ops ----

    def _call(self, fname):
        self._check_open()
        return Call(self, fname)

    def add(self, x, y, out=None):
        """out = x + y (clkit_add): same shapes, f32/f16/bf16; out may be x or y."""
        c = self._call("clkit_add")
        tx, ty = c.arg(x, "x"), c.arg(y, "y")
        if out is None:
            out = c.alloc(shape_of(x), dtype_of(x))
        c.run(self._lib.clkit_add, tx, ty, c.arg(out, "out", output=True))
        return out

    def copy(self, x, out=None, dtype=None):
        """out = x in out's layout (clkit_copy); float dtypes convert (dtype: of a new out)."""
        c = self._call("clkit_copy")
        tx = c.arg(x, "x")
        if out is None:
            out = c.alloc(shape_of(x), dtype if dtype is not None else dtype_of(x))
        c.run(self._lib.clkit_copy, tx, c.arg(out, "out", output=True))
        return out

    def rgb_to_gray(self, rgb, out=None):
        """(3, H, W) -> (H, W), u8 or f32 (clkit_rgb_to_gray)."""
        c = self._call("clkit_rgb_to_gray")
        tr = c.arg(rgb, "rgb")
        if out is None:
            out = c.alloc(shape_of(rgb)[1:], dtype_of(rgb))
        c.run(self._lib.clkit_rgb_to_gray, tr, c.arg(out, "gray", output=True))
        return out

    def swizzle2d(self, x, group_size, out=None):
        """out[swizzle2d(i, j)] = x[i, j], Triton's tl.swizzle2d (clkit_swizzle2d)."""
        c = self._call("clkit_swizzle2d")
        tx = c.arg(x, "x")
        if out is None:
            out = c.alloc(shape_of(x), dtype_of(x))
        c.run(self._lib.clkit_swizzle2d, tx, c.arg(out, "out", output=True), int(group_size))
        return out

    def dropout(self, x, p, seed, out=None):
        """out = keep ? x / (1 - p) : 0, keep from Philox4x32-10(seed, index) (clkit_dropout)."""
        c = self._call("clkit_dropout")
        tx = c.arg(x, "x")
        if out is None:
            out = c.alloc(shape_of(x), dtype_of(x))
        c.run(self._lib.clkit_dropout, tx, c.arg(out, "out", output=True), float(p),
              int(seed) & 0xFFFFFFFFFFFFFFFF)
        return out

    def softmax(self, x, out=None):
        """Row softmax over the last dimension of (M, N) (clkit_softmax)."""
        c = self._call("clkit_softmax")
        tx = c.arg(x, "x")
        if out is None:
            out = c.alloc(shape_of(x), dtype_of(x))
        c.run(self._lib.clkit_softmax, tx, c.arg(out, "out", output=True))
        return out

    # matmul

    @staticmethod
    def matmul_options(alpha=1.0, beta=0.0, activation="none", leaky_slope=None,
                       provider="auto", config=None, allow_tf32=False, exact_f32=False):
        """A clkit_matmul_options from clkit_matmul_defaults() with these changes.
        activation: "none", "relu", "leaky_relu"; provider: "auto", "clkit", "clblast";
        config: a kernel configuration string, e.g. "KERNEL=1,TILE=16"."""
        o = _lib.load().clkit_matmul_defaults()
        o.alpha, o.beta = float(alpha), float(beta)
        o.activation = _enum(activation, _ACTIVATIONS, "activation")
        if leaky_slope is not None:
            o.leaky_slope = float(leaky_slope)
        o.provider = _enum(provider, _PROVIDERS, "provider")
        o.config = config.encode() if isinstance(config, str) else config
        o.allow_tf32 = 1 if allow_tf32 else 0
        o.exact_f32 = 1 if exact_f32 else 0
        return o

    def _matmul_args(self, c, a, b, out, opt, out_dtype, tune=False):
        ta, tb = c.arg(a, "a"), c.arg(b, "b")
        if out is None:
            sa, sb = shape_of(a), shape_of(b)
            m = sa[-2] if len(sa) >= 2 else 1
            n = sb[-1] if len(sb) >= 1 else 1
            batch = max(sa[0] if len(sa) == 3 else 1, sb[0] if len(sb) == 3 else 1)
            shape = (batch, m, n) if len(sa) == 3 or len(sb) == 3 else (m, n)
            out = c.alloc(shape, out_dtype if out_dtype is not None else np.float32,
                          zero=opt.beta != 0)
        # the tuner writes scratch copies of C, never C: not read back
        return ta, tb, out, c.arg(out, "c", output=not tune, reads=opt.beta != 0)

    def matmul(self, a, b, out=None, *, alpha=1.0, beta=0.0, activation="none",
               leaky_slope=None, provider="auto", config=None, allow_tf32=False,
               exact_f32=False, out_dtype=None, options=None):
        """C = act(alpha * A @ B + beta * C) (clkit_matmul): A (M, K) or (batch, M, K),
        B (K, N) or (batch, K, N), C (M, N) / (batch, M, N). A new C is f32 unless out_dtype
        says f16 or bf16 (f16/bf16 inputs); beta != 0 reads out's prior contents. options: a
        clkit.MatmulOptions instead of the keywords."""
        opt = options if options is not None else self.matmul_options(
            alpha, beta, activation, leaky_slope, provider, config, allow_tf32, exact_f32)
        c = self._call("clkit_matmul")
        ta, tb, out, tc = self._matmul_args(c, a, b, out, opt, out_dtype)
        c.run(self._lib.clkit_matmul, ta, tb, tc, ctypes.byref(opt))
        return out

    # layer norm

    def layernorm_forward(self, x, weight=None, bias=None, eps=1e-5, *, out=None, mean=True,
                          rstd=True):
        """y = (x - mean) * rstd * weight + bias over the rows of x (M, N)
        (clkit_layernorm_forward). Returns (y, mean, rstd); mean and rstd (M,) f32."""
        c = self._call("clkit_layernorm_forward")
        tx, tw, tb = c.arg(x, "x"), c.arg(weight, "weight"), c.arg(bias, "bias")
        sx = shape_of(x)
        if out is None:
            out = c.alloc(sx, dtype_of(x))
        mean, rstd = _want(mean), _want(rstd)
        rows = sx[:1] if sx else (0,)
        if mean is _ALLOC:
            mean = c.alloc(rows, np.float32)
        if rstd is _ALLOC:
            rstd = c.alloc(rows, np.float32)
        c.run(self._lib.clkit_layernorm_forward, tx, tw, tb, float(eps),
              c.arg(out, "y", output=True), c.arg(mean, "mean", output=True),
              c.arg(rstd, "rstd", output=True))
        return LayerNormResult(out, mean, rstd)

    def layernorm_backward(self, dy, x, weight, mean, rstd, *, dx=None, dweight=True,
                           dbias=True):
        """Gradients of layernorm_forward (clkit_layernorm_backward); weight None when the
        forward had none. Returns (dx, dweight, dbias)."""
        c = self._call("clkit_layernorm_backward")
        args = [c.arg(dy, "dy"), c.arg(x, "x"), c.arg(weight, "weight"), c.arg(mean, "mean"),
                c.arg(rstd, "rstd")]
        sx, dt = shape_of(x), dtype_of(x)
        cols = sx[-1:] if sx else (0,)
        if dx is None or dx is True:
            dx = c.alloc(sx, dt)
        dweight, dbias = _want(dweight), _want(dbias)
        if dweight is _ALLOC:
            dweight = c.alloc(cols, dt)
        if dbias is _ALLOC:
            dbias = c.alloc(cols, dt)
        c.run(self._lib.clkit_layernorm_backward, *args, c.arg(dx, "dx", output=True),
              c.arg(dweight, "dweight", output=True), c.arg(dbias, "dbias", output=True))
        return LayerNormGrads(dx, dweight, dbias)

    # cross-entropy

    @staticmethod
    def cross_entropy_options(ignore_index=-100, reduction="mean", label_smoothing=0.0,
                              softcap=0.0, z_loss_scale=0.0):
        """A clkit_cross_entropy_options from clkit_cross_entropy_defaults() with these
        changes (reduction: "mean", "sum", "none"). Its z_loss tensor is set per call."""
        o = _lib.load().clkit_cross_entropy_defaults()
        o.ignore_index = int(ignore_index)
        o.reduction = _enum(reduction, _REDUCTIONS, "reduction")
        o.label_smoothing = float(label_smoothing)
        o.softcap = float(softcap)
        o.z_loss_scale = float(z_loss_scale)
        return o

    def _ce_outputs(self, c, opt, tokens, loss, z_loss):
        lshape = (tokens,) if opt.reduction == _lib.CLKIT_REDUCTION_NONE else (1,)
        if loss is None or loss is True:
            loss = c.alloc(lshape, np.float32)
        z_loss = _want(z_loss)
        if z_loss is _ALLOC:
            z_loss = c.alloc(lshape, np.float32)
        tz = c.arg(z_loss, "z_loss", output=True)
        opt.z_loss = ctypes.pointer(tz) if tz is not None else None
        return loss, z_loss

    def cross_entropy(self, logits, targets, *, ignore_index=-100, reduction="mean",
                      label_smoothing=0.0, softcap=0.0, z_loss_scale=0.0, loss=None,
                      dlogits=False, z_loss=False, options=None):
        """Fused log-softmax + NLL over the rows of logits (T, V) with targets (T) i32/i64
        (clkit_cross_entropy). loss is (1,) f32 for mean and sum, (T,) for none.
        dlogits=True (or an array, which may be logits itself) asks for the gradient.
        Returns (loss, dlogits, z_loss)."""
        opt = options if options is not None else self.cross_entropy_options(
            ignore_index, reduction, label_smoothing, softcap, z_loss_scale)
        c = self._call("clkit_cross_entropy")
        tl, tt = c.arg(logits, "logits"), c.arg(targets, "targets")
        sl = shape_of(logits)
        loss, z_loss = self._ce_outputs(c, opt, sl[0] if sl else 0, loss, z_loss)
        dlogits = _want(dlogits)
        if dlogits is _ALLOC:
            dlogits = c.alloc(sl, dtype_of(logits))
        c.run(self._lib.clkit_cross_entropy, tl, tt, ctypes.byref(opt),
              c.arg(loss, "loss", output=True), c.arg(dlogits, "dlogits", output=True))
        return CrossEntropyResult(loss, dlogits, z_loss)

    def linear_cross_entropy(self, x, weight, targets, bias=None, *, ignore_index=-100,
                             reduction="mean", label_smoothing=0.0, softcap=0.0,
                             z_loss_scale=0.0, loss=None, dx=False, dweight=False, dbias=False,
                             z_loss=False, options=None):
        """cross_entropy of x (T, D) @ weight (V, D)^T + bias (V), without storing the logits
        (clkit_linear_cross_entropy). dx, dweight, dbias: True or an array to get them.
        Returns (loss, dx, dweight, dbias, z_loss)."""
        opt = options if options is not None else self.cross_entropy_options(
            ignore_index, reduction, label_smoothing, softcap, z_loss_scale)
        c = self._call("clkit_linear_cross_entropy")
        tx, tw, tb, tt = (c.arg(x, "x"), c.arg(weight, "weight"), c.arg(bias, "bias"),
                          c.arg(targets, "targets"))
        sx, sw, dt = shape_of(x), shape_of(weight), dtype_of(x)
        loss, z_loss = self._ce_outputs(c, opt, sx[0] if sx else 0, loss, z_loss)
        dx, dweight, dbias = _want(dx), _want(dweight), _want(dbias)
        if dx is _ALLOC:
            dx = c.alloc(sx, dt)
        if dweight is _ALLOC:
            dweight = c.alloc(sw, dt)
        if dbias is _ALLOC:
            dbias = c.alloc(sw[:1], dt)
        c.run(self._lib.clkit_linear_cross_entropy, tx, tw, tb, tt, ctypes.byref(opt),
              c.arg(loss, "loss", output=True), c.arg(dx, "dx", output=True),
              c.arg(dweight, "dweight", output=True), c.arg(dbias, "dbias", output=True))
        return LinearCrossEntropyResult(loss, dx, dweight, dbias, z_loss)

    # attention

    @staticmethod
    def attention_options(causal=False, scale=0.0):
        """A clkit_attention_options from clkit_attention_defaults() (scale 0: 1/sqrt(D)).
        causal: False / True (top-left, as PyTorch's is_causal), "top_left", "bottom_right"
        (the last query sees every key: decoding against a KV cache), or a CLKIT_CAUSAL_*
        number (clkit.CAUSAL_NONE, _TOP_LEFT, _BOTTOM_RIGHT)."""
        o = _lib.load().clkit_attention_defaults()
        names = {"none": 0, "top_left": 1, "bottom_right": 2}
        if isinstance(causal, str):
            if causal not in names:
                raise ValueError(f"causal {causal!r} is not one of {sorted(names)}")
            o.causal = names[causal]
        else:
            o.causal = int(causal)
        o.scale = float(scale)
        return o

    def _attention_fwd_args(self, c, q, k, v, out, lse):
        tq, tk, tv = c.arg(q, "q"), c.arg(k, "k"), c.arg(v, "v")
        sq = shape_of(q)
        if out is None:
            out = c.alloc(sq, dtype_of(q))
        lse = _want(lse)
        if lse is _ALLOC:
            lse = c.alloc(sq[:3], np.float32)
        return [tq, tk, tv], out, lse

    def attention_forward(self, q, k, v, *, causal=False, scale=0.0, out=None, lse=True,
                          options=None):
        """o = softmax(scale q k^T [+ causal mask]) v (clkit_attention_forward): q (B, Hq, Lq,
        D), k and v (B, Hkv, Lk, D). Returns (out, lse); lse (B, Hq, Lq) f32 unless
        lse=False."""
        opt = options if options is not None else self.attention_options(causal, scale)
        c = self._call("clkit_attention_forward")
        ins, out, lse = self._attention_fwd_args(c, q, k, v, out, lse)
        c.run(self._lib.clkit_attention_forward, *ins, ctypes.byref(opt),
              c.arg(out, "o", output=True), c.arg(lse, "lse", output=True))
        return AttentionResult(out, lse)

    def _attention_bwd_args(self, c, q, k, v, o, dout, lse, dq, dk, dv):
        ins = [c.arg(q, "q"), c.arg(k, "k"), c.arg(v, "v"), c.arg(o, "o"),
               c.arg(dout, "dout"), c.arg(lse, "lse")]
        if dq is None or dq is True:
            dq = c.alloc(shape_of(q), dtype_of(q))
        if dk is None or dk is True:
            dk = c.alloc(shape_of(k), dtype_of(k))
        if dv is None or dv is True:
            dv = c.alloc(shape_of(v), dtype_of(v))
        return ins, dq, dk, dv

    def attention_backward(self, q, k, v, o, dout, lse, *, causal=False, scale=0.0, dq=None,
                           dk=None, dv=None, options=None):
        """Gradients of attention_forward given its out and lse and dout
        (clkit_attention_backward). Returns (dq, dk, dv)."""
        opt = options if options is not None else self.attention_options(causal, scale)
        c = self._call("clkit_attention_backward")
        ins, dq, dk, dv = self._attention_bwd_args(c, q, k, v, o, dout, lse, dq, dk, dv)
        c.run(self._lib.clkit_attention_backward, *ins, ctypes.byref(opt),
              c.arg(dq, "dq", output=True), c.arg(dk, "dk", output=True),
              c.arg(dv, "dv", output=True))
        return AttentionGrads(dq, dk, dv)

    # tuning

    def _tune_options(self, budget_s, progress):
        topt = _lib.TuneOptions()
        topt.budget_s = float(budget_s)
        errors = []
        if progress is not None:
            def cb(user, done, total, config, ms, best_ms):
                try:
                    progress(TuneStep(done, total, (config or b"").decode(errors="replace"),
                                      ms, best_ms))
                except BaseException as e:  # never unwind through C
                    errors.append(e)
            topt.progress = _lib.TUNE_PROGRESS(cb)
        return topt, errors

    @staticmethod
    def _reraise(errors):
        if errors:
            raise errors[0]

    def tune_matmul(self, a, b, out=None, *, budget_s=0.0, progress=None, alpha=1.0, beta=0.0,
                    activation="none", leaky_slope=None, provider="auto", config=None,
                    allow_tf32=False, exact_f32=False, out_dtype=None, options=None):
        """clkit_tune_matmul: times every matmul candidate on these operands' shapes, layouts
        and dtypes and stores the fastest in the tuned-config cache (out is not modified).
        budget_s: stop after this many seconds (0: none); progress(step) is called after each
        candidate with a clkit.TuneStep (done, total, config, ms, best_ms)."""
        opt = options if options is not None else self.matmul_options(
            alpha, beta, activation, leaky_slope, provider, config, allow_tf32, exact_f32)
        topt, errors = self._tune_options(budget_s, progress)
        c = self._call("clkit_tune_matmul")
        ta, tb, out, tc = self._matmul_args(c, a, b, out, opt, out_dtype, tune=True)
        try:
            c.run(self._lib.clkit_tune_matmul, ta, tb, tc, ctypes.byref(opt), ctypes.byref(topt))
        finally:
            self._reraise(errors)

    def tune_attention_forward(self, q, k, v, *, causal=False, scale=0.0, out=None, lse=True,
                               budget_s=0.0, progress=None, options=None):
        """clkit_tune_attention_forward: times the portable tile configurations of this call
        (its outputs are written) and stores the fastest. Returns (out, lse)."""
        opt = options if options is not None else self.attention_options(causal, scale)
        topt, errors = self._tune_options(budget_s, progress)
        c = self._call("clkit_tune_attention_forward")
        ins, out, lse = self._attention_fwd_args(c, q, k, v, out, lse)
        try:
            c.run(self._lib.clkit_tune_attention_forward, *ins, ctypes.byref(opt),
                  c.arg(out, "o", output=True), c.arg(lse, "lse", output=True),
                  ctypes.byref(topt))
        finally:
            self._reraise(errors)
        return AttentionResult(out, lse)

    def tune_attention_backward(self, q, k, v, o, dout, lse, *, causal=False, scale=0.0,
                                dq=None, dk=None, dv=None, budget_s=0.0, progress=None,
                                options=None):
        """clkit_tune_attention_backward: as tune_attention_forward, for the backward.
        Returns (dq, dk, dv)."""
        opt = options if options is not None else self.attention_options(causal, scale)
        topt, errors = self._tune_options(budget_s, progress)
        c = self._call("clkit_tune_attention_backward")
        ins, dq, dk, dv = self._attention_bwd_args(c, q, k, v, o, dout, lse, dq, dk, dv)
        try:
            c.run(self._lib.clkit_tune_attention_backward, *ins, ctypes.byref(opt),
                  c.arg(dq, "dq", output=True), c.arg(dk, "dk", output=True),
                  c.arg(dv, "dv", output=True), ctypes.byref(topt))
        finally:
            self._reraise(errors)
        return AttentionGrads(dq, dk, dv)

    def tuned_list(self):
        """clkit_tuned_list: this device's tuned entries, as clkit.TunedEntry tuples."""
        self._check_open()
        entries = []

        def fn(user, op, dtype, layout, shape, config, ms):
            d = lambda b: (b or b"").decode(errors="replace")
            entries.append(TunedEntry(d(op), d(dtype), d(layout), d(shape), d(config), ms))

        cb = _lib.TUNED_ENTRY_FN(fn)
        self._check(self._lib.clkit_tuned_list(self._handle, cb, None), "clkit_tuned_list")
        return entries

    def tuned_export(self, path):
        """clkit_tuned_export: writes every tuned entry (all devices) to path."""
        self._check_open()
        self._check(self._lib.clkit_tuned_export(self._handle, str(path).encode()),
                    "clkit_tuned_export")

    def tuned_import(self, path):
        """clkit_tuned_import: merges an exported file into the cache."""
        self._check_open()
        self._check(self._lib.clkit_tuned_import(self._handle, str(path).encode()),
                    "clkit_tuned_import")


class _Profile:
    def __init__(self, ctx):
        self.ctx, self.ms = ctx, None

    def __enter__(self):
        self.ctx.profile_begin()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.ms = self.ctx.profile_end()
        return False
