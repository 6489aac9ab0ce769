"""The one way a test compares output with a committed golden file.

``SCALESCOPE_UPDATE_GOLDEN=1`` writes the new golden and then *fails* the test with
"updated: review the diff" - a refreshed golden is never a pass, so it cannot approve
itself; the next run, with the variable unset, is the check. Update mode is refused when
``CI`` is set.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

ENV = "SCALESCOPE_UPDATE_GOLDEN"


def updating() -> bool:
    if os.environ.get(ENV) != "1":
        return False
    if os.environ.get("CI"):
        pytest.fail(f"{ENV}=1 is refused under CI: goldens are refreshed by a person, reviewed")
    return True


def check_text(path: Path, actual: str) -> None:
    """``actual`` equals the golden at ``path`` byte for byte."""
    if updating():
        _write(path, actual)
    assert path.exists(), f"{path} missing: create it with {ENV}=1 and review it"
    assert actual == path.read_text(encoding="utf-8"), (
        f"output differs from {path}; if the change is intended, refresh with {ENV}=1 "
        "and review the diff"
    )


def check_json(path: Path, actual: Any, rel_tol: float = 1e-9) -> None:
    """``actual`` equals the JSON golden, floats to ``rel_tol`` (last-digit platform noise)."""
    if updating():
        _write(path, json.dumps(actual, indent=2, ensure_ascii=False) + "\n")
    assert path.exists(), f"{path} missing: create it with {ENV}=1 and review it"
    close(actual, json.loads(path.read_text(encoding="utf-8")), rel_tol=rel_tol)


def close(a: Any, b: Any, where: str = "$", rel_tol: float = 1e-9) -> None:
    """Equal JSON values, floats compared to ``rel_tol``; the message names the path."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12), f"{where}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a.keys() ^ b.keys())}"
        for k in a:
            close(a[k], b[k], f"{where}.{k}", rel_tol)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, f"{where}[{i}]", rel_tol)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else None
    path.write_text(text, encoding="utf-8")
    what = "updated: review the diff" if old != text else "unchanged"
    # Always a failure: update mode never passes, so a refresh is never its own approval.
    pytest.fail(f"{what}: {path}; run again without {ENV} to check")
