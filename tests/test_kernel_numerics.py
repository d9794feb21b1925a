"""Paired kernels on identical inputs: base's kernel workers record each kernel's first launch, the PR's run their
kernel on base's recorded inputs, and the comparison finds the kernel that computes something else (with its
max error and ULP distance), while kernels of identical code give bit-identical outputs."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.kernels.numerics import CONFIG_VAR, compare_kernel_outputs, read_dump, ulp_distance, write_config
from analysis.report.summary import fail_reasons
from analysis.stats.numeric_tolerance import parse_tolerances
from stages.support.kernel_numerics import Recorder


def _graph(scale: float) -> types.SimpleNamespace:
    """A graph module of two C++-style kernels: ``add_one`` (the same on both sides) and ``scale`` (out = x * s),
    each writing its second argument."""
    module = types.SimpleNamespace()
    module.add_one = lambda x, out: out.copy_(x + 1)
    module.scale = lambda x, out: out.copy_(x * scale)

    def call(args: list[torch.Tensor]) -> None:
        (x,) = args
        buf0, buf1 = torch.empty_like(x), torch.empty_like(x)
        module.add_one(x, buf0)
        module.scale(buf0, buf1)
    module.call = call
    return module


def _side(root: Path, name: str, scale_code: str) -> Path:
    organized = root / name / "organized"
    (organized / "cpp").mkdir(parents=True)
    (organized / "cpp" / "add_one.py").write_text("out = x + 1\n")
    (organized / "cpp" / "scale.py").write_text(scale_code)
    return organized


KERNELS = {"add_one": "cpp/add_one.py", "scale": "cpp/scale.py"}
WRITES = {"add_one": {1}, "scale": {1}}


def _seeded() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(64, dtype=torch.float32)]


def _record(root: Path, monkeypatch: pytest.MonkeyPatch, pr_scale: float, pr_code: str) -> Path:
    base_org, pr_org = _side(root, "base", "out = x * 2\n"), _side(root, "pr", pr_code)
    partners = {path: path for path in KERNELS.values()}
    base_cfg = write_config(root / "base" / "kernel_outputs", base_org, None, partners)
    pr_cfg = write_config(root / "pr" / "kernel_outputs", pr_org, (root / "base" / "kernel_outputs", base_org),
                          partners)
    for config, scale in ((pr_cfg, pr_scale), (base_cfg, 2.0), (pr_cfg, pr_scale)):  # PR first: base not there yet
        monkeypatch.setenv(CONFIG_VAR, str(config))
        recorder = Recorder.from_environment()
        module = _graph(scale)
        recorder.record_graph(0, KERNELS, module, _seeded, WRITES)
        assert module.scale.__name__ == "<lambda>"  # the kernels are put back as they were
    return root


def test_the_pr_kernel_that_computes_something_else_is_found_on_base_inputs(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = _record(tmp_path, monkeypatch, 2.0 * (1 + 2**-10), "out = x * 2.002\n")
    outputs = root / "pr" / "kernel_outputs"
    assert len(list(outputs.glob("*.self.npz"))) == 2 and len(list(outputs.glob("*.cross.npz"))) == 2

    found = compare_kernel_outputs(root / "base" / "kernel_outputs", outputs, root / "base" / "organized",
                                   root / "pr" / "organized",
                                   [("add_one", "add_one", "cpp/add_one.py", "cpp/add_one.py", False),
                                    ("scale", "scale", "cpp/scale.py", "cpp/scale.py", True)],
                                   parse_tolerances("float32=1e-5"))

    assert found is not None
    scale, add_one = found.pairs  # changed code first
    assert scale.inputs == "identical (base's recorded inputs)" and not scale.passed
    x = _seeded()[0] + 1
    assert scale.max_abs == pytest.approx(float((x * 2 * 2**-10).abs().max()), rel=1e-3)
    assert 2**12 < scale.max_ulp <= 2**14  # a relative change of 2^-10 is ~2^13 float32 ulps
    assert add_one.bit_identical and add_one.passed and not add_one.code_changed
    block = found.block()
    assert (block["compared"], block["failed"], block["identical_code_bit_identical"]) == (2, 1, 1)
    assert block["worst"]["name"] == "scale"
    summary = {"numerics": {"models": None, "kernels": block}}
    assert fail_reasons(summary, "numerics") == [
        f"numerics: kernels 1 of 2 failed (worst: scale, {scale.max_ulp} ULP, max abs {scale.max_abs:.3g})"]
    recorded = read_dump(next(outputs.glob("*scale*.self.npz")))
    assert recorded.meta["dtypes"] == {"0": "float32", "1": "float32"} and set(recorded.outputs) == {1}


def test_a_kernel_whose_code_changed_but_not_its_results_is_bit_identical(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = _record(tmp_path, monkeypatch, 2.0, "out = x + x\n")

    found = compare_kernel_outputs(root / "base" / "kernel_outputs", root / "pr" / "kernel_outputs",
                                   root / "base" / "organized", root / "pr" / "organized",
                                   [("scale", "scale", "cpp/scale.py", "cpp/scale.py", True)], parse_tolerances(""))

    assert found is not None and found.pairs[0].bit_identical and found.block()["failed"] == 0


def test_ulp_distance_counts_in_the_dtype_s_own_steps() -> None:
    one = np.array([1.0, -1.0], np.float32)
    assert ulp_distance(one, np.nextafter(one, np.float32(0)), "float32") == 1
    assert ulp_distance(np.array([1.0], np.float32), np.array([1.0078125], np.float32), "bfloat16") == 1
    assert ulp_distance(np.array([0.0], np.float32), np.array([-0.0], np.float32), "float32") == 0
