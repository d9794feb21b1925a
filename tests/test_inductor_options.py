"""A user sets Inductor options in a recipe or with --inductor-config: a typo or a value of the wrong type is
one line on the host, naming the setting, before any build or run; without torch on the host only the shape is
checked. The tests that read the real torch._inductor.config import it (no compile): fast enough for the unit
tier, skipped where torch is absent."""

from __future__ import annotations

import datetime
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from foundation.errors import UserError
from prbench import inductor_options
from prbench.inductor_options import check_inductor_config

# The tests of the host's torch import it in the test process: one xdist worker imports it for all of them.
pytestmark = pytest.mark.xdist_group("torch-in-process")

WHERE = "recipes/x.toml: key 'inductor_config'"


@pytest.fixture(params=["imported", "read from source"])
def inductor(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The host's Inductor config both ways the check knows it: the imported module (a process that already
    imported torch) and the installed config.py read without importing torch (every other host command)."""
    live = pytest.importorskip("torch._inductor.config")
    if request.param == "imported":
        config = live
    else:
        config = inductor_options.SourceConfig.read(Path(live.__file__))
        assert config is not None
    monkeypatch.setattr(inductor_options, "_inductor_config", lambda: config)
    return config


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inductor_options, "_inductor_config", lambda: None)


def error(overrides: dict[str, Any]) -> str:
    with pytest.raises(UserError) as info:
        check_inductor_config(overrides, WHERE)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# --- with the host's torch ------------------------------------------------------------------------------------


def test_settings_of_the_right_type_pass(inductor: Any) -> None:
    check_inductor_config({
        "cpp.simdlen": 8,  # int | None
        "triton.cudagraphs": False,  # bool
        "max_autotune": True,
        "cpp.threads": 4,  # int
        "cpu_gpu_bw": 100,  # a float setting takes an int
        "cpp.descriptive_names": "torch",  # a Literal
    }, WHERE)


def test_an_unknown_setting_suggests_the_closest_names(inductor: Any) -> None:
    message = error({"cpp.simdlenn": 8})

    assert message.startswith(f"{WHERE}: inductor config 'cpp.simdlenn': not a setting of torch._inductor.config")
    assert "did you mean 'cpp.simdlen'" in message


def test_a_group_name_alone_asks_for_one_of_its_settings(inductor: Any) -> None:
    assert "'cpp' is a group of settings" in error({"cpp": 8})


def test_a_string_for_an_integer_setting_names_the_expected_type(inductor: Any) -> None:
    if not hasattr(inductor._config["cpp.simdlen"], "value_type"):
        pytest.skip("this torch records no setting types; the None default takes any value")

    message = error({"cpp.simdlen": "abc"})

    assert message == f"{WHERE}: inductor config 'cpp.simdlen': expected int or None (the default is None), got 'abc'"


@pytest.mark.parametrize("overrides, expected", [
    ({"triton.cudagraphs": 1}, "expected bool"),  # 1 is not True to a bool setting
    ({"cpp.threads": True}, "expected int"),  # nor True an int
    ({"cpu_gpu_bw": "fast"}, "expected float"),
    ({"cpp.descriptive_names": "bogus"}, "expected one of 'torch', 'original_aten', 'inductor_node'"),
], ids=["int for bool", "bool for int", "str for float", "outside a Literal"])
def test_a_value_of_the_wrong_type_fails(inductor: Any, overrides: dict[str, Any], expected: str) -> None:
    for key in overrides:
        if key not in inductor.get_config_copy():
            pytest.skip(f"this torch has no {key}")

    assert expected in error(overrides)


# --- without torch: the shape only ----------------------------------------------------------------------------


def test_without_torch_any_dotted_name_with_a_scalar_passes(no_torch: None) -> None:
    check_inductor_config({"cpp.simdlen": "abc", "not_a_setting": 1.5, "x.y.z": True}, WHERE)


@pytest.mark.parametrize("overrides, expected", [
    ({"cpp simdlen": 8}, "dotted setting name"),
    ({"cpp..simdlen": 8}, "dotted setting name"),
    ({"cpp.simdlen\nRUN x": 8}, "dotted setting name"),
    ({"cpp.simdlen": [8]}, "boolean, number or string"),
    ({"cpp.simdlen": math.nan}, "JSON value"),
    ({"cpp.simdlen": datetime.date(2024, 1, 1)}, "JSON value"),
], ids=["space", "empty part", "newline", "list", "nan", "date"])
def test_without_torch_a_malformed_override_fails(no_torch: None, overrides: dict[str, Any], expected: str) -> None:
    assert expected in error(overrides)


def test_no_overrides_import_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_import() -> None:
        raise AssertionError("imported torch._inductor.config for nothing")

    monkeypatch.setattr(inductor_options, "_inductor_config", no_import)

    check_inductor_config({}, WHERE)


@pytest.mark.integration
def test_the_host_checks_a_recipe_without_importing_torch() -> None:
    code = ("import sys; from prbench.inductor_options import check_inductor_config as c; "
            "c({'cpp.simdlen': 8, 'triton.cudagraphs': False}, 'x'); "
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_the_source_reading_sees_the_settings_the_module_has() -> None:
    live = pytest.importorskip("torch._inductor.config")
    source = inductor_options.SourceConfig.read(Path(live.__file__))
    assert source is not None
    imported = set(live.get_config_copy())
    read = set(source.get_config_copy())
    assert len(imported - read) <= 0.02 * len(imported), sorted(imported - read)[:10]
