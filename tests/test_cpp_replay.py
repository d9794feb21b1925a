"""C++ kernels timed alone: a graph's launches are recorded once, then each is replayed on restored inputs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from stages.cpp_replay import record_launches, time_launches, writable_arguments
from stages.kernels import load_module

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

    class Runner:
        def call(self, args):
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
