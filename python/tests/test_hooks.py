"""clkit.h's hooks from Python: the log callback, events between queues and clkit's ops, and
clkit_benchmark (Context.benchmark)."""
import threading

import numpy as np
import pytest

import clkit


def test_log_callback_gets_the_diagnostics():
    got = []
    clkit.set_log_callback(lambda level, message: got.append((level, message)))
    try:
        with pytest.raises(clkit.NoDeviceError):
            clkit.Context(device="no-such-device-anywhere")
    finally:
        clkit.set_log_callback(None)
    assert any(level == "error" and "no-such-device-anywhere" in text for level, text in got), got
    n = len(got)
    with pytest.raises(clkit.NoDeviceError):
        clkit.Context(device="no-such-device-anywhere")
    assert len(got) == n  # back on stderr


def test_log_callback_from_other_threads():
    got, lock = [], threading.Lock()

    def keep(level, message):
        with lock:
            got.append(level)

    def fail_once():
        with pytest.raises(clkit.NoDeviceError):
            clkit.Context(device="no-such-device-anywhere")

    clkit.set_log_callback(keep)
    try:
        threads = [threading.Thread(target=fail_once) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        clkit.set_log_callback(None)
    assert got.count("error") >= 4


def test_marker_and_wait_events(ctx, rng):
    x = rng.standard_normal(4096).astype(np.float32)
    xd = ctx.to_device(x)
    ctx.add(xd, xd, out=xd)
    marker = ctx.enqueue_marker()
    marker.wait()
    ctx.wait_events(marker)
    ctx.wait_events()  # none: nothing to do
    ctx.add(xd, xd, out=xd)
    np.testing.assert_array_equal(xd.get(), 4 * x)
    with pytest.raises(clkit.NullArgumentError):
        ctx.wait_events(0)
    assert "NULL" in ctx.last_error or "null" in ctx.last_error


def test_benchmark_times_device_work(ctx, rng):
    a = ctx.to_device(rng.standard_normal((256, 256)).astype(np.float32))
    c = ctx.empty((256, 256), np.float32)
    calls = []

    def work(context):
        calls.append(context)
        context.matmul(a, a, out=c)

    r = ctx.benchmark(work, reps=5, flush=False, quantiles=(0.5, 0.9))
    assert isinstance(r, clkit.BenchmarkResult)
    assert r.reps == 5 and r.calls == len(calls) and all(x is ctx for x in calls)
    assert r.timing == "events"  # the fixture's context profiles
    assert 0 < r.min_ms <= r.p20_ms <= r.median_ms <= r.p80_ms <= r.max_ms
    assert len(r.quantile_ms) == 2 and r.quantile_ms[0] == pytest.approx(r.median_ms)
    assert r.flush_bytes == 0 and r.batch == 1
    wall = ctx.benchmark(work, timing="wall", reps=3, flush_bytes=1 << 20)
    assert wall.timing == "wall" and wall.reps == 3 and wall.flush_bytes == 1 << 20
    assert ctx.benchmark_flush_bytes() > 0


def test_benchmark_raises_what_fn_raises(ctx):
    def broken(context):
        raise KeyError("from fn")

    with pytest.raises(KeyError, match="from fn"):
        ctx.benchmark(broken, reps=3)
    x = ctx.to_device(np.ones(8, np.float32))
    y = ctx.to_device(np.ones(9, np.float32))
    with pytest.raises(clkit.ShapeError):  # a clkit failure inside fn keeps its own class
        ctx.benchmark(lambda context: context.add(x, y, out=x), reps=3)


def test_benchmark_refuses_bad_options(ctx):
    x = ctx.to_device(np.ones(8, np.float32))
    with pytest.raises(clkit.InvalidValueError):
        ctx.benchmark(lambda context: context.add(x, x, out=x), min_reps=10, max_reps=2)
    with pytest.raises(ValueError):
        ctx.benchmark(lambda context: None, timing="sometimes")
    with pytest.raises(TypeError):
        ctx.benchmark(lambda context: None, repeats=3)
    with pytest.raises(ValueError):
        ctx.benchmark(lambda context: None, quantiles=[0.5] * 9)


def test_benchmark_stops_on_keyboard_interrupt(ctx):
    calls = []

    def interrupted(context):
        calls.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ctx.benchmark(interrupted, reps=50)
    assert len(calls) == 1
