"""Glue between invoke tasks and the packages: user errors become one-line exits, never tracebacks."""

from __future__ import annotations

import argparse
import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import invoke
from invoke import Exit, Task

from foundation.errors import UserError
from foundation.formats.run_layout import MANIFEST
from foundation.io_errors import ENVIRONMENT_ERRORS, describe
from prbench.runs.run_lock import command_label, locked_runs
from prbench.runs.run_store import check_run_id
from prbench.termination import Terminated, terminate_as_interrupt

PROJECT_ROOT = Path(__file__).resolve().parents[2]
HELP_FLAGS = ("-h", "--help")


class OneLineParser(argparse.ArgumentParser):
    """For the scripts under benchmarks/: a user mistake is one line ``error: ...`` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def user_facing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a task body, the one error boundary of the CLI: UserError → ``Exit`` with its one-line message (exit 2);
    what the machine refused (a full disk, a read-only or missing file, a file that does not decode) → one line
    naming the file and what to do (exit 2); Ctrl-C → exit 130; SIGTERM or SIGHUP take Ctrl-C's path (stages
    stopped, containers removed, the run's lock released) and exit 128 + the signal (143 for SIGTERM). Anything
    else is a bug and keeps its traceback.
    """

    # A task whose name is taken by one of its flags is defined as NAME_task ("store").
    name = fn.__name__.removesuffix("_task").replace("_", "-")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # invoke hands a help flag written after a task to that task's positional argument ("invoke report --help").
        if any(isinstance(value, str) and value in HELP_FLAGS for value in (*args[1:], *kwargs.values())):
            raise Exit(f"error: a help flag was read as an argument of {name}; for its help run: invoke --help {name}",
                       code=2)
        # Who is running, for the line another invocation gets if this one holds a run ("invoke compare").
        label = command_label.set(f"invoke {name}")
        try:
            with terminate_as_interrupt():
                return fn(*args, **kwargs)
        except UserError as exc:
            raise Exit(f"error: {exc}", code=2) from None
        except Terminated as exc:
            raise Exit(f"terminated ({exc.signal_name}): running stages stopped, finished work is kept; run the same "
                       "command again to resume", code=exc.exit_code) from None
        except KeyboardInterrupt:
            raise Exit("interrupted: finished work is kept; run the same command again to resume", code=130) from None
        except ENVIRONMENT_ERRORS as exc:
            raise Exit(f"error: {describe(exc)}", code=2) from None
        finally:
            command_label.reset(label)

    return wrapper


def holds_run(runs_dir_of: Callable[[Any, str | None], Path]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """For a task that writes into ``--run`` under ``--runs-dir``: take the run's lock before anything else.

    The run store takes it too when it opens the run, but only after the flags are checked and the heavy modules
    imported; taking it first is what makes a second invocation on a busy run fail at once. A run that does not
    exist yet is locked by the store when it creates it. ``runs_dir_of(ctx, runs_dir)`` resolves the directory.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(ctx: Any, *args: Any, **kwargs: Any) -> Any:
            given = _arguments(fn, ctx, args, kwargs)
            run_id = given.get("run")
            if not run_id:
                return fn(ctx, *args, **kwargs)
            check_run_id(str(run_id))  # before any other flag or the patch: seconds of checks for a bad id
            with locked_runs([runs_dir_of(ctx, given.get("runs_dir")) / str(run_id)]):
                return fn(ctx, *args, **kwargs)

        return wrapper

    return decorate


def holds_runs_under(*flags: str, unless: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """For a task that writes where path flags point (``--out``): lock any run directory those paths lie in.

    ``invoke kernels --dir runs/x/base/organized`` writes into run ``x`` as surely as ``invoke compare --run x``.
    ``unless`` names a flag with which the task only reads (``--dry-run``).
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(ctx: Any, *args: Any, **kwargs: Any) -> Any:
            given = _arguments(fn, ctx, args, kwargs)
            if unless and given.get(unless):
                return fn(ctx, *args, **kwargs)
            runs = [run for flag in flags if given.get(flag) for run in [enclosing_run(resolve_path(given[flag]))]
                    if run is not None]
            with locked_runs(runs, flag="--" + flags[0].replace("_", "-")):
                return fn(ctx, *args, **kwargs)

        return wrapper

    return decorate


def enclosing_run(path: Path) -> Path | None:
    """The run directory (one with a manifest.json) that ``path`` is in or is, if any."""
    for candidate in (path, *path.parents):
        if (candidate / MANIFEST).is_file():
            return candidate
    return None


def _arguments(fn: Callable[..., Any], ctx: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = inspect.signature(fn).bind_partial(ctx, *args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)



def config_value(ctx: Any, dotted: str, default: Any = None) -> Any:
    """Read ``prbench.<dotted>`` from invoke.yaml (or invoke's other config sources)."""
    node: Any = ctx.config.get("prbench", {})
    for part in dotted.split("."):
        if not hasattr(node, "get"):
            return default
        node = node.get(part)
        if node is None:
            return default
    return node


def resolve_path(value: str | Path) -> Path:
    """Paths in invoke.yaml are relative to the project; paths on the command line to the shell's cwd."""
    path = Path(value)
    return path if path.is_absolute() else (Path.cwd() / path)


class LongOnlyFlags(Task):
    """The project's invoke task (`task`): its ``long_only`` parameters get no short flag (``@task(long_only=
    ["format"])``), so their letter stays free for the flags a command must share with the tools its users know,
    and the other parameters keep the letters invoke gives them.

    No flag gets the dash for a letter: invoke draws a flag's short name from the characters of its dashed long
    name, and once every letter of ``kernel-timeout`` was taken it gave that flag ``-``, which help shows as
    ``--=STRING`` and the command line reads as the end of the flags (``invoke compare``, ``bisect``,
    ``compare-kernels``, ``doctor`` and ``suite`` each had one)."""

    def __init__(self, body: Callable[..., Any], long_only: tuple[str, ...] | list[str] = (), **kwargs: Any) -> None:
        super().__init__(body, **kwargs)
        self.long_only = frozenset(long_only)

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        long_name, *letters = opts["names"]
        # The long name only where asked, or where the letter is the dash; the letter is then not taken.
        opts["names"] = [long_name] if name in self.long_only else [long_name, *(x for x in letters if x != "-")]
        return opts


def task(*args: Any, **kwargs: Any) -> Any:
    """invoke's ``@task`` with the project's task class (`LongOnlyFlags`)."""
    return invoke.task(*args, klass=LongOnlyFlags, **kwargs)
