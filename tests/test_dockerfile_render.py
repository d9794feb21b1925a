"""The rendered Dockerfile is exactly the templates' instructions, whatever a recipe holds.

Validation is the first wall (tests/test_recipe_schema.py); these tests take it away — recipes are built
directly, with values loading would reject — to show that quoting alone keeps every value inside the one
word or string the template gave it, and that a value no quoting can carry is refused."""

from __future__ import annotations

import importlib
import io
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from foundation.errors import UserError
from prbench.images.build import TEMPLATES_DIR, render_dockerfile
from prbench.images.docker_engine import resolve_base
from prbench.images.dockerfile_quote import UnsafeValue, dockerfile_value
from prbench.sides.pins import SourceTree
from prbench.sides.recipes import BaseImage, Recipe, control_characters, load_recipe
from tests.support.recipe_support import DIGEST, RECIPES_DIR

# Stand-in trees: rendering reads only their layout facts, never git.
PYTORCH = SourceTree("pytorch", Path("/nonexistent/pytorch"), "0" * 40,
                     requirements=("requirements.txt", "requirements-build.txt"))
TRITON = SourceTree("triton", Path("/nonexistent/triton"), "1" * 40, install_dir="python",
                    requirements=("python/requirements.txt",))
BENIGN_REF = f"rocm/pytorch@{DIGEST}"

SHIPPED_DOCKER = [r for r in (load_recipe(p.stem, RECIPES_DIR) for p in sorted(RECIPES_DIR.glob("*.toml")))
                  if r.is_docker]

# Values that would each run a command, add an option or break out of their word if pasted into a RUN line.
SHELL_HOSTILE = (
    "curl; touch /tmp/x",
    "a && touch /tmp/x",
    "$(touch /tmp/x)",
    "`touch /tmp/x`",
    "x' ; touch /tmp/x; '",
    "|| true #",
    "-oDPkg::Pre-Invoke::=touch /tmp/x",
    "ends with a backslash \\",
)
PIP_HOSTILE = (*SHELL_HOSTILE, "--index-url=https://evil")
ENV_HOSTILE = {
    "QUOTE": 'x" && touch /tmp/x "',
    "DOLLAR": "$HOME ${PATH} \\$",
    "BACKSLASH": "trailing backslash \\",
    "UNICODE": "é ☃ \\u00e9",
}
ARCH_HOSTILE = ('gfx942"; touch /tmp/x; "', "gfx950 $HOME")


def structure(dockerfile: str) -> list[dict[str, Any]]:
    return DockerfileParser(fileobj=io.BytesIO(dockerfile.encode()), env_replace=False).structure


def kinds(dockerfile: str) -> list[str]:
    return [item["instruction"] for item in structure(dockerfile)]


def render(recipe: Recipe, from_ref: str | None = None) -> str:
    return render_dockerfile(recipe, PYTORCH, TRITON, overlay=True, from_ref=from_ref)


def twin(recipe: Recipe) -> Recipe:
    """The same shape (platform, how many packages, pins, variables, architectures) with plain values."""
    arch = "gfx942" if recipe.platform == "rocm" else "9.0"
    return replace(
        recipe,
        name="benign",
        base_image=BaseImage("example/base:tag", DIGEST),
        arch=(arch,) * len(recipe.arch),
        apt_packages=tuple(f"pkg{i}" for i in range(len(recipe.apt_packages))),
        pip_extra=tuple(f"pkg{i}" for i in range(len(recipe.pip_extra))),
        env={f"VAR{i}": "value" for i in range(len(recipe.env))},
        build_env={f"VAR{i}": "value" for i in range(len(recipe.build_env))},
    )


def expected_instructions(recipe: Recipe) -> list[str]:
    """What the templates write, in order, for a recipe of this shape (stand-in trees, with an overlay)."""
    base = ["FROM", "SHELL", "ENV", *(["RUN"] if recipe.apt_packages else []), "ARG", "COPY", "RUN"]
    # each install from the wheelhouse is a COPY of its group and one pip RUN
    triton = ["COPY", "RUN", "COPY", "RUN", "COPY", "WORKDIR", "RUN"]
    # wheelhouse, PyTorch's downloads placed, the tree, hipify on ROCm, the build
    pytorch = ["COPY", "RUN", "COPY", "RUN", "COPY", "WORKDIR", "ENV", *(["RUN"] if recipe.platform == "rocm" else []),
               "RUN"]
    wheels = ["COPY", "RUN"]
    extras = ["COPY", "RUN"] if recipe.pip_extra else []
    overlay = ["COPY", "RUN"]
    tools = ["COPY", "ENV", *(["ENV"] * len(recipe.env)), "WORKDIR", "RUN"]
    return base + (wheels if recipe.is_wheel else triton + pytorch) + extras + overlay + tools


def run_line(dockerfile: str, marker: str) -> str:
    [line] = [item["value"] for item in structure(dockerfile)
              if item["instruction"] == "RUN" and marker in item["value"]]
    return line


def shell_tokens(command: str) -> list[str]:
    """bash's words and operators: ``;``, ``&&``, ``|`` come out as tokens of their own unless quoted."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def operators(command: str) -> list[str]:
    return [t for t in shell_tokens(command) if t and set(t) <= set("();<>|&")]


def docker_double_quoted(word: str) -> str:
    """How Docker reads a double-quoted ENV value (moby/buildkit's shell lexer): a backslash escapes only
    '"', '$' and itself, any other stays; an unescaped '$' would expand a variable, so it fails the test."""
    assert word.startswith('"') and word.endswith('"') and len(word) >= 2, word
    out, i, body = [], 0, word[1:-1]
    while i < len(body):
        ch = body[i]
        assert ch != '"', f"unescaped quote ends the string early: {word}"
        assert ch != "$", f"unescaped $ would be expanded: {word}"
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in '"$\\':
            out.append(body[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def env_word(dockerfile: str, name: str) -> str:
    """The quoted value of ``name`` in the ENV instruction that sets it (the last variable of that ENV)."""
    [value] = [item["value"] for item in structure(dockerfile)
               if item["instruction"] == "ENV" and re.search(rf"(^|\s){name}=", item["value"])]
    return value.split(f"{name}=", 1)[1]


# --- the shipped recipes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", SHIPPED_DOCKER, ids=[r.name for r in SHIPPED_DOCKER])
def test_a_shipped_recipe_renders_exactly_the_template_instructions(recipe: Recipe) -> None:
    dockerfile = render(recipe)

    assert [k for k in kinds(dockerfile) if k != "COMMENT"] == expected_instructions(recipe)
    assert kinds(dockerfile) == kinds(render(twin(recipe)))
    assert recipe.base_image is not None
    assert structure(dockerfile)[kinds(dockerfile).index("FROM")]["value"] == recipe.base_image.reference
    if recipe.apt_packages:
        tokens = shell_tokens(run_line(dockerfile, "apt-get install"))
        start = tokens.index("--") + 1
        assert tokens[start:start + len(recipe.apt_packages)] == list(recipe.apt_packages)
    for pin in recipe.pip_extra:  # resolved on the host into the hashed wheelhouse, never pip's words here
        assert pin not in dockerfile
    for name, value in recipe.env.items():
        assert docker_double_quoted(env_word(dockerfile, name)) == value


# --- hostile values, validation bypassed ----------------------------------------------------------------------


@pytest.fixture(params=SHIPPED_DOCKER, ids=[r.name for r in SHIPPED_DOCKER])
def hostile(request: pytest.FixtureRequest) -> Recipe:
    """A shipped recipe with every value replaced by one that loading would reject."""
    recipe: Recipe = request.param
    return replace(
        recipe,
        name="evil\nRUN touch /tmp/pwned",
        base_image=BaseImage("evil\nRUN touch /tmp/x", DIGEST),
        arch=ARCH_HOSTILE if recipe.platform == "rocm" else recipe.arch,
        apt_packages=SHELL_HOSTILE,
        pip_extra=PIP_HOSTILE,
        env=dict(ENV_HOSTILE),
        build_env=dict(ENV_HOSTILE),
    )


def test_hostile_values_add_no_instruction(hostile: Recipe) -> None:
    dockerfile = render(hostile, from_ref=BENIGN_REF)

    assert kinds(dockerfile) == kinds(render(twin(hostile)))
    assert [k for k in kinds(dockerfile) if k != "COMMENT"] == expected_instructions(hostile)
    # the newlines in the recipe and image names stay inside their comments, spelled as escapes
    assert "recipe 'evil\\nRUN touch /tmp/pwned'" in dockerfile
    assert "base: evil\\nRUN touch /tmp/x," in dockerfile


def test_each_hostile_package_is_one_shell_word_after_the_end_of_options(hostile: Recipe) -> None:
    command = run_line(render(hostile, from_ref=BENIGN_REF), "apt-get install")
    benign = run_line(render(twin(hostile)), "apt-get install")
    tokens = shell_tokens(command)

    # no ';', '&&', '|' or '(' of the values reached bash: the operators are the template's own
    assert operators(command) == operators(benign)
    start = tokens.index("--") + 1
    assert tokens[start:start + len(SHELL_HOSTILE)] == list(SHELL_HOSTILE)  # each value whole, each after '--'


def test_hostile_pip_pins_never_reach_the_dockerfile(hostile: Recipe) -> None:
    """The extra pins are resolved on the host (pip download into the store); the image's pip reads only the
    generated, hashed requirements file of the wheelhouse, so no pin text is written into the Dockerfile."""
    recipe = replace(hostile, apt_packages=(), pip_extra=(*PIP_HOSTILE, "numpy\nRUN touch /tmp/x"))
    dockerfile = render(recipe, from_ref=BENIGN_REF)

    assert [pin for pin in recipe.pip_extra if pin in dockerfile] == []
    assert operators(run_line(dockerfile, "/wheels/extra ")) == operators(run_line(render(twin(hostile)),
                                                                                    "/wheels/extra "))


def test_each_hostile_environment_value_is_one_docker_string(hostile: Recipe) -> None:
    dockerfile = render(hostile, from_ref=BENIGN_REF)

    for name, value in ENV_HOSTILE.items():
        assert docker_double_quoted(env_word(dockerfile, name)) == value
    if hostile.platform == "rocm":
        assert docker_double_quoted(env_word(dockerfile, "PYTORCH_ROCM_ARCH")) == ";".join(ARCH_HOSTILE)


def test_hostile_build_variables_stay_one_shell_word_in_both_build_steps(hostile: Recipe) -> None:
    if hostile.is_wheel:
        pytest.skip("a wheel recipe builds neither PyTorch nor Triton")
    dockerfile = render(hostile, from_ref=BENIGN_REF)

    for marker in ("-e .", "/downloads/env.sh"):  # the PyTorch step, the Triton step
        command = run_line(dockerfile, marker)
        tokens = shell_tokens(command)
        for name, value in ENV_HOSTILE.items():
            assert f"{name}={value}" in tokens  # one word, as bash reads it
        assert operators(command) == operators(run_line(render(twin(hostile)), marker))


UNREPRESENTABLE = {
    "a newline in an apt package": {"apt_packages": ("curl\nRUN touch /tmp/x",)},
    "a newline in an environment value": {"env": {"A": "1\nRUN touch /tmp/x"}},
    "a NUL in an environment value": {"env": {"A": "a\x00b"}},
    "a space in an environment name": {"env": {"A B": "1"}},
    "a newline in an environment name": {"env": {"A\nRUN touch /tmp/x": "1"}},
    "a newline in a build variable": {"build_env": {"A": "1\nRUN touch /tmp/x"}},
    "a space in a build variable's name": {"build_env": {"A B": "1"}},
    "a newline in an architecture": {"arch": ("gfx942\nRUN touch /tmp/x",)},
    "a base image that cannot be pinned": {"base_image": BaseImage("evil\nRUN touch /tmp/x", DIGEST)},
    "a base image with a space": {"base_image": BaseImage("rocm/pytorch AS evil", DIGEST)},
}


@pytest.mark.parametrize("changes", UNREPRESENTABLE.values(), ids=UNREPRESENTABLE.keys())
def test_a_value_no_quoting_can_carry_is_refused_in_one_line(changes: dict[str, Any]) -> None:
    recipe = replace(load_recipe("rocm7-mi300", RECIPES_DIR), **changes)

    with pytest.raises(UserError) as info:
        render(recipe)

    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{recipe.path}: cannot render the Dockerfile")


def test_from_refuses_a_tag_even_a_valid_one() -> None:
    recipe = load_recipe("rocm7-mi300", RECIPES_DIR)

    with pytest.raises(UserError, match="not an image pinned by digest"):
        render(recipe, from_ref="rocm/pytorch:latest")


def test_every_template_value_goes_through_the_quoting_filter() -> None:
    texts = {path.name: path.read_text(encoding="utf-8") for path in sorted(TEMPLATES_DIR.glob("*.j2"))}
    # A call of one of the templates' own macros writes template text, whose values are filtered in the macro.
    macros = {name for text in texts.values() for name in re.findall(r"\{%-?\s*macro\s+(\w+)\(", text)}
    unquoted = [
        f"{name}: {{{{{expr}}}}}"
        for name, text in texts.items()
        for expr in re.findall(r"\{\{(.*?)\}\}", text, flags=re.S)
        if not re.search(r"""\|\s*(dockerfile\(|map\(\s*["']dockerfile["'])""", expr)
        and not re.fullmatch(rf"\s*(?:{'|'.join(macros) or '(?!)'})\((?:\w+|\"[\w-]+\")(?:, *(?:\w+|\"[\w-]+\"))*\)\s*",
                             expr)
    ]

    assert unquoted == []


# --- the quoting function itself ------------------------------------------------------------------------------

_printable = st.text(st.characters(blacklist_categories=("Cc", "Zl", "Zp", "Cs")), max_size=40)


@settings(max_examples=150, deadline=None)
@given(_printable)
def test_a_shell_quoted_value_is_exactly_one_word(value: str) -> None:
    assert shlex.split(dockerfile_value(value, "shell")) == [value]


@settings(max_examples=150, deadline=None)
@given(_printable)
def test_an_env_quoted_value_reads_back_as_itself(value: str) -> None:
    assert docker_double_quoted(dockerfile_value(value, "env")) == value


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_a_comment_never_holds_a_line_break(value: str) -> None:
    assert control_characters(dockerfile_value(value, "comment")) == []


@pytest.mark.parametrize("kind", ["shell", "env", "name", "word", "from"])
@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x00b", "a\x1b[2Jb", "a\u2028b", "a\x85b"])
def test_every_kind_but_comment_refuses_control_characters(kind: str, bad: str) -> None:
    with pytest.raises(UnsafeValue):
        dockerfile_value(bad, kind)


@pytest.mark.parametrize("value", ["-from=x", "a b", "$HOME/x", "'a'", "a\\b", ""])
def test_a_copy_path_is_plain_or_refused(value: str) -> None:
    with pytest.raises(UnsafeValue):
        dockerfile_value(value, "word")


# --- what a user is told to paste -----------------------------------------------------------------------------


class _NoImages:
    """A Docker client whose store has no image at all."""

    class images:
        @staticmethod
        def get(ref: str) -> None:
            raise importlib.import_module("docker.errors").ImageNotFound(f"no such image: {ref}")


def test_a_missing_base_suggests_a_quoted_pull_of_the_pinned_reference() -> None:
    base = BaseImage("registry.example.com:5000/team/torch:v1", DIGEST)

    with pytest.raises(UserError) as info:
        resolve_base(_NoImages(), base, pull=False, emit=lambda _: None)

    message = str(info.value)
    assert message.endswith(f"pass --pull, or run: docker pull {shlex.quote(base.reference)}")
    pasted = shlex.split(message.rsplit("run: ", 1)[1])
    assert pasted == ["docker", "pull", f"registry.example.com:5000/team/torch@{DIGEST}"]


def test_a_base_that_is_not_a_reference_gets_no_command_to_paste() -> None:
    base = BaseImage("evil; touch /tmp/x", DIGEST)

    with pytest.raises(UserError) as info:
        resolve_base(_NoImages(), base, pull=True, emit=lambda _: None)

    message = str(info.value)
    assert "docker pull" not in message and "not an image name pinned by digest" in message and "\n" not in message
