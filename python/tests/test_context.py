"""The Context: device properties, fast paths, profiling, scratch, cache directory, lifetime."""
import os

import numpy as np

import clkit


def test_library():
    assert clkit.library_version() == clkit.__version__
    assert os.path.basename(clkit.library_path()).startswith("libclkit")


def test_device(ctx):
    d = ctx.device
    assert isinstance(d, clkit.Device)
    assert d.name and d.platform and d.device_version.startswith("OpenCL")
    assert d.compute_units >= 1 and d.global_mem > 0 and d.max_alloc > 0
    assert d.max_work_group >= 1 and d.warp >= 1 and d.local_mem > 0
    assert isinstance(d.is_gpu, bool)
    assert d.name in repr(ctx)
    c, q, dev = ctx.cl_handles
    assert c and q and dev


def test_fast_paths(ctx):
    for op in ("matmul", "attention", "cross_entropy", "softmax", "layernorm"):
        paths = ctx.fast_paths(op)
        assert paths <= set(clkit._lib.FAST_PATHS)
        if ctx.device.is_cpu:
            assert not paths  # vendor paths are GPU-only


def test_profile_scratch_trim(ctx):
    x = ctx.to_device(np.ones((64, 64), np.float32))
    with ctx.profile() as p:
        ctx.softmax(x, out=x)
    assert p.ms is not None and p.ms >= 0
    ctx.profile_begin()
    ctx.add(x, x, out=x)
    assert ctx.profile_end() >= 0
    assert ctx.scratch_peak() >= 0
    ctx.scratch_peak(reset=True)
    ctx.trim()
    ctx.finish()
    assert ctx.last_error == ""


def test_cache_dir(tmp_path):
    with clkit.Context(cache_dir=str(tmp_path)) as c:
        assert os.path.realpath(c.cache_dir) == os.path.realpath(str(tmp_path))
    with clkit.Context(cache_dir="") as c:
        assert c.cache_dir == ""


def test_device_selection():
    with clkit.Context() as c:
        name = c.device.name
    with clkit.Context(device="0") as c0:  # an index as CLKIT_DEVICE takes
        assert c0.device.name
    with clkit.Context(device=name.split()[0].lower()) as c1:  # a substring, any case
        assert c1.device.name == name


def test_context_manager_finishes_and_releases():
    with clkit.Context() as c:
        d = c.to_device(np.arange(6, dtype=np.float32))
        c.add(d, d, out=d)
    assert c._handle is None
    assert "released" in repr(c)
