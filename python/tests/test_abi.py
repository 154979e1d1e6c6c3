"""The ctypes mirror against include/clkit.h: struct sizes and field offsets from a C compiler,
enum values, the status list. Skipped where the header or a C compiler is missing (an
installed package without the source tree)."""
import ctypes
import os
import re
import shutil
import subprocess
import warnings

import pytest

import clkit
from clkit import _lib

HEADER_DIR = os.environ.get("CLKIT_INCLUDE_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "include")
HEADER = os.path.join(HEADER_DIR, "clkit.h")

STRUCTS = {
    "clkit_tensor": _lib.Tensor,
    "clkit_options": _lib.Options,
    "struct clkit_device_props": _lib.DeviceProps,
    "clkit_matmul_options": _lib.MatmulOptions,
    "clkit_cross_entropy_options": _lib.CrossEntropyOptions,
    "clkit_attention_options": _lib.AttentionOptions,
    "clkit_tune_options": _lib.TuneOptions,
    "clkit_benchmark_options": _lib.BenchmarkOptions,
    "clkit_benchmark_result": _lib.BenchmarkResult,
}
ENUMS = ["CLKIT_F32", "CLKIT_F16", "CLKIT_BF16", "CLKIT_U8", "CLKIT_I32", "CLKIT_I64",
         "CLKIT_ACT_NONE", "CLKIT_ACT_RELU", "CLKIT_ACT_LEAKY_RELU", "CLKIT_PROVIDER_AUTO",
         "CLKIT_PROVIDER_CLKIT", "CLKIT_PROVIDER_CLBLAST", "CLKIT_REDUCTION_MEAN",
         "CLKIT_REDUCTION_SUM", "CLKIT_REDUCTION_NONE", "CLKIT_MAX_DIMS", "CLKIT_LOG_ERROR",
         "CLKIT_LOG_WARN", "CLKIT_LOG_INFO", "CLKIT_LOG_DEBUG", "CLKIT_TIMING_AUTO",
         "CLKIT_TIMING_EVENTS", "CLKIT_TIMING_WALL", "CLKIT_TIMING_WALL_BATCHED",
         "CLKIT_BENCHMARK_MAX_QUANTILES"]

needs_header = pytest.mark.skipif(not os.path.exists(HEADER), reason="include/clkit.h not found")


@needs_header
def test_status_list_matches_header():
    text = open(HEADER).read()
    listed = re.findall(r'X\((CLKIT_\w+),\s*"([^"]*)"\)', text)
    assert [n for n, _ in listed] == list(_lib.STATUS_NAMES)
    for i, (name, words) in enumerate(listed):
        assert clkit.status_string(i) == words
        assert clkit.error_for(i).status_name == name if i else True


@needs_header
def test_struct_layout_matches_header(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "clkit.h"', 'int main(void) {']
    for cname, cls in STRUCTS.items():
        lines.append('printf("%s size %%zu\\n", sizeof(%s));' % (cname, cname))
        for f in cls._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, f[0], cname, f[0]))
    for e in ENUMS:
        lines.append('printf("%s %%d\\n", (int)%s);' % (e, e))
    lines.append('printf("clkit_status %zu\\n", sizeof(clkit_status));')
    lines.append("return 0; }")
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "abi"
    r = subprocess.run([cc, "-I", HEADER_DIR, str(src), "-o", str(exe)], capture_output=True,
                       text=True)
    if r.returncode != 0 and "CL/cl.h" in r.stderr:
        pytest.skip("OpenCL headers not installed")
    assert r.returncode == 0, r.stderr
    got = dict(line.rsplit(" ", 1) for line in
               subprocess.run([str(exe)], capture_output=True, text=True, check=True)
               .stdout.splitlines())
    for cname, cls in STRUCTS.items():
        assert int(got["%s size" % cname]) == ctypes.sizeof(cls), cname
        for f in cls._fields_:
            assert int(got["%s.%s" % (cname, f[0])]) == getattr(cls, f[0]).offset, (cname, f[0])
    for e in ENUMS:
        assert int(got[e]) == getattr(_lib, e), e
    assert int(got["clkit_status"]) == ctypes.sizeof(ctypes.c_int)


@needs_header
def test_every_function_bound():
    text = open(HEADER).read()
    declared = set(re.findall(r"^[\w ]*?\**\s*\b(clkit_[a-z0-9_]+)\(", text, re.M))
    bound = set(_lib._PROTOTYPES)
    # every binding names a function the header declares
    assert bound <= declared, bound - declared
    # functions the header gained since the bindings were written: reported, not failed, so
    # that a C-side addition does not break this suite before its binding exists
    missing = sorted(declared - bound)
    if missing:
        warnings.warn("clkit.h declares functions without a Python binding: %s"
                      % ", ".join(missing))
