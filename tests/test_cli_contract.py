"""The command line a user meets: every task listed, every flag explained, and the README kept true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Collection

import tasks
from tests.support.cli_support import invoke_in_process

ROOT = Path(__file__).resolve().parents[1]


def _collection() -> Collection:
    return Collection.from_module(tasks)


@pytest.mark.integration
def test_invoke_list_shows_the_main_tasks():
    out = subprocess.run([sys.executable, "-m", "invoke", "--list"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for name in ("compare", "suite", "organize", "kernels", "report", "status", "build", "perf-report"):
        assert re.search(rf"^\s+{name}\s", out.stdout, re.M), f"{name} missing from invoke --list"


@pytest.mark.parametrize("name", sorted(_collection().task_names))
def test_every_flag_of_every_task_has_help(name):
    task = _collection()[name]
    missing = [a.name for a in task.get_arguments() if not (a.help or "").strip()]
    assert not missing, f"invoke {name}: flags without help: {missing}"
    assert task.__doc__ and task.__doc__.strip(), f"invoke {name} has no docstring"


@pytest.mark.parametrize("name", sorted(_collection().task_names))
def test_every_short_flag_is_a_letter(name):
    """invoke once gave ``--kernel-timeout`` the dash for its letter: help showed ``--=STRING``, and ``--`` ends
    invoke's flags."""
    shorts = [n for a in _collection()[name].get_arguments() for n in a.names if len(n) == 1]
    assert all(n.isalnum() for n in shorts), f"invoke {name}: short flags {sorted(shorts)}"


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", quick, re.S)


def test_readme_quick_start_is_exactly_two_commands():
    commands = _readme_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    main, tests_command = commands
    assert "invoke compare" in main and "pip install" in main
    assert "pytest" in tests_command and "pip install" in tests_command


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _readme_commands()[1] in ci.splitlines()


@pytest.mark.parametrize("name", sorted(n for n in _collection().task_names if len(_collection()[n].positional) == 1))
def test_help_after_a_task_with_a_positional_argument_points_to_its_help(name):
    # invoke reads "--help" written after such a task as its argument, not as a help request (with two positional
    # arguments invoke itself says one is missing).
    out = invoke_in_process(name, "--help")
    assert out.returncode == 2
    assert out.stderr.strip() == (f"error: a help flag was read as an argument of {name}; "
                                  f"for its help run: invoke --help {name}")
