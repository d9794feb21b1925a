"""C++ kernels timed alone: a graph's launches are recorded once, then each is replayed on restored inputs."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from stages import kernels
from stages.kernels import LOAD, Job, KernelWorker, WallTimer, load_module
from stages.support.cpp_replay import (
    PLACEMENT_SPAN,
    kernel_samples,
    placed,
    record_launches,
    time_launches,
    writable_arguments,
)

pytestmark = pytest.mark.xdist_group("torch-in-process")  # torch in the test process: one worker imports it

# A stand-in for a compiled graph module: the same shape of source (kernels bound with their argument types, a
# Runner whose call() launches them), with Python kernels that open the profiler event Inductor's C++ kernels
# open when compiled with cpp.enable_kernel_profile.
GRAPH = textwrap.dedent('''
    import torch

    class _Kernel:
        def __init__(self, name, body):
            self.name, self.body = name, body

        def __call__(self, *args):
            with torch.profiler.record_function(f"graph_0_{self.name}"):
                self.body(*args)

    class _AsyncCompile:
        def cpp_pybinding(self, arg_types, source):
            name = source.split("def ")[1].split("(")[0]
            namespace = {"torch": torch}
            exec(source, namespace)
            return _Kernel(name, namespace[name])

    async_compile = _AsyncCompile()

    cpp_fused_scale_0 = async_compile.cpp_pybinding(['float*', 'const float*'], r\'\'\'
    def cpp_fused_scale_0(in_out_ptr0, in_ptr0):
        in_out_ptr0.mul_(2.0).add_(in_ptr0)
    \'\'\')

    cpp_fused_copy_1 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
    def cpp_fused_copy_1(in_ptr0, out_ptr0):
        out_ptr0.copy_(in_ptr0)
    \'\'\')

    calls = []  # one entry per call() of the graph

    class Runner:
        def call(self, args):
            calls.append(len(calls))
            arg0_1, = args
            args.clear()
            buf0 = torch.ones(4)
            cpp_fused_scale_0(buf0, arg0_1)
            buf1 = torch.empty(4)
            cpp_fused_copy_1(buf0, buf1)
            cpp_fused_scale_0(buf1, arg0_1)
            return (buf1,)

    call = Runner().call

    def get_args():
        return [torch.arange(4, dtype=torch.float32)]
''')


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    path = tmp_path / "0_inference_demo.py"
    path.write_text(GRAPH)
    return path


def test_only_pointers_not_declared_const_are_restored(graph: Path) -> None:
    assert writable_arguments(str(graph)) == {"cpp_fused_scale_0": {0}, "cpp_fused_copy_1": {1}}


def test_every_launch_is_recorded_with_what_it_may_write_as_it_was_before(graph: Path) -> None:
    module = load_module(str(graph), "replay_demo_record")

    launches = record_launches(module, module.get_args(), ["cpp_fused_scale_0", "cpp_fused_copy_1"],
                               writable_arguments(str(graph)))

    assert [launch.kernel for launch in launches] == ["cpp_fused_scale_0", "cpp_fused_copy_1", "cpp_fused_scale_0"]
    first, _, third = launches
    assert first.saved[0][1].tolist() == [1.0, 1.0, 1.0, 1.0]  # buf0 before scale: ones
    assert third.saved[0][1].tolist() == [2.0, 3.0, 4.0, 5.0]  # buf1 before its scale: the copy of buf0
    assert module.cpp_fused_scale_0.__class__.__name__ == "_Kernel"  # the module's kernels are put back


def test_an_in_place_kernel_computes_on_the_same_values_at_every_replay(graph: Path) -> None:
    """Without the restore, ``x = 2x + a`` on its own output would grow at every call (a different computation)."""
    module = load_module(str(graph), "replay_demo_inplace")
    launches = record_launches(module, module.get_args(), ["cpp_fused_scale_0", "cpp_fused_copy_1"],
                               writable_arguments(str(graph)))
    third = launches[2]
    third.replay()
    once = third.args[0].clone()
    for _ in range(5):
        third.replay()
    assert third.args[0].tolist() == once.tolist() == [4.0, 7.0, 10.0, 13.0]


def test_samples_are_each_kernels_own_profiler_events_one_per_launch_and_iteration(graph: Path) -> None:
    module = load_module(str(graph), "replay_demo_time")
    launches = record_launches(module, module.get_args(), ["cpp_fused_scale_0", "cpp_fused_copy_1"],
                               writable_arguments(str(graph)))

    samples = time_launches(launches, warmup=2, iterations=7)

    assert {k: len(v) for k, v in samples.items()} == {"cpp_fused_scale_0": 14, "cpp_fused_copy_1": 7}
    assert all(0 < ms < 100 for values in samples.values() for ms in values)


def test_samples_are_torchs_own_self_cpu_time_of_each_kernel_event(graph: Path) -> None:
    """Read from the raw events, a sample is what torch's event tree gives: the kernel event's time less the ops
    inside it (here the kernels' own mul_, add_ and copy_ calls), in the order the launches ran."""
    from torch.profiler import ProfilerActivity, profile

    module = load_module(str(graph), "replay_demo_self_time")
    launches = record_launches(module, module.get_args(), ["cpp_fused_scale_0", "cpp_fused_copy_1"],
                               writable_arguments(str(graph)))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            for launch in launches:
                launch.replay()

    fast = kernel_samples(prof.profiler.kineto_results.events())

    tree: dict[str, list[float]] = {}
    for event in prof.events():
        if event.name.startswith("graph_0_"):
            assert event.cpu_children  # the ops inside the kernel: self time < total time
            tree.setdefault(event.name.removeprefix("graph_0_"), []).append(event.self_cpu_time_total / 1000.0)
    assert fast.keys() == tree.keys() == {"cpp_fused_scale_0", "cpp_fused_copy_1"}
    for name, samples in tree.items():
        assert fast[name] == pytest.approx(samples, rel=1e-9, abs=1e-12)


def test_a_visits_window_holds_the_kernels_events_and_what_ran_inside_them_not_the_restores_or_copies(
        graph: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restores before each replay and the placement copies are not timed, so they record no event (they were
    four in five of a visit's events, and reading them most of its overhead); the ops inside a kernel still do."""
    import random

    from stages.support import cpp_replay

    module = load_module(str(graph), "replay_demo_unrecorded")
    launches = record_launches(module, module.get_args(), ["cpp_fused_scale_0", "cpp_fused_copy_1"],
                               writable_arguments(str(graph)))
    assert all(launch.saved for launch in launches)  # every launch restores something first
    windows: list[list[tuple[str, int, int]]] = []
    read = cpp_replay.kernel_samples

    def kept(events):
        events = list(events)
        windows.append([(e.name(), e.start_ns(), e.end_ns()) for e in events])
        return read(events)

    monkeypatch.setattr(cpp_replay, "kernel_samples", kept)

    samples = time_launches(launches, warmup=1, iterations=2, rng=random.Random(3))

    assert {k: len(v) for k, v in samples.items()} == {"cpp_fused_scale_0": 4, "cpp_fused_copy_1": 2}
    (events,) = windows
    spans = [(start, end) for name, start, end in events if name.startswith("graph_0_")]
    others = [(name, start, end) for name, start, end in events if not name.startswith("graph_0_")]
    assert len(spans) == 9 and others  # 3 launches x 3 replays; the kernels' own ops (mul_, add_, copy_)
    assert all(any(s <= start and end <= e for s, e in spans) for _, start, end in others), others


def graph_job(graph: Path, kind: str = "graph") -> Job:
    return Job(0, kind, str(graph), {"cpp_fused_scale_0": "cpp/a.cpp", "cpp_fused_copy_1": "cpp/b.cpp"},
               warmup=2, iterations=3, timeout_s=60)


def test_a_worker_records_a_graphs_launches_once_in_the_prepare_and_every_visit_replays_them(graph: Path) -> None:
    """A paired round's prepare loads the module and records its launches; its many visits then only time."""
    worker = KernelWorker(WallTimer())
    worker.execute(graph_job(graph, LOAD))
    module = worker.modules[str(graph)]
    assert module.calls == [0]

    visits = [worker.execute(graph_job(graph))["results"] for _ in range(3)]

    assert module.calls == [0]  # the graph's call() ran once, in the prepare
    assert [{k: len(v["samples"]) for k, v in r.items()} for r in visits] == \
        [{"cpp_fused_scale_0": 6, "cpp_fused_copy_1": 3}] * 3
    (launches,) = worker.recorded.values()
    launches[2].replay()
    assert launches[2].args[0].tolist() == [4.0, 7.0, 10.0, 13.0]  # the in-place kernel: the same values each visit


def test_past_the_byte_limit_a_worker_records_the_launches_again_at_every_visit(
        graph: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "RECORDED_BYTES_MAX", 0)
    worker = KernelWorker(WallTimer())
    worker.execute(graph_job(graph, LOAD))

    for _ in range(2):
        assert "samples" in worker.execute(graph_job(graph))["results"]["cpp_fused_copy_1"]

    assert worker.modules[str(graph)].calls == [0, 1, 2]
    assert worker.recorded == {}


def test_without_a_prepare_each_visit_records_its_own_launches_and_keeps_nothing(graph: Path) -> None:
    """``invoke kernels`` visits every job once: nothing to reuse, so no buffers are held past the visit."""
    worker = KernelWorker(WallTimer())

    for _ in range(2):
        assert "samples" in worker.execute(graph_job(graph))["results"]["cpp_fused_scale_0"]

    assert worker.modules[str(graph)].calls == [0, 1]
    assert (worker.recorded, worker.recorded_bytes) == ({}, 0)


def test_each_kernel_is_replayed_alone_its_launches_back_to_back_and_only_the_timed_replays_are_samples(
        graph: Path) -> None:
    """What ran just before a kernel moves its time (a graph's other launches differ between base and PR), so a
    visit replays one kernel's launches warm-up + iterations times before the next kernel's."""
    module = load_module(str(graph), "replay_demo_alone")
    launches = record_launches(module, module.get_args(), ["cpp_fused_scale_0", "cpp_fused_copy_1"],
                               writable_arguments(str(graph)))
    order: list[str] = []
    for launch in launches:
        original = launch.function
        launch.function = lambda *args, name=launch.kernel, run=original: (order.append(name), run(*args))

    samples = time_launches(launches, warmup=3, iterations=5)

    assert order == ["cpp_fused_scale_0"] * 2 * 8 + ["cpp_fused_copy_1"] * 8
    assert {k: len(v) for k, v in samples.items()} == {"cpp_fused_scale_0": 10, "cpp_fused_copy_1": 5}


def test_a_visit_places_a_kernels_buffers_afresh_and_the_kernel_computes_the_same_there(graph: Path) -> None:
    """Where a side's recording put a kernel's buffers is fixed for a worker's life and differs between the sides;
    each visit times the kernel on copies placed at random, with the same values, aliasing and restores."""
    import random

    module = load_module(str(graph), "replay_demo_placed")
    launches = record_launches(module, module.get_args(), ["cpp_fused_scale_0", "cpp_fused_copy_1"],
                               writable_arguments(str(graph)))
    rng = random.Random(7)
    copies = [placed(launches, rng) for _ in range(4)]

    for moved in copies:
        for launch in moved:
            launch.replay()
        scale, copy, scale_again = moved
        assert scale_again.args[0].tolist() == [4.0, 7.0, 10.0, 13.0]  # restored to its recorded value, then scaled
        assert copy.args[0].data_ptr() == scale.args[0].data_ptr()  # buf0: written by the one, read by the other
        assert scale.saved[0][0].data_ptr() == scale.args[0].data_ptr()  # the restore goes to the copy
    offsets = [moved[0].args[0].data_ptr() - moved[0].args[0].untyped_storage().data_ptr() for moved in copies]
    drawn = random.Random(7)
    # per copy: buf0, its value before the first scale, arg0_1, buf1, its value before the copy, and before the scale
    draws = [drawn.randrange(0, PLACEMENT_SPAN, 64) for _ in range(6 * len(copies))]
    assert offsets == draws[::6]


def test_a_job_naming_another_cache_loads_its_module_from_that_cache_and_the_worker_keeps_its_own(
        graph: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PR's worker times an identical-code pair from base's graph module: its compiled kernels must come from
    base's Inductor cache (the lookup reads TORCHINDUCTOR_CACHE_DIR while the module is imported), and the PR's
    own modules afterwards from the PR's."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "pr-cache"))
    source = "import os\nloaded_from = os.environ.get('TORCHINDUCTOR_CACHE_DIR')\n" + GRAPH
    base_graph, pr_graph = tmp_path / "1_inference_base.py", tmp_path / "1_inference_pr.py"
    base_graph.write_text(source)
    pr_graph.write_text(source)
    worker = KernelWorker(WallTimer())

    worker.execute(Job(0, LOAD, str(base_graph), {"cpp_fused_copy_1": "cpp/b.cpp"}, 2, 3, 60,
                       cache_dir=str(tmp_path / "base-cache")))
    worker.execute(Job(1, LOAD, str(pr_graph), {"cpp_fused_copy_1": "cpp/b.cpp"}, 2, 3, 60))

    assert worker.modules[str(base_graph)].loaded_from == str(tmp_path / "base-cache")
    assert worker.modules[str(pr_graph)].loaded_from == str(tmp_path / "pr-cache")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "pr-cache")
