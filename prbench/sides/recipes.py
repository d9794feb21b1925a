"""Environment recipes (``recipes/*.toml``): what an environment is made of, validated on load.

A recipe names the platform, the base image (by digest for Docker recipes), the GPU architectures, the
Triton and PyTorch sources and commits, extra pip pins, environment variables, Inductor config and patches,
and (``[suite]``) the experiment a suite on this environment runs unless a flag says otherwise.
Every validation failure is a one-line ``UserError`` naming the file and the key.

Recipes are shared files, so they are untrusted input: their values reach ``FROM``/``RUN``/``ENV`` lines of a
Dockerfile built with host networking, a shell, pip and apt. Each value is therefore checked against the
grammar of what it names (an image reference, a Debian package, a pip requirement, a file in ``patches/``),
not merely its type. Rendering quotes every value again (``prbench.images.dockerfile_quote``): either wall holds alone.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
import unicodedata
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from foundation.errors import UserError
from foundation.formats.suite_options import DTYPES, MODES, SIZES, UnknownModelError, resolve_models
from foundation.records import read_bytes

PLATFORMS = ("cpu", "cuda", "rocm")
RUNNERS = ("local", "docker", "venv")
FROM_PYTORCH_PIN = "from-pytorch-pin"
INSTALLED = "installed"
PATCH_TARGETS = ("pytorch", "triton")

# fullmatch everywhere below: ``re.match(r"^...$")`` accepts a trailing newline, which is exactly the injection.
_SHA_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Image references, written from the grammar in the distribution/reference package (docker/distribution):
#   name            := [domain '/'] remote-name
#   domain          := host [':' port-number]
#   host            := domain-name | IPv4address | '[' IPv6address ']'
#   domain-name     := domain-component ['.' domain-component]*
#   domain-component:= /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
#   remote-name     := path-component ['/' path-component]*
#   path-component  := alpha-numeric [separator alpha-numeric]*
#   alpha-numeric   := /[a-z0-9]+/
#   separator       := /[_.]|__|[-]+/
#   tag             := /[\w][\w.-]{0,127}/
# Docker reads the first component as a registry only when it has a '.' or a ':' port or is 'localhost'
# ("rocm/pytorch" is Docker Hub's rocm/pytorch), so the domain alternative requires one of those; anything
# else must be a lower-case path component. The digest is not part of base_image.name: it has its own key.
_ALPHA_NUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[_.]|__|-+)"
_PATH_COMPONENT = rf"{_ALPHA_NUMERIC}(?:{_SEPARATOR}{_ALPHA_NUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_PORT = r":[0-9]+"
_DOMAIN = (
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})+(?:{_PORT})?"  # registry.example.com[:5000]
    rf"|{_DOMAIN_COMPONENT}{_PORT}"  # myregistry:5000, localhost:5000
    r"|localhost"
    rf"|\[[0-9a-fA-F:]+\](?:{_PORT})?)"  # [::1]:5000
)
_REPOSITORY = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"  # \w in Go's RE2 is ASCII-only
IMAGE_NAME_RE = re.compile(rf"{_REPOSITORY}(?::{_TAG})?")
# What the builder pulls and builds FROM: repository@digest (the tag dropped), or a local image id.
PINNED_REFERENCE_RE = re.compile(rf"{_REPOSITORY}@{DIGEST_RE.pattern}|{DIGEST_RE.pattern}")
_NAME_MAX = 255  # distribution/reference's NameTotalLengthMax
# A docker recipe's name becomes the image repository prbench/<name>, so it must be one path component.
RECIPE_IMAGE_NAME_RE = re.compile(_PATH_COMPONENT)

# GPU architectures as the build reads them. CUDA: TORCH_CUDA_ARCH_LIST entries (compute capability with an
# optional arch-specific 'a' or family 'f' suffix and '+PTX'); it does not take sm_90. ROCm: the LLVM AMDGPU
# processor names PYTORCH_ROCM_ARCH takes (gfx90a, gfx942, gfx950, gfx1100).
_CUDA_ARCH_RE = re.compile(r"[0-9]{1,2}\.[0-9][af]?(?:\+PTX)?")
_ROCM_ARCH_RE = re.compile(r"gfx[0-9][0-9a-f]{1,3}")
_SM_ARCH_RE = re.compile(r"sm_(?P<major>[0-9]{1,2})(?P<minor>[0-9])(?P<suffix>[af]?)")
_ARCH_RULES: dict[str, tuple[tuple[re.Pattern[str], ...], str]] = {
    "cuda": ((_CUDA_ARCH_RE,), "a CUDA compute capability as TORCH_CUDA_ARCH_LIST takes it (like 9.0 or 9.0a)"),
    "rocm": ((_ROCM_ARCH_RE,), "an AMD GPU architecture (like gfx942 or gfx90a)"),
    "cpu": ((_CUDA_ARCH_RE, _ROCM_ARCH_RE), "a GPU architecture (like 9.0 or gfx942)"),
}

# Debian policy: a package name is [a-z0-9][a-z0-9+.-]+; a version is [epoch:]upstream[-revision] where the
# upstream part starts with a digit and uses alphanumerics and . + ~ - only.
_APT_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+(?:=(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*)?")


def control_characters(text: str) -> list[str]:
    """The characters of ``text`` that would break a line or a terminal: C0/C1 controls (newline, NUL, ESC)
    and the Unicode line and paragraph separators."""
    return [ch for ch in text if unicodedata.category(ch) in ("Cc", "Zl", "Zp")]


def _repository(name: str) -> str:
    """The image name without its tag; a ':' before the last '/' is a registry port, not a tag."""
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def is_image_name(name: str) -> bool:
    """Whether ``name`` is an image reference without a digest (``[registry/]path[:tag]``)."""
    # The length check first bounds the regex's work; the repository alone is limited to 255 characters.
    return len(name) <= _NAME_MAX + 129 and bool(IMAGE_NAME_RE.fullmatch(name)) and len(_repository(name)) <= _NAME_MAX


def is_pinned_reference(reference: str) -> bool:
    """Whether ``reference`` is what a build may pull or build FROM: ``repository@sha256:<hex>`` or an image id."""
    return len(reference) <= _NAME_MAX + 72 and bool(PINNED_REFERENCE_RE.fullmatch(reference))


def _show(key: str) -> str:
    """A key as it appears in a message: quoted, with any newline escaped so the message stays one line."""
    return repr(key)


_TOP_KEYS = {
    "description", "platform", "runner", "base_image", "arch", "triton", "pytorch", "pip", "env",
    "inductor_config", "patches", "build", "suite",
}
_SECTION_KEYS = {
    "base_image": {"name", "digest"},
    "triton": {"source", "commit", "wheel", "sha256"},
    "pytorch": {"source", "commit", "wheel", "sha256"},
    "pip": {"extra"},
    "build": {"max_jobs", "apt", "env"},
    "suite": {"models", "size", "mode", "dtype", "env"},
}
# Variables the image's build steps set themselves, from other recipe keys or from what the build reads: a
# ``[build] env`` entry may not replace them (MAX_JOBS comes from build.max_jobs or --max-jobs; the arch lists from
# 'arch'; CMAKE_PREFIX_PATH is unset on purpose, see prbench.images.pytorch_setup).
RESERVED_BUILD_ENV = ("USE_ROCM", "USE_CUDA", "PYTORCH_ROCM_ARCH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
                      "CMAKE_PREFIX_PATH", "AOTRITON_INSTALLED_PREFIX")


@dataclass(frozen=True)
class BaseImage:
    name: str
    digest: str

    @property
    def reference(self) -> str:
        """``repo@sha256:...``: the only form we ever pull or build FROM, so a moving tag cannot change it."""
        return f"{_repository(self.name)}@{self.digest}"


@dataclass(frozen=True)
class SourcePin:
    source: str
    commit: str  # 40-hex SHA, FROM_PYTORCH_PIN (Triton only) or INSTALLED (local recipes)

    @property
    def from_pytorch_pin(self) -> bool:
        return self.commit == FROM_PYTORCH_PIN


# The distribution names a pinned wheel may have, per section: a Triton wheel has shipped under several names.
WHEEL_NAMES = {
    "pytorch": ("torch",),
    "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm", "triton-rocm"),
}


# A venv recipe's wheel without a sha256 (`_parse_wheel`): pinned by what the store fetches.
UNPINNED = ""


@dataclass(frozen=True)
class WheelPin:
    """A binary release pinned exactly: ``torch==2.13.0+cpu`` and the sha256 of the wheel file.

    The image installs it from the store's wheelhouse only (``pip install --no-index --require-hashes``), so
    another file with the same name and version can never take its place.
    """

    requirement: str
    sha256: str

    @property
    def name(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)

    @property
    def version(self) -> str:
        return next(iter(Requirement(self.requirement).specifier)).version


@dataclass(frozen=True)
class SuiteDefaults:
    """A recipe's ``[suite]``: the experiment a suite on this environment runs where no flag says otherwise.

    ``None`` leaves a setting to invoke.yaml's ``prbench.suite``. ``env`` joins the variant's environment under
    the ``--env`` flags (every stage of a side compiles with the same settings); unlike ``[env]`` it is not
    baked into the image, since it says what is measured, not what the environment is.
    """

    models: str | None = None
    size: str | None = None
    mode: str | None = None
    dtype: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    platform: str
    runner: str
    description: str = ""
    base_image: BaseImage | None = None
    arch: tuple[str, ...] = ()
    triton: SourcePin | None = None
    pytorch: SourcePin | None = None
    pip_extra: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    inductor_config: dict[str, Any] = field(default_factory=dict)
    patches: tuple[str, ...] = ()
    max_jobs: int | None = None
    # [build] env: variables of the PyTorch and Triton build steps only (not of the image the stages run in);
    # prbench.images.pytorch_setup adds its defaults under them.
    build_env: dict[str, str] = field(default_factory=dict)
    # Debian/Ubuntu packages the base lacks (e.g. python3 in nvidia/cuda images), installed in the base layer.
    apt_packages: tuple[str, ...] = ()
    # Binary pins instead of source builds: [pytorch] wheel + sha256 (then [triton] is a wheel pin or, on the
    # CPU, absent: the CPU wheels need no Triton, Inductor generates C++ there).
    pytorch_wheel: WheelPin | None = None
    triton_wheel: WheelPin | None = None
    suite: SuiteDefaults = field(default_factory=SuiteDefaults)

    @property
    def is_docker(self) -> bool:
        return self.runner == "docker"

    @property
    def sides_apart(self) -> bool:
        """Whether each side of a comparison has an environment of its own (an image, a venv), so each side's timing
        runs in a stage of its own; the local runner's two sides share one Python and one stage."""
        return self.runner in ("docker", "venv")

    @property
    def is_venv(self) -> bool:
        """Whether each side is a virtual environment built from the recipe's wheels (``prbench.images.venv``)."""
        return self.runner == "venv"

    @property
    def is_wheel(self) -> bool:
        """Whether the image installs pinned wheels rather than building PyTorch from source."""
        return self.pytorch_wheel is not None

    @property
    def wheel_pins(self) -> tuple[WheelPin, ...]:
        return tuple(pin for pin in (self.pytorch_wheel, self.triton_wheel) if pin is not None)

    def with_wheels(self, pytorch: WheelPin | None, triton: WheelPin | None) -> Recipe:
        """This recipe with other wheel pins (a side of a comparison naming a wheel, or a lock's pins)."""
        return replace(self, pytorch_wheel=pytorch or self.pytorch_wheel, triton_wheel=triton or self.triton_wheel)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = self.path.name
        return data

    def content_hash(self) -> str:
        """Hash of the recipe's meaning (not its formatting), used in image tags and stage input hashes.

        ``[suite]`` is left out: it is what a suite measures by default, which the suite's own inputs (the
        request, the variant's env) already hold; changing it must not rebuild an image.
        """
        data = self.to_dict()
        del data["suite"]
        blob = json.dumps(data, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()


def recipe_path(name_or_path: str, recipes_dir: Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" and candidate.exists():
        return candidate
    path = recipes_dir / f"{name_or_path}.toml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in recipes_dir.glob("*.toml"))) or "none"
        raise UserError(f"--recipe: unknown recipe '{name_or_path}' (known: {known})")
    return path


MAX_RECIPE_BYTES = 1 << 20  # the recipes in recipes/ are under 4 kB


def load_recipe(name_or_path: str, recipes_dir: Path) -> Recipe:
    path = recipe_path(name_or_path, recipes_dir)
    try:  # a regular file (a FIFO would never end) of a recipe's size
        raw = tomllib.loads(read_bytes(path, "a recipe (TOML)", MAX_RECIPE_BYTES).decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: malformed TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read recipe: {exc}") from None
    return parse_recipe(raw, path)


def list_recipes(recipes_dir: Path) -> list[Recipe]:
    return [load_recipe(str(p), recipes_dir) for p in sorted(recipes_dir.glob("*.toml"))]


def parse_recipe(raw: dict[str, Any], path: Path) -> Recipe:
    if control_characters(path.name):  # before any message prints the path
        raise UserError(f"{str(path)!r}: the recipe's file name has control characters")
    check = _Checker(path)
    check.known_keys(raw, _TOP_KEYS, "")
    for section, keys in _SECTION_KEYS.items():
        if section in raw:
            check.known_keys(check.table(raw, section), keys, section)

    platform = check.choice(raw, "platform", PLATFORMS)
    runner = check.choice(raw, "runner", RUNNERS, default="local" if platform == "cpu" else "docker")
    if runner in ("docker", "venv"):
        _check_image_name(path)
    if runner == "venv" and "base_image" in raw:
        raise UserError(f"{path}: key 'base_image': a venv recipe has no image; its sides are virtual environments "
                        "of the interpreter compare runs (--python)")
    base_image = _parse_base_image(raw, check, docker=runner == "docker")
    pytorch_wheel = _parse_wheel(raw, check, "pytorch", runner)
    triton_wheel = _parse_wheel(raw, check, "triton", runner)
    if runner == "venv" and pytorch_wheel is None:
        raise UserError(f"{path}: key 'pytorch.wheel': a venv recipe installs a torch wheel (an exact pin like "
                        "torch==2.13.0+cpu, with its sha256)")
    if pytorch_wheel is not None:
        triton = pytorch = None
        _check_wheel_recipe(raw, check, platform, triton_wheel)
    else:
        if triton_wheel is not None:
            raise UserError(f"{path}: key 'triton.wheel': a Triton wheel goes with a PyTorch wheel "
                            "([pytorch] wheel + sha256); a source-built PyTorch builds Triton from source too")
        triton = _parse_source(raw, check, "triton", allow_pin=True, docker=runner == "docker")
        pytorch = _parse_source(raw, check, "pytorch", allow_pin=False, docker=runner == "docker")
    env = {k: check.env_value(k, v) for k, v in check.table(raw, "env").items()}
    arch = _parse_arch(raw, check, platform)
    if runner == "docker" and platform != "cpu" and not arch:
        raise UserError(f"{path}: key 'arch': a {platform} recipe needs at least one GPU architecture")
    max_jobs = check.table(raw, "build").get("max_jobs")
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
        raise UserError(f"{path}: key 'build.max_jobs': expected a positive integer, got {max_jobs!r}")
    build_env = _parse_build_env(raw, check)
    inductor_config = dict(check.table(raw, "inductor_config"))
    if inductor_config:  # only then: checking names and types imports torch's Inductor config (1-2 s)
        from prbench.inductor_options import check_inductor_config

        check_inductor_config(inductor_config, f"{path}: key 'inductor_config'")
    return Recipe(
        name=path.stem,
        path=path,
        platform=platform,
        runner=runner,
        description=check.string(raw, "description", default=""),
        base_image=base_image,
        arch=arch,
        triton=triton,
        pytorch=pytorch,
        pip_extra=_parse_pip_extra(raw, check),
        env=env,
        inductor_config=inductor_config,
        patches=_parse_patches(raw, check),
        max_jobs=max_jobs,
        build_env=build_env,
        apt_packages=_parse_apt(raw, check),
        pytorch_wheel=pytorch_wheel,
        triton_wheel=triton_wheel,
        suite=_parse_suite(raw, check),
    )


def _parse_suite(raw: dict[str, Any], check: _Checker) -> SuiteDefaults:
    """``[suite]``: each value checked against the option list its flag takes (``foundation.formats.suite_options``)."""
    table = check.table(raw, "suite")
    picked: dict[str, str | None] = {}
    for key, options in (("size", SIZES), ("mode", MODES), ("dtype", DTYPES)):
        value = check.string(table, key, prefix="suite.", default="") or None
        if value is not None and value not in options:
            raise UserError(f"{check.path}: key 'suite.{key}': expected one of {', '.join(options)}, got {value!r}")
        picked[key] = value
    models = check.string(table, "models", prefix="suite.", default="") or None
    if models is not None:
        try:
            resolve_models(models)
        except UnknownModelError as exc:
            raise UserError(f"{check.path}: key 'suite.models': {exc}") from None
    env = {k: check.env_value(k, v, "suite.env.") for k, v in check.table(table, "env", "suite.").items()}
    return SuiteDefaults(models=models, env=env, **picked)


def _check_image_name(path: Path) -> None:
    """A docker recipe's file name names its image, prbench/<name>:<hash>."""
    name = path.stem
    if not RECIPE_IMAGE_NAME_RE.fullmatch(name):
        raise UserError(
            f"{path}: the recipe name {name!r} (its file name) names the image prbench/<name>; use lower-case "
            "letters and digits separated by '.', '_' or '-' (like rocm7-mi300)"
        )


def _parse_base_image(raw: dict[str, Any], check: _Checker, docker: bool) -> BaseImage | None:
    if "base_image" not in raw:
        if docker:
            raise UserError(f"{check.path}: key 'base_image': a docker recipe needs a base image")
        return None
    table = check.table(raw, "base_image")
    name = check.string(table, "name", prefix="base_image.")
    if "@" in name:
        raise UserError(f"{check.path}: key 'base_image.name': give the tag here and the digest in 'digest'")
    if not is_image_name(name):
        raise UserError(
            f"{check.path}: key 'base_image.name': expected an image name like rocm/pytorch:tag or "
            f"registry.example.com:5000/team/image:tag (lower-case path, optional tag, no digest), got {name!r}"
        )
    digest = table.get("digest")
    if digest is None:
        if docker:
            raise UserError(
                f"{check.path}: key 'base_image.digest': image '{name}' is a tag without a digest; "
                "pin it as sha256:<64 hex> so a moving tag cannot change the environment"
            )
        return None
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise UserError(f"{check.path}: key 'base_image.digest': expected sha256:<64 hex>, got {digest!r}")
    return BaseImage(name=name, digest=digest)


def _parse_source(raw: dict[str, Any], check: _Checker, key: str, allow_pin: bool, docker: bool) -> SourcePin | None:
    if key not in raw:
        if docker:
            raise UserError(f"{check.path}: key '{key}': a docker recipe needs a {key} source and commit")
        return None
    table = check.table(raw, key)
    source = check.string(table, "source", prefix=f"{key}.")
    commit = check.string(table, "commit", prefix=f"{key}.")
    allowed = {INSTALLED} | ({FROM_PYTORCH_PIN} if allow_pin else set())
    if commit not in allowed and not _SHA_RE.fullmatch(commit):
        extra = f" or '{FROM_PYTORCH_PIN}'" if allow_pin else ""
        raise UserError(f"{check.path}: key '{key}.commit': expected a full 40-hex commit SHA{extra}, got {commit!r}")
    if docker and commit == INSTALLED:
        raise UserError(f"{check.path}: key '{key}.commit': '{INSTALLED}' only makes sense for a local recipe")
    return SourcePin(source=source, commit=commit)


def _parse_wheel(raw: dict[str, Any], check: _Checker, key: str, runner: str) -> WheelPin | None:
    """``[pytorch]``/``[triton]`` as a wheel pin (``wheel`` + ``sha256``), or None when the section has no wheel.

    A venv recipe may leave ``sha256`` out for a wheel of an index the recipe's author could not reach: the first
    ``invoke store fetch`` (or compare) pins it by the sha256 of what pip got, and every lock records that one."""
    table = check.table(raw, key) if key in raw else {}
    if "wheel" not in table:
        if "sha256" in table:
            raise UserError(f"{check.path}: key '{key}.sha256': goes with '{key}.wheel' (an exact requirement "
                            "like torch==2.13.0+cpu)")
        return None
    if runner == "local":
        raise UserError(f"{check.path}: key '{key}.wheel': wheel pins are installed in a Docker image or a venv; "
                        "a local recipe runs the installed torch")
    for other in ("source", "commit"):
        if other in table:
            raise UserError(f"{check.path}: key '{key}.{other}': a wheel pin has no source build; give either "
                            f"'{key}.wheel' + '{key}.sha256' or '{key}.source' + '{key}.commit'")
    requirement = check.string(table, "wheel", prefix=f"{key}.")
    problem = wheel_problem(requirement, WHEEL_NAMES[key])
    if problem:
        raise UserError(f"{check.path}: key '{key}.wheel': {problem}, got {requirement!r}")
    if runner == "venv" and "sha256" not in table:
        return WheelPin(requirement=requirement, sha256=UNPINNED)
    sha256 = check.string(table, "sha256", prefix=f"{key}.")
    if not SHA256_RE.fullmatch(sha256):
        raise UserError(f"{check.path}: key '{key}.sha256': expected the wheel file's sha256 as 64 lower-case hex "
                        f"digits, got {sha256!r}")
    return WheelPin(requirement=requirement, sha256=sha256)


def wheel_problem(requirement: str, names: tuple[str, ...]) -> str | None:
    """Why ``requirement`` is not an exact pin of one of ``names`` (``name==version``), or None."""
    expected = f"expected an exact pin like {names[0]}==2.13.0+cpu"
    problem = _requirement_problem(requirement)
    if problem:
        return expected
    parsed = Requirement(requirement)
    if canonicalize_name(parsed.name) not in names:
        return f"{expected} (the distribution must be {' or '.join(names)})"
    specifiers = list(parsed.specifier)
    if parsed.extras or parsed.marker or len(specifiers) != 1 or specifiers[0].operator != "==" \
            or "*" in specifiers[0].version:
        return f"{expected} (one '==' version, no wildcard, extras or markers)"
    return None


def _check_wheel_recipe(raw: dict[str, Any], check: _Checker, platform: str, triton_wheel: WheelPin | None) -> None:
    """A wheel recipe: Triton is a wheel pin too, except on the CPU where it may be left out."""
    if "triton" in raw and triton_wheel is None:
        raise UserError(f"{check.path}: key 'triton': with a PyTorch wheel, Triton is a wheel pin too "
                        "('triton.wheel' + 'triton.sha256'), or absent on the CPU")
    if raw.get("patches"):
        raise UserError(f"{check.path}: key 'patches': patches apply to source trees, and a wheel recipe builds none; "
                        "give a Python-only change as the PR (an overlay on the wheel's torch package)")
    if triton_wheel is None and platform != "cpu":
        raise UserError(f"{check.path}: key 'triton': a {platform} recipe with a PyTorch wheel pins its Triton wheel "
                        "('triton.wheel' + 'triton.sha256'); only a cpu recipe may leave Triton out")


def _parse_arch(raw: dict[str, Any], check: _Checker, platform: str) -> tuple[str, ...]:
    patterns, expected = _ARCH_RULES[platform]
    arch = check.str_list(raw, "arch")
    for i, name in enumerate(arch):
        if not any(p.fullmatch(name) for p in patterns):
            raise UserError(f"{check.path}: key 'arch[{i}]': expected {expected}, got {name!r}{_arch_hint(name)}")
    return tuple(arch)


def _arch_hint(name: str) -> str:
    """sm_90 is how nvcc spells 9.0, and the most likely slip in a CUDA recipe."""
    sm = _SM_ARCH_RE.fullmatch(name)
    return f" (write it as {sm['major']}.{sm['minor']}{sm['suffix']})" if sm else ""


def _parse_apt(raw: dict[str, Any], check: _Checker) -> tuple[str, ...]:
    packages = check.str_list(check.table(raw, "build"), "apt", prefix="build.")
    for i, package in enumerate(packages):
        if not _APT_RE.fullmatch(package):
            raise UserError(
                f"{check.path}: key 'build.apt[{i}]': expected a Debian package name "
                f"(like curl or python3-dev=3.11.2-1), got {package!r}"
            )
    return tuple(packages)


def _parse_build_env(raw: dict[str, Any], check: _Checker) -> dict[str, str]:
    table = check.table(raw, "build").get("env", {})
    if not isinstance(table, dict):
        raise UserError(f"{check.path}: key 'build.env': expected a table, got {type(table).__name__}")
    env = {name: check.env_value(name, value, prefix="build.env.") for name, value in table.items()}
    for name in env:
        if name in RESERVED_BUILD_ENV:
            raise UserError(f"{check.path}: key {_show('build.env.' + name)}: prbench sets {name} itself "
                            f"(not settable: {', '.join(RESERVED_BUILD_ENV)}; the build's jobs are build.max_jobs)")
    return env


def _parse_pip_extra(raw: dict[str, Any], check: _Checker) -> tuple[str, ...]:
    entries = check.str_list(check.table(raw, "pip"), "extra", prefix="pip.")
    for i, entry in enumerate(entries):
        problem = _requirement_problem(entry)
        if problem:
            raise UserError(f"{check.path}: key 'pip.extra[{i}]': {problem}, got {entry!r}")
    return tuple(entries)


def _requirement_problem(entry: str) -> str | None:
    """Why ``entry`` is not a plain requirement specifier, or None. Options (``--index-url=...``) would turn
    pip against another index, and a direct URL would fetch code no lock can pin."""
    expected = "expected a requirement like transformers==4.57.1 or numpy[extra]>=2; python_version>='3.10'"
    if entry.lstrip().startswith("-"):
        return f"{expected} (a pip option is not allowed)"
    try:
        requirement = Requirement(entry)
    except InvalidRequirement:
        return expected
    if requirement.url:
        return f"{expected} (a direct URL reference 'name @ url' is not allowed)"
    return None


def resolve_patch_entry(entry: str, where: str, patches_dir: Path | None = None) -> tuple[str, Path]:
    """A ``patches`` entry ``"<target>:<path inside patches/>"``: its target tree and the resolved patch file.

    The path must stay inside the repository's ``patches/`` after resolving symlinks: a recipe is a shared file,
    and its patches are applied to the source tree that is built and run.
    """
    from prbench.sides import patches as patch_tool  # the module attribute, looked up now, so tests can move it

    root = (patches_dir or patch_tool.PATCHES_DIR).resolve()
    target, sep, name = entry.partition(":")
    if not sep or target not in PATCH_TARGETS or not name:
        raise UserError(f"{where}: expected 'pytorch:<file in patches/>' or 'triton:<file in patches/>', got {entry!r}")
    relative = Path(name)
    if relative.is_absolute():
        raise UserError(f"{where}: {entry!r} is an absolute path; give a path relative to {root}")
    if ".." in relative.parts:
        raise UserError(f"{where}: {entry!r} climbs out with '..'; give a path inside {root}")
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise UserError(f"{where}: {entry!r} resolves outside {root} (through a symlink)")
    if not path.is_file():
        raise UserError(f"{where}: {entry!r}: no such file in {root}")
    return target, path


def _parse_patches(raw: dict[str, Any], check: _Checker) -> tuple[str, ...]:
    entries = check.str_list(raw, "patches")
    for i, entry in enumerate(entries):
        resolve_patch_entry(entry, f"{check.path}: key 'patches[{i}]'")
    return tuple(entries)


class _Checker:
    """Small typed accessors that turn a wrong type into a one-line error naming file and key.

    Every string they hand out is free of control characters: none of them has a reason to hold a newline,
    NUL or escape sequence, and each such character is a way to break a Dockerfile line or a one-line message.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def known_keys(self, table: dict[str, Any], allowed: set[str], section: str) -> None:
        for key in table:
            if key not in allowed:
                where = f"{section}.{key}" if section else key
                raise UserError(f"{self.path}: unknown key {_show(where)} (allowed: {', '.join(sorted(allowed))})")

    def table(self, raw: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
        value = raw.get(key, {})
        if not isinstance(value, dict):
            raise UserError(f"{self.path}: key '{prefix}{key}': expected a table, got {type(value).__name__}")
        return value

    def string(self, raw: dict[str, Any], key: str, prefix: str = "", default: str | None = None) -> str:
        if key not in raw:
            if default is not None:
                return default
            raise UserError(f"{self.path}: missing key '{prefix}{key}'")
        value = raw[key]
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{self.path}: key '{prefix}{key}': expected a non-empty string, got {value!r}")
        self.no_control_characters(f"{prefix}{key}", value)
        return value

    def choice(self, raw: dict[str, Any], key: str, options: tuple[str, ...], default: str | None = None) -> str:
        value = self.string(raw, key, default=default)
        if value not in options:
            raise UserError(f"{self.path}: key '{key}': expected one of {', '.join(options)}, got {value!r}")
        return value

    def str_list(self, raw: dict[str, Any], key: str, prefix: str = "") -> list[str]:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise UserError(f"{self.path}: key '{prefix}{key}': expected a list of strings, got {value!r}")
        for i, item in enumerate(value):
            self.no_control_characters(f"{prefix}{key}[{i}]", item)
        return value

    def env_value(self, name: str, value: Any, prefix: str = "env.") -> str:
        if not ENV_NAME_RE.fullmatch(name):
            raise UserError(f"{self.path}: key {_show(prefix + name)}: not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise UserError(f"{self.path}: key '{prefix}{name}': expected a string or number, got {value!r}")
        self.no_control_characters(f"{prefix}{name}", str(value))
        return str(value)

    def no_control_characters(self, key: str, value: str) -> None:
        found = control_characters(value)
        if found:
            raise UserError(
                f"{self.path}: key {_show(key)}: control characters ({', '.join(map(repr, sorted(set(found))))}) "
                f"are not allowed, got {value!r}"
            )
