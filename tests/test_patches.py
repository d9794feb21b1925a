"""A user of the seed's organizer patches it with one call; drift is reported naming patch and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.errors import UserError
from prbench.sides.patches import PATCHES_DIR, apply_patch, check_patch, patched_files

PATCH = "paas-organize-no-return-mode.patch"

# The region of processing/organize_kernels.py the patch targets, as the workflow README shows it.
UPSTREAM = '''import re


class FileProcessor:
    def __init__(self, reps: int = 1000, warmup: int = 100, replace_device_id: bool = True):
        self.benchmark_pattern = re.compile(r'rep\\s*=\\s*\\d+')
        self.benchmark_replacement = f'rep={reps}, warmup={warmup}, return_mode="median"'
        self.replace_device_id = replace_device_id

        # Device ID replacement patterns
        self.device_patterns = []
'''


def make_tree(root: Path, text: str) -> Path:
    target = root / "processing" / "organize_kernels.py"
    target.parent.mkdir(parents=True)
    target.write_text(text)
    return target


def test_patch_is_listed_in_the_readme() -> None:
    assert PATCH in (PATCHES_DIR / "README.md").read_text()
    assert patched_files(PATCHES_DIR / PATCH) == ("processing/organize_kernels.py",)


def test_patch_drops_return_mode_and_sets_100_10(tmp_path: Path) -> None:
    target = make_tree(tmp_path, UPSTREAM)
    applied = apply_patch(PATCH, tmp_path)
    text = target.read_text()
    assert applied.files == ("processing/organize_kernels.py",)
    assert "return_mode" not in text
    assert "reps: int = 100, warmup: int = 10" in text
    assert "self.benchmark_replacement = f'rep={reps}, warmup={warmup}'" in text


def test_drift_names_patch_and_file_and_leaves_the_tree_alone(tmp_path: Path) -> None:
    drifted = UPSTREAM.replace('return_mode="median"', 'return_mode="min"')
    target = make_tree(tmp_path, drifted)
    with pytest.raises(UserError, match=rf"{PATCH}.*processing/organize_kernels.py"):
        check_patch(PATCH, tmp_path)
    with pytest.raises(UserError):
        apply_patch(PATCH, tmp_path)
    assert target.read_text() == drifted


def test_missing_file_is_drift_too(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"processing/organize_kernels.py"):
        check_patch(PATCH, tmp_path)
