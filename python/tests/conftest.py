"""Shared fixtures: one Context for the whole run (kernel builds dominate on PoCL; they are
cached in $CLKIT_CACHE_DIR), and a seeded generator per test."""
import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # refs.py
try:
    import clkit  # the installed package
except ImportError:  # not installed: the source tree beside the tests
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import clkit  # noqa: E402


def pytest_report_header(config):
    try:
        return ["clkit package: %s" % os.path.dirname(clkit.__file__),
                "clkit library: %s (%s)" % (clkit.library_path(), clkit.library_version()),
                "CLKIT_DEVICE=%s CLKIT_CACHE_DIR=%s" % (os.environ.get("CLKIT_DEVICE", ""),
                                                        os.environ.get("CLKIT_CACHE_DIR", ""))]
    except clkit.LibraryNotFoundError as e:
        return ["clkit library NOT FOUND: %s" % e]


@pytest.fixture(scope="session")
def ctx():
    c = clkit.Context(profiling=True)
    yield c
    c.release()


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))  # stable per test


@pytest.fixture(scope="session")
def tune_ctx(tmp_path_factory):
    """A context whose cache directory is private to the run: the tuner tests must not leave
    entries for their tiny shapes in the real tuned-config cache, where lookups of other shapes
    could fall back to them as the nearest tuned shape."""
    c = clkit.Context(cache_dir=str(tmp_path_factory.mktemp("clkit-cache")))
    yield c
    c.release()
