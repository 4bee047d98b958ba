"""Reading ``bench/thread_profile``'s profiles: where two servers' threads differ.

``report_profiles(out, pids)`` merges each server's ``<pid>-<kind>-<thread>.prof``
into ``<side>-<kind>.prof`` and prints, per kind of thread, each side's own
time per action and the functions whose own time (``tottime``) and time
including callees (``cumtime``) per action differ most between B and A.
Actions are counted as the calls of ``prepare_command`` on the Trio thread
(once per action run, warm-up included, on both sides alike). A side whose
profile is missing (the server died before writing it) is said so.
"""

from __future__ import annotations

import pstats
from pathlib import Path

#: (file name, line, function) as pstats keys them
Key = tuple[str, int, str]

_SHOWN = 14


def _merge(paths: list[Path], target: Path) -> dict[Key, tuple[int, float, float]]:
    merged = pstats.Stats(*(str(p) for p in paths))
    merged.dump_stats(str(target))
    for path in paths:
        path.unlink()
    stats = merged.stats  # type: ignore[attr-defined]
    return {key: (calls, tt, ct) for key, (_, calls, tt, ct, _) in stats.items()}


def _name(key: Key) -> str:
    file, line, function = key
    parts = Path(file).parts
    where = "/".join(parts[-2:]) if parts else file
    return f"{where}:{line}({function})" if line else function


def _actions(table: dict[Key, tuple[int, float, float]]) -> int:
    return sum(calls for key, (calls, _, _) in table.items() if key[2] == "prepare_command")


def report_profiles(out: Path, pids: dict[str, int]) -> None:
    """Rename and compare the profiles of the sides ``pids`` (name -> pid)."""
    kinds: dict[str, dict[str, dict[Key, tuple[int, float, float]]]] = {}
    for side, pid in pids.items():
        by_kind: dict[str, list[Path]] = {}
        for path in sorted(out.glob(f"{pid}-*.prof")):
            by_kind.setdefault(path.stem.split("-")[1], []).append(path)
        for kind, paths in by_kind.items():
            kinds.setdefault(kind, {})[side] = _merge(paths, out / f"{side}-{kind}.prof")
    trio = kinds.get("trio", {})
    actions = {side: _actions(trio.get(side, {})) for side in pids}
    print(f"profiles in {out}; actions (prepare_command calls): {actions}")
    if not all(actions.values()):
        print("  a side has no Trio profile or ran no action: no comparison")
        return
    for kind, sides in sorted(kinds.items()):
        if set(sides) != set(pids):
            print(f"  {kind}: only {sorted(sides)} profiled")
            continue
        a, b = sides["A"], sides["B"]
        per_a = sum(tt for _, tt, _ in a.values()) / actions["A"] * 1e3
        per_b = sum(tt for _, tt, _ in b.values()) / actions["B"] * 1e3
        print(f"{kind}: own time per action A {per_a:.3f} ms, B {per_b:.3f} ms (profiled)")
        for column, title in ((1, "tottime"), (2, "cumtime")):
            diffs = []
            for key in set(a) | set(b):
                va = a.get(key, (0, 0.0, 0.0))[column] / actions["A"]
                vb = b.get(key, (0, 0.0, 0.0))[column] / actions["B"]
                calls = b.get(key, (0, 0.0, 0.0))[0] / actions["B"]
                diffs.append((vb - va, va, vb, calls, key))
            diffs.sort(key=lambda d: -abs(d[0]))
            print(f"  {title}, largest B-A per action (us: B-A, A, B; B calls per action):")
            for diff, va, vb, calls, key in diffs[:_SHOWN]:
                figures = f"{diff * 1e6:+8.1f} {va * 1e6:8.1f} {vb * 1e6:8.1f} {calls:6.2f}"
                print(f"    {figures}  {_name(key)}")
