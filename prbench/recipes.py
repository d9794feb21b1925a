"""Environment recipes (``recipes/*.toml``): what an environment is made of, validated on load.

A recipe names the platform, the base image (by digest for Docker recipes), the GPU architectures, the
Triton and PyTorch sources and commits, extra pip pins, environment variables, Inductor config and patches.
Every validation failure is a one-line ``UserError`` naming the file and the key.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis.errors import UserError

PLATFORMS = ("cpu", "cuda", "rocm")
RUNNERS = ("local", "docker")
FROM_PYTORCH_PIN = "from-pytorch-pin"
INSTALLED = "installed"

_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_TOP_KEYS = {
    "description", "platform", "runner", "base_image", "arch", "triton", "pytorch", "pip", "env",
    "inductor_config", "patches", "build",
}
_SECTION_KEYS = {
    "base_image": {"name", "digest"},
    "triton": {"source", "commit"},
    "pytorch": {"source", "commit"},
    "pip": {"extra"},
    "build": {"max_jobs", "apt"},
}


@dataclass(frozen=True)
class BaseImage:
    name: str
    digest: str

    @property
    def reference(self) -> str:
        """``repo@sha256:...``: the only form we ever pull or build FROM, so a moving tag cannot change it."""
        repo = self.name.rsplit(":", 1)[0] if ":" in self.name.rsplit("/", 1)[-1] else self.name
        return f"{repo}@{self.digest}"


@dataclass(frozen=True)
class SourcePin:
    source: str
    commit: str  # 40-hex SHA, FROM_PYTORCH_PIN (Triton only) or INSTALLED (local recipes)

    @property
    def from_pytorch_pin(self) -> bool:
        return self.commit == FROM_PYTORCH_PIN


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
    # Debian/Ubuntu packages the base lacks (e.g. python3 in nvidia/cuda images), installed in the base layer.
    apt_packages: tuple[str, ...] = ()

    @property
    def is_docker(self) -> bool:
        return self.runner == "docker"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = self.path.name
        return data

    def content_hash(self) -> str:
        """Hash of the recipe's meaning (not its formatting), used in image tags and stage input hashes."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
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


def load_recipe(name_or_path: str, recipes_dir: Path) -> Recipe:
    path = recipe_path(name_or_path, recipes_dir)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: malformed TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read recipe: {exc}") from None
    return parse_recipe(raw, path)


def list_recipes(recipes_dir: Path) -> list[Recipe]:
    return [load_recipe(str(p), recipes_dir) for p in sorted(recipes_dir.glob("*.toml"))]


def parse_recipe(raw: dict[str, Any], path: Path) -> Recipe:
    check = _Checker(path)
    check.known_keys(raw, _TOP_KEYS, "")
    for section, keys in _SECTION_KEYS.items():
        if section in raw:
            check.known_keys(check.table(raw, section), keys, section)

    platform = check.choice(raw, "platform", PLATFORMS)
    runner = check.choice(raw, "runner", RUNNERS, default="local" if platform == "cpu" else "docker")
    base_image = _parse_base_image(raw, check, docker=runner == "docker")
    triton = _parse_source(raw, check, "triton", allow_pin=True, docker=runner == "docker")
    pytorch = _parse_source(raw, check, "pytorch", allow_pin=False, docker=runner == "docker")
    env = {k: check.env_value(k, v) for k, v in check.table(raw, "env").items()}
    arch = tuple(check.str_list(raw, "arch"))
    if runner == "docker" and platform != "cpu" and not arch:
        raise UserError(f"{path}: key 'arch': a {platform} recipe needs at least one GPU architecture")
    max_jobs = check.table(raw, "build").get("max_jobs")
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1):
        raise UserError(f"{path}: key 'build.max_jobs': expected a positive integer, got {max_jobs!r}")
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
        pip_extra=tuple(check.str_list(check.table(raw, "pip"), "extra", prefix="pip.")),
        env=env,
        inductor_config=dict(check.table(raw, "inductor_config")),
        patches=tuple(check.str_list(raw, "patches")),
        max_jobs=max_jobs,
        apt_packages=tuple(check.str_list(check.table(raw, "build"), "apt", prefix="build.")),
    )


def _parse_base_image(raw: dict[str, Any], check: _Checker, docker: bool) -> BaseImage | None:
    if "base_image" not in raw:
        if docker:
            raise UserError(f"{check.path}: key 'base_image': a docker recipe needs a base image")
        return None
    table = check.table(raw, "base_image")
    name = check.string(table, "name", prefix="base_image.")
    digest = table.get("digest")
    if digest is None:
        if docker:
            raise UserError(
                f"{check.path}: key 'base_image.digest': image '{name}' is a tag without a digest; "
                "pin it as sha256:<64 hex> so a moving tag cannot change the environment"
            )
        return None
    if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
        raise UserError(f"{check.path}: key 'base_image.digest': expected sha256:<64 hex>, got {digest!r}")
    if "@" in name:
        raise UserError(f"{check.path}: key 'base_image.name': give the tag here and the digest in 'digest'")
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
    if commit not in allowed and not _SHA_RE.match(commit):
        extra = f" or '{FROM_PYTORCH_PIN}'" if allow_pin else ""
        raise UserError(f"{check.path}: key '{key}.commit': expected a full 40-hex commit SHA{extra}, got {commit!r}")
    if docker and commit == INSTALLED:
        raise UserError(f"{check.path}: key '{key}.commit': '{INSTALLED}' only makes sense for a local recipe")
    return SourcePin(source=source, commit=commit)


class _Checker:
    """Small typed accessors that turn a wrong type into a one-line error naming file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def known_keys(self, table: dict[str, Any], allowed: set[str], section: str) -> None:
        for key in table:
            if key not in allowed:
                where = f"{section}.{key}" if section else key
                raise UserError(f"{self.path}: unknown key '{where}' (allowed: {', '.join(sorted(allowed))})")

    def table(self, raw: dict[str, Any], key: str) -> dict[str, Any]:
        value = raw.get(key, {})
        if not isinstance(value, dict):
            raise UserError(f"{self.path}: key '{key}': expected a table, got {type(value).__name__}")
        return value

    def string(self, raw: dict[str, Any], key: str, prefix: str = "", default: str | None = None) -> str:
        if key not in raw:
            if default is not None:
                return default
            raise UserError(f"{self.path}: missing key '{prefix}{key}'")
        value = raw[key]
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{self.path}: key '{prefix}{key}': expected a non-empty string, got {value!r}")
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
        return value

    def env_value(self, name: str, value: Any) -> str:
        if not _ENV_NAME_RE.match(name):
            raise UserError(f"{self.path}: key 'env.{name}': not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise UserError(f"{self.path}: key 'env.{name}': expected a string or number, got {value!r}")
        return str(value)
