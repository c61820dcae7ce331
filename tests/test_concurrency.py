"""Nothing process-global in tritonconv breaks under several threads or processes: the plan
caches, launch plans and compiled-kernel handles (``caches.BoundedCache``), and the measured
choices of benchmark mode with their on-disk file shared by processes (DDP ranks, parallel jobs).
"""

import json
import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn.functional as F

import tritonconv as tc
from tritonconv import caches, choice, functional
from tritonconv.testing import DEVICE, assert_close

# (input shape, weight shape, stride, padding, dilation, groups, algo): one per thread, each a
# different call signature, together every convolution algorithm
CASES = [
    ((2, 4, 7, 6), (8, 4, 3, 3), 1, 1, 1, 1, "im2col_gemm"),
    ((1, 16, 5, 5), (16, 16, 3, 3), 2, 1, 1, 1, "implicit_gemm"),
    ((2, 6, 6, 5), (4, 3, 2, 3), 1, (1, 0), 2, 2, "direct"),
    ((1, 8, 6, 6), (8, 1, 3, 3), 1, 1, 1, 8, "depthwise"),
    ((1, 3, 5, 7), (5, 3, 1, 3), (1, 2), 0, 1, 1, "auto"),
    ((2, 4, 4, 4), (6, 2, 3, 1), 1, (0, 1), 1, 2, "auto"),
]


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """Empty caches and a private choice file; benchmark mode off afterwards."""
    monkeypatch.setenv("TRITONCONV_CACHE_DIR", str(tmp_path))
    choice.forget_measurements()
    tc.clear_caches()
    yield tmp_path
    tc.set_benchmark(None)
    choice.forget_measurements()
    tc.clear_caches()


def _convolve(case, seed: int, barrier: threading.Barrier | None = None, grads: bool = True):
    """One case: forward twice (plan built, then replayed) and the gradients, vs float64."""
    xs, ws, stride, padding, dilation, groups, algo = case
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(xs, generator=g, dtype=torch.float64)
    w = torch.randn(ws, generator=g, dtype=torch.float64)
    b = torch.randn(ws[0], generator=g, dtype=torch.float64)
    ref = F.conv2d(x, w, b, stride, padding, dilation, groups)
    x32, w32, b32 = (t.float().to(DEVICE) for t in (x, w, b))
    if barrier is not None:
        barrier.wait()  # every thread plans its first call at the same moment
    conv = (x32, w32, b32, stride, padding, dilation, groups)
    with torch.no_grad():
        first = tc.conv2d(*conv, algo=algo)
        again = tc.conv2d(*conv, algo=algo)
    reduction = ws[1] * ws[2] * ws[3]
    assert_close(first, ref, reduction=reduction, name=f"{algo} forward")
    assert_close(again, ref, reduction=reduction, name=f"{algo} forward (replayed)")
    if not grads:
        return
    x32.requires_grad_()
    w32.requires_grad_()
    dy = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    gx, gw = torch.autograd.grad(tc.conv2d(*conv, algo=algo), (x32, w32), dy.float().to(DEVICE))
    rx, rw = torch.autograd.grad(
        F.conv2d(x.requires_grad_(), w.requires_grad_(), b, stride, padding, dilation, groups),
        (x, w),
        dy,
    )
    assert_close(gx, rx, reduction=ws[0] * ws[2] * ws[3], name=f"{algo} input grad")
    assert_close(gw, rw, reduction=ref[0, 0].numel() * xs[0], name=f"{algo} weight grad")


def test_threads_convolve_at_once(fresh):
    """Six threads, six signatures, every algorithm, planned at the same moment: each result
    is right, and each signature has exactly one plan without gradients and one with (no lost
    or doubled entries; a call that needs gradients has a plan of its own)."""
    barrier = threading.Barrier(len(CASES))
    with ThreadPoolExecutor(len(CASES)) as pool:
        futures = [pool.submit(_convolve, case, i, barrier) for i, case in enumerate(CASES)]
        for future in futures:
            future.result()
    assert len(functional._CONV_PLANS) == 2 * len(CASES)
    for cache in caches._ALL:
        assert len(cache) <= cache.size, cache.name
    # the plans the threads built serve the same calls again, in this thread
    for i, case in enumerate(CASES):
        _convolve(case, i, grads=False)
    assert len(functional._CONV_PLANS) == 2 * len(CASES)


def test_threads_share_one_module_and_its_plan_memo(fresh):
    """Four threads call one module at once on inputs of three signatures (as
    ``nn.DataParallel``'s replicas share a module's attributes): its last-plan memo
    (``functional.PlanMemo``) is one reference, so a thread at worst misses it; every output
    is its own input's."""
    module = tc.nn.Conv2d(4, 6, 3, padding=1).to(DEVICE, torch.float64)
    shapes = [(1, 4, 5, 5), (2, 4, 6, 3), (1, 4, 7, 4)]

    def work(worker: int):
        generator = torch.Generator().manual_seed(worker)
        for i in range(12):
            x = torch.randn(shapes[(worker + i) % 3], dtype=torch.float64, generator=generator)
            weight, bias = module.weight.detach().cpu(), module.bias.detach().cpu()
            expected = F.conv2d(x, weight, bias, padding=1)
            assert_close(module(x.to(DEVICE)), expected, reduction=36)

    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(work, w) for w in range(4)]:
            future.result()  # (a thread's failure raised here)
    assert module._plan_memo.entry is not None


def test_bounded_cache_stays_bounded_under_threads():
    cache = caches.BoundedCache("test: hammered", size=16)
    try:

        def hammer(worker: int):
            for i in range(2000):
                key = (worker, i % 40)
                cache.put(key, key)
                found = cache.get((worker, (i * 7) % 40))
                assert found is None or found == (worker, (i * 7) % 40)
                assert len(cache) <= 16

        with ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(hammer, w) for w in range(4)]:
                future.result()
        assert len(cache) <= 16
        assert all(key == value for key, value in cache.entries.items())
    finally:
        caches._ALL.remove(cache)


def test_threads_measure_and_record_choices_at_once(fresh, monkeypatch):
    """Benchmark mode in four threads of one process, two of them on one signature: each
    measures and writes the one choice file; memory and file agree. (Here and in the
    processes, each algorithm is timed once after its warm-up: the timings do not matter, the
    interpreter is slow.)"""
    tc.set_benchmark(True)
    monkeypatch.setattr(choice, "MEASURE_REPS", 1)
    shapes = [((1, 4, 3, 3), (8, 4, 3, 3)), ((1, 4, 3, 4), (8, 4, 1, 1))]
    barrier = threading.Barrier(4)

    def measure(worker: int):
        x = torch.randn(shapes[worker % 2][0], device=DEVICE)
        w = torch.randn(shapes[worker % 2][1], device=DEVICE)
        barrier.wait()
        return tc.explain(x, w, padding=worker // 3)  # workers 0 and 2: the same call

    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(measure, range(4)))
    assert all(c.timings and c.algo in c.timings for c in found)
    on_disk = json.loads(choice.cache_file().read_text())
    assert set(on_disk) == set(choice._memory)
    assert len(on_disk) == 3
    assert not list(fresh.glob("*.tmp"))


# --------------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------------

# (input shape, weight shape): the first measured by both processes, the others by one each
PROCESS_SHAPES = [
    ((1, 4, 3, 3), (8, 4, 3, 3)),
    ((1, 4, 3, 4), (8, 4, 3, 3)),
    ((1, 4, 4, 3), (8, 4, 3, 3)),
]


def _process_worker(cache_dir: str, tag: int, barrier, results) -> None:
    """In a spawned process: benchmark mode, measure at the same moment as the other process,
    then add choices directly as fast as possible; report every key this process recorded."""
    import os

    os.environ["TRITONCONV_CACHE_DIR"] = cache_dir
    try:
        import tritonconv as tc
        from tritonconv import choice

        tc.set_benchmark(True)
        choice.MEASURE_REPS = 1  # quick (see above)
        from tritonconv.testing import DEVICE

        shapes = [PROCESS_SHAPES[0], PROCESS_SHAPES[1 + tag]]
        # on the kernels' device (CUDA on the GPU machine, where CPU tensors run PyTorch's CPU
        # ops and nothing would be measured)
        tensors = [
            (torch.randn(xs, device=DEVICE), torch.randn(ws, device=DEVICE)) for xs, ws in shapes
        ]
        keys = [f"direct store {tag}-{i}" for i in range(25)]
        barrier.wait(timeout=120)
        for x, w in tensors:
            tc.conv2d(x, w, padding=1)
        for key in keys:
            choice._store(key, {"algo": "direct", "timings": {"direct": 1.0}})
        results.put((tag, sorted(choice._memory) + keys, None))
    except BaseException as exc:  # reported to the test, which fails with it
        results.put((tag, [], repr(exc)))


def test_processes_write_the_choice_file_at_once(fresh):
    """Two spawned processes measure (one signature in common) and add choices to one shared
    choice file at the same time, while this process keeps reading it: every read finds valid
    JSON (the file is replaced atomically), and the final file holds every choice of both."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(str(fresh), tag, barrier, results))
        for tag in (0, 1)
    ]
    for p in procs:
        p.start()
    reads, bad = 0, []
    while any(p.is_alive() for p in procs) and results.qsize() < 2:
        try:
            text = choice.cache_file().read_text()
        except FileNotFoundError:
            time.sleep(0.001)
            continue
        reads += 1
        try:
            assert isinstance(json.loads(text), dict)
        except (ValueError, AssertionError):
            bad.append(text[:200])
        time.sleep(0.001)
    reported = {}
    for _ in procs:
        tag, keys, error = results.get(timeout=120)
        assert error is None, f"process {tag}: {error}"
        reported[tag] = set(keys)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert not bad, f"{len(bad)} of {reads} reads found a torn file: {bad[0]!r}"
    on_disk = json.loads(choice.cache_file().read_text())
    assert set(on_disk) == reported[0] | reported[1]
    assert len(on_disk) == 3 + 2 * 25  # three signatures measured, fifty stored directly
    assert all(entry["algo"] in entry["timings"] for entry in on_disk.values())
    assert not list(fresh.glob("*.tmp"))
