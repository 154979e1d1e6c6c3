"""ctypes mirror of include/clkit.h: the structs, enums and prototypes, and the loader.

Every struct here is laid out field for field as the header declares it (tests/test_abi.py
compiles a C program against the header and compares sizes and offsets). libclkit's soname
goes up with any incompatible change of a public struct or signature; this module loads
soname 1.
"""
import ctypes
import ctypes.util
import os
from pathlib import Path

# The libclkit these bindings are written for (clkit.__version__).
VERSION = "0.3.0"

# ---- enums (values as the header's declaration order gives them) ----

# CLKIT_STATUS_LIST, in order: (enum name, clkit_status_string text).
STATUS_NAMES = (
    "CLKIT_OK",
    "CLKIT_ERR_NULL_ARGUMENT",
    "CLKIT_ERR_INVALID_VALUE",
    "CLKIT_ERR_DTYPE",
    "CLKIT_ERR_NDIM",
    "CLKIT_ERR_SHAPE",
    "CLKIT_ERR_STRIDE",
    "CLKIT_ERR_OUT_OF_BOUNDS",
    "CLKIT_ERR_OVERLAP",
    "CLKIT_ERR_OVERFLOW",
    "CLKIT_ERR_NO_DEVICE",
    "CLKIT_ERR_BUILD",
    "CLKIT_ERR_OPENCL",
    "CLKIT_ERR_OUT_OF_MEMORY",
    "CLKIT_ERR_UNSUPPORTED",
    "CLKIT_ERR_IO",
)
for _i, _n in enumerate(STATUS_NAMES):
    globals()[_n] = _i

CLKIT_F32, CLKIT_F16, CLKIT_BF16, CLKIT_U8, CLKIT_I32, CLKIT_I64 = range(6)
DTYPE_NAMES = ("f32", "f16", "bf16", "u8", "i32", "i64")
DTYPE_SIZES = (4, 2, 2, 1, 4, 8)
CLKIT_MAX_DIMS = 4

CLKIT_ACT_NONE, CLKIT_ACT_RELU, CLKIT_ACT_LEAKY_RELU = range(3)
CLKIT_PROVIDER_AUTO, CLKIT_PROVIDER_CLKIT, CLKIT_PROVIDER_CLBLAST = range(3)
CLKIT_REDUCTION_MEAN, CLKIT_REDUCTION_SUM, CLKIT_REDUCTION_NONE = range(3)

# clkit_log_level, and the names the Python callback gets
CLKIT_LOG_ERROR, CLKIT_LOG_WARN, CLKIT_LOG_INFO, CLKIT_LOG_DEBUG = range(1, 5)
LOG_LEVEL_NAMES = {CLKIT_LOG_ERROR: "error", CLKIT_LOG_WARN: "warn", CLKIT_LOG_INFO: "info",
                   CLKIT_LOG_DEBUG: "debug"}
# clkit_timing, and its names
CLKIT_TIMING_AUTO, CLKIT_TIMING_EVENTS, CLKIT_TIMING_WALL, CLKIT_TIMING_WALL_BATCHED = range(4)
TIMING_NAMES = ("auto", "events", "wall", "wall_batched")
CLKIT_BENCHMARK_MAX_QUANTILES = 8

FAST_PATHS = {
    "nv_shuffle": 1 << 0,
    "nv_mma": 1 << 1,
    "nv_wgmma": 1 << 2,
    "nv_tma": 1 << 3,
    "amd_mfma": 1 << 4,
    "amd_wmma": 1 << 5,
}

# ---- structs ----

c_cl_mem = ctypes.c_void_p


class Tensor(ctypes.Structure):
    """clkit_tensor: a view over a cl_mem (offset in bytes, strides in elements)."""
    _fields_ = [
        ("buffer", c_cl_mem),
        ("offset", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
    ]

    def __repr__(self):
        n = max(0, min(self.ndim, 4))
        return ("Tensor(buffer=0x%x, offset=%d, dtype=%s, shape=%s, strides=%s)"
                % (self.buffer or 0, self.offset,
                   DTYPE_NAMES[self.dtype] if 0 <= self.dtype < 6 else self.dtype,
                   tuple(self.shape[:n]), tuple(self.strides[:n])))


class Options(ctypes.Structure):
    """clkit_options."""
    _fields_ = [
        ("device", ctypes.c_char_p),
        ("cache_dir", ctypes.c_char_p),
        ("profiling", ctypes.c_int),
    ]


class DeviceProps(ctypes.Structure):
    """struct clkit_device_props."""
    _fields_ = [
        ("platform", ctypes.c_char * 128),
        ("vendor", ctypes.c_char * 128),
        ("name", ctypes.c_char * 128),
        ("driver", ctypes.c_char * 64),
        ("device_version", ctypes.c_char * 64),
        ("c_version", ctypes.c_char * 64),
        ("is_gpu", ctypes.c_int),
        ("is_cpu", ctypes.c_int),
        ("compute_units", ctypes.c_uint),
        ("global_mem", ctypes.c_uint64),
        ("max_alloc", ctypes.c_uint64),
        ("local_mem", ctypes.c_uint64),
        ("local_mem_static", ctypes.c_uint64),
        ("max_work_group", ctypes.c_size_t),
        ("warp", ctypes.c_uint),
        ("registers", ctypes.c_uint),
        ("nv_cc_major", ctypes.c_int),
        ("nv_cc_minor", ctypes.c_int),
        ("amd_gfx", ctypes.c_char * 32),
        ("simd_per_cu", ctypes.c_uint),
        ("fp16", ctypes.c_int),
        ("fp64", ctypes.c_int),
        ("subgroups", ctypes.c_int),
        ("opencl_c_major", ctypes.c_int),
        ("opencl_c_minor", ctypes.c_int),
    ]


class MatmulOptions(ctypes.Structure):
    """clkit_matmul_options."""
    _fields_ = [
        ("alpha", ctypes.c_float),
        ("beta", ctypes.c_float),
        ("activation", ctypes.c_int),
        ("leaky_slope", ctypes.c_float),
        ("provider", ctypes.c_int),
        ("config", ctypes.c_char_p),
        ("allow_tf32", ctypes.c_int),
        ("exact_f32", ctypes.c_int),
    ]


class CrossEntropyOptions(ctypes.Structure):
    """clkit_cross_entropy_options."""
    _fields_ = [
        ("ignore_index", ctypes.c_int64),
        ("reduction", ctypes.c_int),
        ("label_smoothing", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("z_loss_scale", ctypes.c_float),
        ("z_loss", ctypes.POINTER(Tensor)),
    ]


class AttentionOptions(ctypes.Structure):
    """clkit_attention_options."""
    _fields_ = [
        ("causal", ctypes.c_int),
        ("scale", ctypes.c_float),
    ]


TUNE_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_char_p, ctypes.c_double, ctypes.c_double)
TUNED_ENTRY_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                  ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                  ctypes.c_double)


class TuneOptions(ctypes.Structure):
    """clkit_tune_options."""
    _fields_ = [
        ("budget_s", ctypes.c_double),
        ("progress", TUNE_PROGRESS),
        ("user", ctypes.c_void_p),
    ]


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)
BENCHMARK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class BenchmarkOptions(ctypes.Structure):
    """clkit_benchmark_options."""
    _fields_ = [
        ("timing", ctypes.c_int),
        ("warmup_ms", ctypes.c_double),
        ("rep_ms", ctypes.c_double),
        ("wall_limit_ms", ctypes.c_double),
        ("min_reps", ctypes.c_int),
        ("max_reps", ctypes.c_int),
        ("reps", ctypes.c_int),
        ("flush", ctypes.c_int),
        ("flush_bytes", ctypes.c_uint64),
        ("flush_buffer", c_cl_mem),
        ("nquantiles", ctypes.c_int),
        ("quantiles", ctypes.c_double * CLKIT_BENCHMARK_MAX_QUANTILES),
        ("reserved", ctypes.c_uint64 * 8),
    ]


class BenchmarkResult(ctypes.Structure):
    """clkit_benchmark_result."""
    _fields_ = [
        ("median_ms", ctypes.c_double),
        ("p20_ms", ctypes.c_double),
        ("p80_ms", ctypes.c_double),
        ("min_ms", ctypes.c_double),
        ("max_ms", ctypes.c_double),
        ("mean_ms", ctypes.c_double),
        ("quantile_ms", ctypes.c_double * CLKIT_BENCHMARK_MAX_QUANTILES),
        ("timing", ctypes.c_int),
        ("reps", ctypes.c_int),
        ("warmup", ctypes.c_int),
        ("batch", ctypes.c_int),
        ("calls", ctypes.c_int),
        ("flush_bytes", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 8),
    ]


# ---- prototypes ----

_ctx = ctypes.c_void_p
_T = ctypes.POINTER(Tensor)
_st = ctypes.c_int
_PROTOTYPES = {
    "clkit_context_create": (_st, [ctypes.POINTER(_ctx), ctypes.POINTER(Options)]),
    "clkit_context_from_queue": (_st, [ctypes.POINTER(_ctx), ctypes.c_void_p]),
    "clkit_context_release": (None, [_ctx]),
    "clkit_context_cl": (_st, [_ctx, ctypes.POINTER(ctypes.c_void_p),
                               ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]),
    "clkit_finish": (_st, [_ctx]),
    "clkit_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "clkit_version": (ctypes.c_char_p, []),
    "clkit_last_error": (ctypes.c_char_p, [_ctx]),
    "clkit_device_props": (_st, [_ctx, ctypes.POINTER(DeviceProps)]),
    "clkit_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    "clkit_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "clkit_fast_paths": (_st, [_ctx, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint)]),
    "clkit_profile_begin": (_st, [_ctx]),
    "clkit_profile_end": (_st, [_ctx, ctypes.POINTER(ctypes.c_double)]),
    "clkit_scratch_peak": (ctypes.c_uint64, [_ctx, ctypes.c_int]),
    "clkit_context_trim": (None, [_ctx]),
    "clkit_tensor_contiguous": (Tensor, [c_cl_mem, ctypes.c_int, ctypes.c_int,
                                         ctypes.POINTER(ctypes.c_int64)]),
    "clkit_add": (_st, [_ctx, _T, _T, _T]),
    "clkit_copy": (_st, [_ctx, _T, _T]),
    "clkit_rgb_to_gray": (_st, [_ctx, _T, _T]),
    "clkit_swizzle2d": (_st, [_ctx, _T, _T, ctypes.c_int]),
    "clkit_dropout": (_st, [_ctx, _T, _T, ctypes.c_float, ctypes.c_uint64]),
    "clkit_softmax": (_st, [_ctx, _T, _T]),
    "clkit_matmul_defaults": (MatmulOptions, []),
    "clkit_matmul": (_st, [_ctx, _T, _T, _T, ctypes.POINTER(MatmulOptions)]),
    "clkit_layernorm_forward": (_st, [_ctx, _T, _T, _T, ctypes.c_float, _T, _T, _T]),
    "clkit_layernorm_backward": (_st, [_ctx, _T, _T, _T, _T, _T, _T, _T, _T]),
    "clkit_cross_entropy_defaults": (CrossEntropyOptions, []),
    "clkit_cross_entropy": (_st, [_ctx, _T, _T, ctypes.POINTER(CrossEntropyOptions), _T, _T]),
    "clkit_linear_cross_entropy": (_st, [_ctx, _T, _T, _T, _T,
                                         ctypes.POINTER(CrossEntropyOptions), _T, _T, _T, _T]),
    "clkit_attention_defaults": (AttentionOptions, []),
    "clkit_attention_forward": (_st, [_ctx, _T, _T, _T, ctypes.POINTER(AttentionOptions),
                                      _T, _T]),
    "clkit_attention_backward": (_st, [_ctx, _T, _T, _T, _T, _T, _T,
                                       ctypes.POINTER(AttentionOptions), _T, _T, _T]),
    "clkit_tune_matmul": (_st, [_ctx, _T, _T, _T, ctypes.POINTER(MatmulOptions),
                                ctypes.POINTER(TuneOptions)]),
    "clkit_tune_attention_forward": (_st, [_ctx, _T, _T, _T, ctypes.POINTER(AttentionOptions),
                                           _T, _T, ctypes.POINTER(TuneOptions)]),
    "clkit_tune_attention_backward": (_st, [_ctx, _T, _T, _T, _T, _T, _T,
                                            ctypes.POINTER(AttentionOptions), _T, _T, _T,
                                            ctypes.POINTER(TuneOptions)]),
    "clkit_cache_dir": (ctypes.c_char_p, [_ctx]),
    "clkit_tuned_list": (_st, [_ctx, TUNED_ENTRY_FN, ctypes.c_void_p]),
    "clkit_tuned_export": (_st, [_ctx, ctypes.c_char_p]),
    "clkit_tuned_import": (_st, [_ctx, ctypes.c_char_p]),
    "clkit_f32_to_f16": (ctypes.c_uint16, [ctypes.c_float]),
    "clkit_f16_to_f32": (ctypes.c_float, [ctypes.c_uint16]),
    "clkit_f32_to_bf16": (ctypes.c_uint16, [ctypes.c_float]),
    "clkit_bf16_to_f32": (ctypes.c_float, [ctypes.c_uint16]),
    "clkit_set_log_callback": (None, [LOG_FN, ctypes.c_void_p]),
    "clkit_wait_events": (_st, [_ctx, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]),
    "clkit_enqueue_marker": (_st, [_ctx, ctypes.POINTER(ctypes.c_void_p)]),
    "clkit_benchmark_defaults": (BenchmarkOptions, []),
    "clkit_benchmark_flush_bytes": (ctypes.c_uint64, [_ctx]),
    "clkit_benchmark": (_st, [_ctx, BENCHMARK_FN, ctypes.c_void_p, ctypes.POINTER(BenchmarkOptions),
                              ctypes.POINTER(BenchmarkResult)]),
}

# ---- loading ----


class LibraryNotFoundError(OSError):
    """libclkit could not be found or loaded."""


def _candidates():
    """(description, path or name) in the order they are tried."""
    env = os.environ.get("CLKIT_LIBRARY")
    if env:
        p = Path(env)
        # a directory holding the library is accepted as well as the file itself
        if p.is_dir():
            yield "CLKIT_LIBRARY (directory)", str(p / "libclkit.so")
        else:
            yield "CLKIT_LIBRARY", env
        return  # an explicit choice is never silently replaced by another library
    found = ctypes.util.find_library("clkit")
    if found:
        yield "ctypes.util.find_library('clkit')", found
    yield "the loader's search path (LD_LIBRARY_PATH, ld.so.cache)", "libclkit.so.1"
    here = Path(__file__).resolve().parent
    roots = []
    for base in (here.parent.parent, Path.cwd(), Path.cwd().parent):
        if base not in roots:
            roots.append(base)
    for base in roots:  # a source checkout: python/clkit -> repo/build
        yield "build directory", str(base / "build" / "libclkit.so")


_lib = None


def load():
    """The loaded libclkit (a ctypes.CDLL with every prototype set); loads it on first use."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for what, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s: %s (no such file)" % (what, path))
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s: %s (%s)" % (what, path, e))
            continue
        missing = [n for n in _PROTOTYPES if not hasattr(lib, n)]
        if missing:
            tried.append("%s: %s (not libclkit %s: lacks %s)" % (what, path, VERSION, missing[0]))
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            f = getattr(lib, name)
            f.restype = restype
            f.argtypes = argtypes
        _lib = lib
        return lib
    raise LibraryNotFoundError(
        "libclkit not found. Build it (meson setup build && meson compile -C build) and set "
        "CLKIT_LIBRARY to the path of build/libclkit.so, or install it (meson install -C "
        "build). Tried:\n  " + "\n  ".join(tried))


def library_path():
    """The file name libclkit was loaded from (as given to the loader)."""
    return load()._name
