"""Modes as named presets (`foundation.formats.modes`): the user lists them with `invoke modes`, composes them with `+`,
and a name that is not a preset or a composition that asks for two values of one setting is one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from foundation.errors import UserError
from foundation.formats.modes import DYNAMIC_SHAPES_ENV, PRESETS, check_platform, parse_mode, parse_modes
from prbench.inductor_options import check_inductor_config
from tests.support.cli_support import ROOT, invoke_in_process

# The HUD's modes the issue names: every one must be a preset.
ISSUE_MODES = ("inference", "training", "amp", "bfloat16", "cudagraphs", "no-cudagraphs", "dynamic", "max-autotune",
               "max-autotune-pointwise", "cpp-wrapper", "freezing")


def test_invoke_modes_lists_every_preset_with_its_settings() -> None:
    result = invoke_in_process("modes")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in ISSUE_MODES:
        assert any(line.split()[0] == name for line in lines if line.strip()), name
    training = next(line for line in lines if line.startswith("training "))
    assert "mode=training" in training and "backward and optimizer step" in training  # the step the suite times
    no_graphs = next(line for line in lines if line.startswith("no-cudagraphs "))
    assert "triton.cudagraphs=false" in no_graphs
    assert "+" in result.stdout  # how to compose


def test_every_presets_inductor_settings_are_settings_of_the_installed_inductor() -> None:
    # Checked against this host's torch/_inductor/config.py, as --inductor-config is: a preset with a typo would only
    # fail inside the environment, after the suite started.
    for found in PRESETS:
        check_inductor_config(found.inductor_config, f"mode {found.name}")


def test_presets_compose_into_the_union_of_their_settings() -> None:
    mode = parse_mode("training+amp+no-cudagraphs")
    assert mode.suite == {"mode": "training", "dtype": "amp"}
    assert mode.inductor_config == {"triton.cudagraphs": False}
    assert mode.name == "training+amp+no-cudagraphs"
    assert mode.dir_name == "training.amp.no-cudagraphs"
    dynamic = parse_mode("inference+dynamic+max-autotune")
    assert dynamic.env == {DYNAMIC_SHAPES_ENV: "1"} and dynamic.inductor_config == {"max_autotune": True}
    # freezing is an inference setting: inference+freezing agrees with it
    assert parse_mode("inference+freezing").suite == {"mode": "inference"}


@pytest.mark.parametrize(("text", "says"), [
    ("inference+training", "inference and training conflict (the suite's mode 'inference' vs 'training')"),
    ("amp+bfloat16", "amp and bfloat16 conflict (the suite's dtype 'amp' vs 'bfloat16')"),
    ("cudagraphs+no-cudagraphs", "cudagraphs and no-cudagraphs conflict (Inductor's triton.cudagraphs"),
    ("training+freezing", "training and freezing conflict"),
])
def test_a_composition_asking_two_values_of_one_setting_is_one_line_naming_both(text: str, says: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_modes(text)
    message = str(caught.value)
    assert says in message and "\n" not in message


def test_an_unknown_mode_is_one_line_with_the_closest_name_and_the_known_ones() -> None:
    said = r"unknown mode 'trainng' \(did you mean 'training'\? known: inference, training"
    with pytest.raises(UserError, match=said):
        parse_modes("inference,trainng+amp")
    for bad in ("", "inference,", "training++amp", "amp+amp"):
        with pytest.raises(UserError, match="--modes"):
            parse_modes(bad)


def test_the_same_mode_twice_in_other_orders_is_refused() -> None:
    with pytest.raises(UserError, match="training\\+amp and amp\\+training are the same mode"):
        parse_modes("training+amp,inference,amp+training")
    assert [m.name for m in parse_modes("inference, training+amp")] == ["inference", "training+amp"]


def test_cuda_graphs_on_a_cpu_recipe_are_one_line() -> None:
    with pytest.raises(UserError, match="--modes training\\+cudagraphs: cudagraphs needs a GPU recipe"):
        check_platform(parse_modes("inference,training+cudagraphs"), "cpu")
    check_platform(parse_modes("training+cudagraphs"), "cuda")


@pytest.mark.integration
def test_the_dynamic_mode_makes_a_stage_compile_with_every_size_symbolic() -> None:
    code = ("import os, torch._dynamo.config as c\n"
            "from stages.support.environment import prepare_inductor\n"
            "before = c.assume_static_by_default\n"
            f"os.environ[{DYNAMIC_SHAPES_ENV!r}] = '1'\n"
            "prepare_inductor({})\n"
            "print(before, c.assume_static_by_default)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]
