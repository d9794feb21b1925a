"""A Triton A/B: the same PyTorch on both sides, two Triton commits; the record a run keeps of it, defined once.

``invoke compare --triton-base A --triton-pr B`` (or a PyTorch PR that only moves PyTorch's Triton pin,
`prbench.sides.pins.only_moves_triton_pin`) builds one PyTorch and two Tritons. The run's manifest keeps this
record under ``settings.triton_ab`` (`SETTINGS_KEY`, `TritonAB.to_json`, format `FORMAT_VERSION`), and the report
reads it back (`from_settings`) to

* treat every Triton kernel pair as changed: a Triton-only change leaves Inductor's source identical, so every
  kernel pairs by the body hash of that source, but what runs is what the other Triton compiled from it. Kernels
  no Triton compiles (Inductor's C++ kernels on the CPU) stay the identical-code control (`COMPILED_BY`);
* say in the headline which two commits (and the LLVM each pins) were compared, and, where no kernel Triton
  compiled was timed (the CPU recipe's C++ kernels), that this run compared no Triton code
  (`TritonAB.headline`) instead of calling the kernels identical as if Triton had been measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from foundation.errors import UserError

FORMAT_VERSION = 1
SETTINGS_KEY = "triton_ab"  # manifest.json: settings.triton_ab
COMPILED_BY = "triton"  # kernels.csv's ``backend`` of the kernels a Triton A/B changes
FLAGS = "flags"  # the user named both commits (--triton-base/--triton-pr)
PIN_BUMP = "pin-bump"  # the PR only moves PyTorch's Triton pin
# A local recipe: the installed Triton on both sides, the PR's with a --triton-pr patch overlaid (nothing built;
# ``base`` and ``pr`` are then the installed Triton's version)
INSTALLED_OVERLAY = "installed-overlay"


@dataclass(frozen=True)
class TritonAB:
    """Both Triton commits, the LLVM commit each tree pins (None: the tree pins none prbench reads), and why the
    run is a Triton A/B: `FLAGS`, `PIN_BUMP` with the pin file the PR changed (``pin_file``), or
    `INSTALLED_OVERLAY` (the installed Triton's version on both sides, the PR's patched)."""

    base: str
    pr: str
    base_llvm: str | None
    pr_llvm: str | None
    reason: str
    pin_file: str | None = None
    pytorch: str | None = None  # the one PyTorch commit both sides build
    pr_patch: str | None = None  # --triton-pr as a patch file: its name and sha256 ("x.patch sha256:…") on ``pr``

    def to_json(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> TritonAB:
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            raise UserError(f"{where}: expected a Triton A/B record of format {FORMAT_VERSION}")
        try:
            found = cls(**{k: v for k, v in data.items() if k != "format_version"})
        except TypeError:
            raise UserError(f"{where}: a Triton A/B record needs base, pr, base_llvm, pr_llvm and reason") from None
        for name in ("base", "pr", "reason"):
            if not isinstance(getattr(found, name), str):
                raise UserError(f"{where}.{name}: expected text")
        return found

    def commits(self) -> str:
        """``Triton 1a2b3c4d5e6f (LLVM 8a9b…) → 7c8d…``: both commits, short, with their LLVM."""
        def one(commit: str, llvm: str | None) -> str:
            return f"{commit[:12]}" + (f" (LLVM {llvm[:12]})" if llvm else "")
        patched = f" + {self.pr_patch}" if self.pr_patch else ""
        return f"Triton {one(self.base, self.base_llvm)} → {one(self.pr, self.pr_llvm)}{patched}"

    def headline(self, triton_pairs: int) -> str:
        """The sentence the verdict starts with; ``triton_pairs``: kernel pairs Triton compiled on both sides."""
        why = {PIN_BUMP: f"the PR only moves PyTorch's Triton pin ({self.pin_file})",
               INSTALLED_OVERLAY: "--triton-pr as a Python overlay on the installed Triton"}.get(
                   self.reason, "--triton-base/--triton-pr")
        pytorch = f"PyTorch {self.pytorch[:12]}" if self.pytorch else "PyTorch"
        built = "installed" if self.reason == INSTALLED_OVERLAY else "built once"
        said = f"**Triton A/B** ({why}): {self.commits()}, {pytorch} the same on both sides ({built})."
        if triton_pairs:
            return (f"{said} Inductor's source is the same on both sides, so every kernel pairs by it; the "
                    f"{triton_pairs} Triton kernel pair(s) are what the two Tritons compiled differently.")
        return (f"{said} **No Triton code was compared**: Inductor generated no kernel Triton compiles (on the CPU "
                "it generates C++ kernels), so the kernels below are identical code on both sides, not a result "
                "about Triton; the models' times still include anything else the two Tritons change.")


def from_settings(settings: Any, where: str = "manifest.json: settings") -> TritonAB | None:
    """The run's Triton A/B record, or None for an A/B of PyTorch."""
    if not isinstance(settings, dict) or settings.get(SETTINGS_KEY) is None:
        return None
    return TritonAB.from_json(settings[SETTINGS_KEY], f"{where}.{SETTINGS_KEY}")
