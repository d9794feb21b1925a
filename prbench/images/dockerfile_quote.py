"""The one way a value enters a rendered Dockerfile: ``dockerfile_value(value, kind)``.

Recipe validation is the first wall; this is the second, and it holds on its own: each kind of place in a
Dockerfile gets the quoting that place reads, and a value that no quoting can carry there is refused.

- ``shell``: a word of a ``RUN`` command line (bash, not Docker, reads it: ``RUN`` does no variable
  substitution). ``shlex.quote`` makes it one shell word.
- ``env``: an ``ENV`` value. Docker lexes it itself: in double quotes a backslash escapes only ``"``, ``$`` and
  ``\\`` and ``$NAME`` is expanded (moby/buildkit's shell lexer), so those three are escaped. JSON string
  quoting is not enough here: it leaves ``$`` live and writes ``\\uXXXX``, which Docker keeps literally.
- ``name``: an ``ENV`` variable name, an identifier or refused.
- ``word``: a ``COPY``/``WORKDIR`` path, which Docker also lexes (quotes, ``$``): plain path characters only.
- ``from``: the ``FROM`` reference: ``repository@sha256:<hex>`` or an image id, nothing else.
- ``comment``: text after ``#``; line breaks and other control characters are written as escapes, because a
  newline would end the comment and start an instruction.

No quoting can carry a newline into an instruction (a Dockerfile line ends there whatever the quotes), so every
kind but ``comment`` refuses control characters.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from prbench.sides.recipes import ENV_NAME_RE, control_characters, is_pinned_reference

_WORD_RE = re.compile(r"[A-Za-z0-9_.+@/][A-Za-z0-9_.+@/:=-]*")  # no leading '-' (COPY --from=...), no '$'


class UnsafeValue(ValueError):
    """A value that cannot be written into the place the template puts it."""


def dockerfile_value(value: object, kind: str) -> str:
    """``value`` (a string, or a number written as one) quoted for ``kind`` (see the module docstring)."""
    try:
        render = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown Dockerfile quoting kind {kind!r} (known: {', '.join(_KINDS)})") from None
    text = str(value)
    if kind != "comment" and control_characters(text):
        raise UnsafeValue(f"{text!r} has a line break or control character and cannot be written into a "
                          f"Dockerfile as {kind}")
    return render(text)


def _shell(text: str) -> str:
    return shlex.quote(text)


def _env(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _name(text: str) -> str:
    if not ENV_NAME_RE.fullmatch(text):
        raise UnsafeValue(f"{text!r} is not an environment variable name")
    return text


def _word(text: str) -> str:
    if not _WORD_RE.fullmatch(text):
        raise UnsafeValue(f"{text!r} is not a plain path (letters, digits and _ . + @ / : = -)")
    return text


def _from(text: str) -> str:
    if not is_pinned_reference(text):
        raise UnsafeValue(f"{text!r} is not an image pinned by digest (repository@sha256:<64 hex>) or an image id")
    return text


def _comment(text: str) -> str:
    # unicode_escape spells '\n' as the two characters '\' 'n', and NUL, ESC, U+2028... likewise.
    return "".join(ch.encode("unicode_escape").decode("ascii") if control_characters(ch) else ch for ch in text)


_KINDS: dict[str, Callable[[str], str]] = {
    "shell": _shell,
    "env": _env,
    "name": _name,
    "word": _word,
    "from": _from,
    "comment": _comment,
}
