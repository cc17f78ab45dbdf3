"""Git helpers the benchmarks share: the commit a result belongs to, and a
worktree of a baseline commit to measure side by side."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def git(*args, cwd=REPO, check=True) -> str:
    return subprocess.run(["git", *args], cwd=cwd, text=True, capture_output=True, timeout=120,
                          check=check).stdout.strip()


def commit() -> str | None:
    """HEAD of this checkout (+ "-dirty"), or None outside git."""
    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def baseline_tree(rev: str, needs: tuple[str, ...] = ()) -> tuple[Path, str]:
    """A detached worktree of `rev` in the temp folder (created, or reused when it
    is at that commit): (path, full sha). `needs`: files the commit must have."""
    try:
        sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"--baseline {rev!r}: not a commit ({e.stderr.strip()})") from None
    path = Path(tempfile.gettempdir()) / f"ptojax-baseline-{sha[:7]}"
    if path.exists():
        at = git("rev-parse", "HEAD", cwd=path, check=False)
        if at != sha:
            raise SystemExit(f"{path} exists but is at {at or '?'}, not {sha}; remove it "
                             f"(git worktree remove {path}) and run again")
    else:
        git("worktree", "add", "--detach", str(path), sha)
    for need in ("ptojax/__init__.py",) + tuple(needs):
        if not (path / need).exists():
            raise SystemExit(f"{path}: no {need} at {sha}")
    return path, sha
