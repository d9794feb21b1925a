"""A recipe's [suite]: on a GPU recipe `invoke compare` with no suite flag runs the seed's experiment (run_hf.sh:
every model, full size, training, AMP, cudagraphs off, max-autotune-pointwise, buffer ops), a flag still wins,
the quick start's CPU request is what it always was, a bad [suite] value is one line, and the upstream harness's
runner.py form is reachable from `invoke compare`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from analysis.report.sections.experiment import describe_experiment
from foundation.errors import UserError
from foundation.formats.suite_options import MODEL_NAMES
from foundation.formats.suite_request import SuiteRequest
from prbench.runs.run_store import input_hash
from prbench.sides.recipes import load_recipe, parse_recipe
from prbench.sides.variants import Variant
from prbench.stages.command_lines import suite_source_command
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]
SEED_LINE = ("Experiment: 54 models (all) at full size, training, amp, on cuda (recipe {recipe}); "
             "Inductor: cudagraphs off, max-autotune-pointwise on{buffer_ops}")


def planned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> Any:
    """The CompareRequest `invoke compare ARGS` hands to the comparison (which is not run)."""
    requests = []

    def plan_only(request: Any, console: Any) -> tuple[Any, Any]:
        requests.append(request)
        paths = SimpleNamespace(verdict="planned", report_md="-", characters=0, out_dir="-", summary_json="-",
                                summary={})
        return SimpleNamespace(run_id="r1"), paths

    monkeypatch.setattr("prbench.compare.driver.run_compare", plan_only)
    result = invoke_in_process("compare", "--pr", "installed", "--runs-dir", str(tmp_path / "runs"), *args)
    assert result.returncode == 0, result.stderr
    return requests[0]


def what_it_would_run(request: Any, tmp_path: Path) -> str:
    """The experiment line of a planned compare, from the settings its stages get (as `invoke doctor` says it)."""
    variant = Variant("base", request.recipe, env=request.env, inductor_config=request.inductor_config)
    return describe_experiment(request.suite.inputs(), inductor_config=variant.merged_inductor_config(),
                               env=variant.stage_environment(tmp_path / "base"), extra_env=request.env,
                               recipe=request.recipe.name)


@pytest.mark.parametrize(("recipe", "buffer_ops"), [("rocm7-mi300", ", buffer ops on"),
                                                     ("rocm7-mi350", ", buffer ops on"), ("cuda-h100", "")])
def test_a_compare_on_a_gpu_recipe_without_suite_flags_runs_the_seeds_experiment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, recipe: str, buffer_ops: str) -> None:
    request = planned(monkeypatch, tmp_path, "--recipe", recipe)

    suite = request.suite
    assert (suite.models, suite.size, suite.mode, suite.dtype, suite.device) == ("all", "full", "training", "amp",
                                                                                 "cuda")
    assert suite.validate() == list(MODEL_NAMES)
    assert request.env == {"TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE": "1"}
    assert request.recipe.inductor_config == {"triton.cudagraphs": False}
    assert what_it_would_run(request, tmp_path) == SEED_LINE.format(recipe=recipe, buffer_ops=buffer_ops)


def test_a_flag_wins_over_the_recipes_suite_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    request = planned(monkeypatch, tmp_path, "--recipe", "rocm7-mi300", "--models", "BertForMaskedLM",
                      "--size", "tiny", "--dtype", "bfloat16", "--env", "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE=0",
                      "--env", "MARK=1")

    suite = request.suite
    assert (suite.models, suite.size, suite.mode, suite.dtype) == ("BertForMaskedLM", "tiny", "training", "bfloat16")
    assert request.env == {"TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE": "0", "MARK": "1"}
    assert what_it_would_run(request, tmp_path) == (
        "Experiment: 1 model (BertForMaskedLM) at tiny size (hidden size 64), training, bfloat16, on cuda "
        "(recipe rocm7-mi300); Inductor: cudagraphs off, max-autotune-pointwise off, buffer ops on; also MARK=1")


def test_the_quick_starts_cpu_compare_asks_for_the_same_suite_as_before(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    # README command 1 (`invoke compare --base=installed --pr=...`): recipe cpu-local from invoke.yaml.
    request = planned(monkeypatch, tmp_path, "--base", "installed")

    assert request.recipe.name == "cpu-local" and request.env == {}
    # The suite stage's input hash of every quick-start run made before recipes had a [suite].
    assert input_hash(request.suite.inputs()) == "399b8ecdd53e6270"
    assert what_it_would_run(request, tmp_path) == (
        "Experiment: 8 models (tiny-default) at tiny size (hidden size 64), inference, float32, on cpu "
        "(recipe cpu-local); Inductor: C++ kernels, max-autotune-pointwise off; also cpp.enable_kernel_profile=true")


def test_a_recipes_suite_defaults_are_not_part_of_its_image(tmp_path: Path) -> None:
    text = (ROOT / "recipes" / "rocm7-mi300.toml").read_text(encoding="utf-8")
    without = text.split("\n[suite]", 1)[0] + "\n"
    assert "[suite]" in text and "[suite" not in without
    import tomllib

    with_suite = parse_recipe(tomllib.loads(text), tmp_path / "rocm7-mi300.toml")
    plain = parse_recipe(tomllib.loads(without), tmp_path / "rocm7-mi300.toml")
    assert with_suite.suite != plain.suite
    assert with_suite.content_hash() == plain.content_hash()  # the image tag and every stage hash stay


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('size = "huge"', "key 'suite.size': expected one of tiny, small, full, got 'huge'"),
        ('mode = "eval"', "key 'suite.mode': expected one of inference, training, got 'eval'"),
        ('dtype = "fp8"', "key 'suite.dtype': expected one of float32, bfloat16, float16, amp, got 'fp8'"),
        ('models = "GPT3"', "key 'suite.models': unknown model 'GPT3'"),
        ('models = ""', "key 'suite.models': expected a non-empty string"),
        ("warmup = 3", "unknown key 'suite.warmup' (allowed: dtype, env, mode, models, size)"),
        ('env = "X=1"', "key 'suite.env': expected a table, got str"),
        ("env = {X = true}", "key 'suite.env.X': expected a string or number, got True"),
        ('env = {"1X" = "1"}', "key 'suite.env.1X': not a valid environment variable name"),
    ],
)
def test_a_bad_suite_value_in_a_recipe_is_one_line_naming_the_key(tmp_path: Path, table: str,
                                                                    message: str) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(f'platform = "cpu"\n\n[suite]\n{table}\n', encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_recipe(str(path), tmp_path)
    assert str(caught.value).startswith(f"{path}: {message}") and "\n" not in str(caught.value)


def test_compare_names_the_recipes_bad_suite_value_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('platform = "cpu"\n\n[suite]\ndtype = "fp8"\n', encoding="utf-8")

    result = invoke_in_process("compare", "--pr", "installed", "--recipe", str(path), "--runs-dir",
                               str(tmp_path / "runs"))

    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {path}: key 'suite.dtype': expected one of float32, bfloat16, "
                                     "float16, amp, got 'fp8'")
    assert not (tmp_path / "runs").exists()


def test_compare_runs_the_upstream_suite_through_runner_py_when_asked(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    request = planned(monkeypatch, tmp_path, "--recipe", "rocm7-mi300", "--suite-source", "upstream",
                      "--use-runner")

    assert request.suite.use_runner and request.suite.source == "upstream" and request.suite.models == "all"
    request.suite.validate()
    command = suite_source_command(tmp_path / "base", request.suite, Path("/opt/prbench/src/pytorch"))
    assert command.module == "stages.upstream_suite" and "--use-runner" in command.args
    assert command.args[command.args.index("--dtype") + 1] == "amp"
    assert what_it_would_run(request, tmp_path) == (
        "Experiment: every model of the tree's huggingface_models_list.txt through PyTorch's harness (runner.py) "
        "at its own sizes, training, amp, on cuda (recipe rocm7-mi300); Inductor: cudagraphs off, "
        "max-autotune-pointwise on, buffer ops on")
    # Without --use-runner the request (and so the suite's input hash) is what it was before the flag existed.
    assert "use_runner" in request.suite.inputs()
    assert "use_runner" not in SuiteRequest(source="upstream", models="all").inputs()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--use-runner"], "--use-runner: runs PyTorch's runner.py; only with --suite-source upstream"),
        (["--use-runner", "--suite-source", "upstream", "--models", "BertForMaskedLM"],
         "--use-runner: runner.py runs the whole HF suite; give --models all, not 'BertForMaskedLM'"),
    ],
)
def test_use_runner_is_refused_in_one_line_where_runner_py_cannot_do_it(tmp_path: Path, args: list[str],
                                                                       message: str) -> None:
    result = invoke_in_process("compare", "--pr", "installed", "--recipe", "rocm7-mi300", *args,
                               "--runs-dir", str(tmp_path / "runs"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: " + message), result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_experiment_line_names_each_side_when_they_differ_and_what_the_harness_ignores() -> None:
    from analysis.report.sections.experiment import experiment, report_lines

    suite = SuiteRequest(source="upstream", models="BertForMaskedLM,T5Small", mode="training", dtype="amp",
                         device="cuda").inputs()
    base = experiment(suite, inductor_config={"coordinate_descent_tuning": True}, env={})
    pr = experiment(suite, inductor_config={}, env={"TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE": "1"})

    assert report_lines(base, base) == [base.text]
    assert report_lines(base, pr) == [
        "base: 2 models (BertForMaskedLM,T5Small) through PyTorch's harness (huggingface.py --performance per "
        "model) at its own sizes, training, amp, on cuda; Inductor: cudagraphs off, max-autotune-pointwise off; "
        "also coordinate_descent_tuning=true (not read by the harness)",
        "PR: 2 models (BertForMaskedLM,T5Small) through PyTorch's harness (huggingface.py --performance per model) "
        "at its own sizes, training, amp, on cuda; Inductor: cudagraphs off, max-autotune-pointwise on"]
