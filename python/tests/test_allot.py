"""The Python package against a real broker (dry-run backend: real
sockets, grant pages and planning; nothing confined)."""

import os
import threading
import time

import pytest

import allot


def wait_for(cond, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_without_a_broker_the_cell_is_standalone_with_the_reason(tmp_path):
    cell = allot.Cell("alone", socket=str(tmp_path / "none.sock"))
    assert cell.mode == "standalone"
    assert "none.sock" in cell.reason
    g = cell.grant()
    assert g.cpus == allot.allowed_cpus()
    assert g.threads == len(g.cpus)
    with pytest.raises(RuntimeError):
        allot.Cell("strict", socket=str(tmp_path / "none.sock"), fallback=False)


def test_a_registered_cell_sees_its_grant_change(broker, neighbour):
    a = allot.Cell("first", socket=broker.socket)
    assert a.mode == "registered" and a.id > 0 and a.broker_up
    g = a.grant()
    cpus = allot.allowed_cpus()
    assert g.cpus == cpus and g.threads == len(cpus)
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to see a grant shrink")
    seen = g.generation
    got = {}

    def waiter():
        got["g"] = a.wait_change(seen, timeout=10)

    t = threading.Thread(target=waiter)
    t.start()
    b = neighbour("second")  # takes half
    t.join(15)
    assert not t.is_alive(), "wait_change did not return"
    assert got["g"].generation > seen
    assert wait_for(lambda: a.grant().threads < len(cpus))
    b.leave()
    assert wait_for(lambda: a.grant().threads == len(cpus)), "the CPUs did not come back"
    assert repr(a) == f'Cell(id={a.id}, mode="registered", threads={len(cpus)})'
    a.close()
    assert repr(a) == "Cell(closed)"
    with pytest.raises(RuntimeError, match="closed"):
        a.grant()


def test_wait_change_times_out_and_rejects_bad_timeouts(broker):
    c = allot.Cell("quiet", socket=broker.socket)
    t0 = time.monotonic()
    g = c.wait_change(timeout=0.3)
    assert 0.25 <= time.monotonic() - t0 < 5
    assert g.generation == c.grant().generation
    with pytest.raises(ValueError):
        c.wait_change(timeout=-1)
    c.close()


def test_bad_specs_and_refusals_raise_with_the_reason(broker):
    with pytest.raises(ValueError):
        allot.Cell("bad", min=4, max=2, socket=broker.socket)
    with pytest.raises(RuntimeError, match="never|refused|cannot"):
        allot.Cell("huge", min=4096, socket=broker.socket)


def test_a_time_triggered_cell_reads_its_windows(broker):
    c = allot.Cell("periodic", socket=broker.socket, fallback=False, period=0.01, budget=0.003)
    w = c.window()
    assert (w.period, w.budget) == (0.01, 0.003)
    seen = set()
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        # The window is read at some instant between `before` and `after`:
        # its next edge lies after `before`, and at most a budget (open) or
        # a period (closed) after `after`.
        before = time.monotonic_ns()
        w = c.window()
        after = time.monotonic_ns()
        assert w.edge_ns is not None and before < w.edge_ns
        if w.open:
            assert w.edge_ns <= after + 3_000_000
        else:
            assert w.edge_ns <= after + 10_000_000
        seen.add(w.open)
        time.sleep(0.0007)
    assert seen == {True, False}
    # wait_window returns once the next window has opened, never before.
    for _ in range(3):
        before = time.monotonic_ns()
        w = c.wait_window()
        after = time.monotonic_ns()
        period_ns = round(w.period * 1e9)
        opened = w.origin_ns + (after - w.origin_ns) // period_ns * period_ns
        assert opened > before, (before, after, w.origin_ns)
    c.close()
    plain = allot.Cell("plain", socket=broker.socket)
    w = plain.window()
    assert w.open and w.edge_ns is None and w.period == 0.0
    w = plain.wait_window()
    assert w.open and w.edge_ns is None
    plain.close()


def test_bad_time_contracts_raise_before_the_broker_is_asked(broker):
    for kwargs, match in [
        (dict(period=0.01), "both period and budget"),
        (dict(period=0.01, budget=0.02), "budget"),
        (dict(fraction=1.5), "outside"),
        (dict(fraction=0.5, period=0.01, budget=0.001), "choose one"),
        (dict(cpus=1), "cpus="),
        (dict(fraction=0.5, min=1), "cpus= instead"),
        (dict(period=-1.0, budget=0.001), "duration"),
    ]:
        with pytest.raises(ValueError, match=match):
            allot.Cell("bad", socket=broker.socket, **kwargs)


def test_require_confines_the_block_and_gives_back(broker, monkeypatch):
    monkeypatch.setenv("ALLOT_SOCKET", broker.socket)
    before = os.sched_getaffinity(0)
    with allot.require(cores=1) as out:
        assert out.ncores == 1 and len(out.cpus) == 1
        assert os.sched_getaffinity(0) == set(out.cpus)
    assert os.sched_getaffinity(0) == before

    @allot.require(cores=1)
    def inside():
        return os.sched_getaffinity(0)

    assert len(inside()) == 1
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError):
        allot.require()
    with pytest.raises(ValueError):
        allot.require(cpu_fraction=1.5)


def test_the_waits_that_give_back_are_the_threads_choice():
    assert allot.release_on("none") == "sync,sleep", "the paper's rule by default"
    assert allot.release_on("sync,io") == "none"
    assert allot.release_on("paper") == "sync,io"
    with pytest.raises(ValueError, match="disk"):
        allot.release_on("disk")
    assert allot.release_on("paper") == "sync,sleep", "a refused choice changes nothing"
    assert allot.given_back() == 0, "this thread never gave anything back"


def test_the_executor_runs_no_more_tasks_than_the_grant(broker, neighbour):
    cpus = allot.allowed_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    cell = allot.Cell("pool", socket=broker.socket)
    ex = allot.GrantExecutor(cell, max_workers=len(cpus))
    assert ex.workers == len(cpus)
    other = neighbour()
    assert wait_for(lambda: ex.workers == cell.threads() < len(cpus))
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def task():
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1

    for f in [ex.submit(task) for _ in range(12)]:
        f.result(10)
    assert state["peak"] == ex.workers, state
    other.leave()
    assert wait_for(lambda: ex.workers == len(cpus))
    ex.shutdown()
    cell.close()


def test_blas_pools_follow_the_grant(broker, neighbour):
    np = pytest.importorskip("numpy")
    threadpoolctl = pytest.importorskip("threadpoolctl")
    cpus = allot.allowed_cpus()
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    np.ones((64, 64)) @ np.ones((64, 64))  # the BLAS is loaded

    def blas_threads():
        return [p["num_threads"] for p in threadpoolctl.threadpool_info()
                if p["user_api"] == "blas"]

    if not blas_threads():
        pytest.skip("numpy uses no BLAS threadpoolctl knows")
    cell = allot.Cell("numpy", socket=broker.socket)
    f = allot.follow_blas(cell)
    assert wait_for(lambda: set(blas_threads()) == {len(cpus)})
    other = neighbour()
    assert wait_for(lambda: set(blas_threads()) == {cell.threads()} and cell.threads() < len(cpus)), blas_threads()
    other.leave()
    assert wait_for(lambda: set(blas_threads()) == {len(cpus)}), blas_threads()
    f.stop()
    cell.close()


def status_json(broker) -> dict:
    from conftest import allot_bin
    import json
    import subprocess
    out = subprocess.run([allot_bin(), "status", "--json", "--socket", broker.socket],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def test_memory_sizes_are_checked_and_a_broker_without_memory_control_says_so(broker):
    with pytest.raises(ValueError, match="not a size"):
        allot.Cell("bad", memory_max="2X", socket=broker.socket)
    with pytest.raises(ValueError, match="above the limit"):
        allot.Cell("bad", memory_min="8G", memory_max="2G", socket=broker.socket)
    # The dry-run backend has no memory control: refused, with the reason.
    with pytest.raises(RuntimeError, match="no memory control"):
        allot.Cell("mem", memory_max=1 << 30, socket=broker.socket, fallback=False)
    c = allot.Cell("plain", socket=broker.socket, fallback=False)
    with pytest.raises(RuntimeError, match="no memory control"):
        c.set_memory(max="1G")
    with pytest.raises(RuntimeError, match="no cache or bandwidth"):
        c.set_cache(ways=2)
    with pytest.raises(RuntimeError, match="not a percentage"):
        c.set_cache(bandwidth=150)
    c.close()


def test_a_goal_and_the_reports_that_measure_it_reach_the_broker(broker):
    c = allot.Cell("srv", socket=broker.socket, fallback=False, goal="p99=5ms")
    with pytest.raises(ValueError, match="rate=N/s"):
        c.set_goal("fast")
    with pytest.raises(ValueError):
        allot.Cell("bad", socket=broker.socket, goal="p99=0ms")
    cell = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        c.heartbeat(10)
        for _ in range(50):
            c.report_latency(0.001)
        time.sleep(0.05)
        cells = [x for x in status_json(broker)["cells"] if x["name"] == "srv"]
        perf = cells[0].get("perf") if cells else None
        if perf and perf.get("rate_per_s") and perf.get("p99_us"):
            cell = cells[0]
            break
    assert cell is not None, "the broker read the report page"
    assert cell["spec"]["goal"] == {"kind": "p99", "us": 5000}
    assert 1000 <= cell["perf"]["p99_us"] <= 1280
    assert cell["perf"]["goal_met"] is True
    c.set_goal("rate=1000000/s")
    time.sleep(0.2)
    cell = [x for x in status_json(broker)["cells"] if x["name"] == "srv"][0]
    assert cell["spec"]["goal"] == {"kind": "rate", "milli_per_s": 1000000000}
    c.close()
