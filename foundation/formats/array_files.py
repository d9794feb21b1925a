"""The numerical A/B's array files: one ``.npz`` per model or kernel, a JSON ``meta`` entry beside named numeric
arrays (``<role>/<name>``), written atomically, read without pickles.

``write_arrays`` and ``read_arrays`` own the container; what the names mean is the caller's
(`analysis.models.numerics`: ``<role>/<output>``; `analysis.kernels.numerics`: ``in/<position>``,
``out/<position>``). A file whose ``meta.format`` is not `ARRAY_FORMAT`, or that holds anything but numeric or
boolean arrays, is one UserError naming it.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from foundation import atomic_io
from foundation.errors import UserError
from foundation.records import open_regular

ARRAY_FORMAT = 1


def write_arrays(path: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    savez: Any = np.savez  # its keyword arguments are the arrays' names
    with atomic_io.atomic_path(path) as tmp, open(tmp, "wb") as handle:
        savez(handle, meta=np.array(json.dumps({"format": ARRAY_FORMAT, **meta})), **arrays)


def read_arrays(path: Path, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, {name: array})`` of a file ``write_arrays`` wrote (``meta`` not among the arrays)."""
    try:
        with open_regular(Path(path), what) as handle, np.load(handle, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"][()]))
            arrays = {key: data[key] for key in data.files if key != "meta"}
    except (ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not {what} written by prbench ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != ARRAY_FORMAT:
        raise UserError(f"{path}: meta: expected an object with format {ARRAY_FORMAT}")
    if not all(np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_ for a in arrays.values()):
        raise UserError(f"{path}: expected numeric arrays only")
    return meta, arrays
