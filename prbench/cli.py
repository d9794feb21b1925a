"""Glue between invoke tasks and the packages: user errors become one-line exits, never tracebacks."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from invoke import Exit

from analysis.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class OneLineParser(argparse.ArgumentParser):
    """For the scripts under benchmarks/: a user mistake is one line ``error: ...`` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def user_facing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a task body: UserError → ``Exit`` with its one-line message (exit 2); Ctrl-C → exit 130."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise Exit(f"error: {exc}", code=2) from None
        except KeyboardInterrupt:
            raise Exit("interrupted: finished work is kept; run the same command again to resume", code=130) from None

    return wrapper


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
