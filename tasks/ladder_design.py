"""A ladder's declared sequential design: `design.json` beside its seed files.

    {"comparison": ["dapo", "warmup"], "alpha": 0.05, "spending": "obrien-fleming",
     "looks": [3, 5], "declared": "2026-11-30", "why": "<why these looks, in words>"}

A comparison judged again as seeds are added is a sequence of looks at one question, and 95% at
every look overstates what the last one shows. A results folder with this file judges its
`comparison`'s pooled row by the design's bound for the number of seeds pooled
(`tasks.sequential`): `looks` are the pooled seed counts at which it is judged, the last one the
planned total, and each look's information fraction is its seeds over that total. A report
pooling a seed count between looks shows the row and does not judge it: a look the design did
not plan would raise the bounds of the looks after it, and the report, regenerated after every
seed, would take one at each count. Past the last look it is refused. Without the file, every
row is judged at 95% as before.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from swe_rlvr.config import ConfigError
from tasks import sequential
from tasks.ladder_stats import excludes_zero

FILE = "design.json"
SPENDING = ("obrien-fleming",)


@dataclasses.dataclass(frozen=True)
class Design:
    comparison: tuple[str, str]
    looks: tuple[int, ...]
    alpha: float = 0.05
    spending: str = "obrien-fleming"
    declared: str = ""
    why: str = ""

    def judge(self, seeds: int) -> dict:
        """Where `seeds` pooled seeds stand: the look count, the information fraction, whether it
        is a look (`planned`), and for a look its index, |z| bound and the two-sided level of the
        interval that tests it; between looks, the next look's seed count instead."""
        if seeds > self.looks[-1]:
            raise ConfigError(f"{FILE}: {seeds} seeds are pooled, but the design's last look is "
                              f"at {self.looks[-1]}; a new design (a new results folder) is a new "
                              f"experiment.")
        where = {"looks": len(self.looks), "seeds": seeds, "fraction": seeds / self.looks[-1],
                 "planned": seeds in self.looks}
        if not where["planned"]:
            return {**where, "next": min(n for n in self.looks if n > seeds)}
        taken = [n for n in self.looks if n <= seeds]
        bound = sequential.bounds([n / self.looks[-1] for n in taken], self.alpha)[-1]
        return {**where, "look": len(taken), "bound": bound, "level": sequential.level(bound)}


def load(folder: Path) -> Design | None:
    """The design in `folder`, None when it has none; a malformed one is refused with the field."""
    path = Path(folder) / FILE
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    comparison, looks = raw.get("comparison"), raw.get("looks")
    if not (isinstance(comparison, list) and len(comparison) == 2
            and all(isinstance(a, str) for a in comparison)):
        raise ConfigError(f"{path}: `comparison` must name two arms, A and B of A − B, e.g. "
                          f'["dapo", "warmup"] (got {comparison!r}).')
    if not (isinstance(looks, list) and looks and all(isinstance(n, int) and n >= 1 for n in looks)
            and looks == sorted(set(looks))):
        raise ConfigError(f"{path}: `looks` must be increasing seed counts, the last one the "
                          f"planned total, e.g. [3, 5] (got {looks!r}).")
    alpha = raw.get("alpha", 0.05)
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ConfigError(f"{path}: `alpha` is the overall two-sided error rate, in (0, 1) "
                          f"(got {alpha!r}).")
    spending = raw.get("spending", "obrien-fleming")
    if spending not in SPENDING:
        raise ConfigError(f"{path}: `spending` must be one of {', '.join(SPENDING)} "
                          f"(got {spending!r}).")
    unknown = set(raw) - {f.name for f in dataclasses.fields(Design)}
    if unknown:
        raise ConfigError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}; the fields are "
                          f"{', '.join(f.name for f in dataclasses.fields(Design))}.")
    return Design((comparison[0], comparison[1]), tuple(looks), float(alpha), spending,
                  str(raw.get("declared", "")), str(raw.get("why", "")))


def sequential_lines(pairs: list[dict], design: Design | None) -> list[str]:
    """The design's comparison judged at its look: the bound, the interval at its level, and
    whether it excludes 0 (nothing without a design or before both arms have seeds)."""
    rows = [r for r in pairs if "sequential" in r]
    if design is None or not rows:
        return []
    r, look = rows[0], rows[0]["sequential"]
    declared = (f"Declared {design.declared or '(undated)'} in `design.json`: {r['a']} − {r['b']} "
                f"is judged when {_spoken(design.looks)} seeds are pooled, with "
                f"{design.alpha:g} two-sided alpha over all looks spent by Lan-DeMets' "
                f"O'Brien-Fleming-type function (`tasks.sequential`).")
    why = f" Why: {design.why}" if design.why else ""
    if not look["planned"]:
        return ["## The claim's sequential design", "",
                f"{look['seeds']} seeds are pooled, between the design's looks: {r['a']} − "
                f"{r['b']} is shown above and not judged at this count. A look the design did "
                f"not plan would raise the bounds of the looks after it; the next look is at "
                f"{look['next']} seeds. {declared}{why}", ""]
    return ["## The claim's sequential design", "",
            "| A − B | look | seeds | information fraction | bound on abs(z) | interval | "
            "paired bootstrap CI | excludes 0 |", "|---|---|---|---|---|---|---|---|",
            f"| {r['a']} − {r['b']} | {look['look']} of {look['looks']} | {look['seeds']} | "
            f"{look['fraction']:.2f} | {look['bound']:.3f} | {100 * look['level']:.1f}% | "
            f"[{look['low']:+.3f}, {look['high']:+.3f}] | "
            f"{'yes' if excludes_zero(look) else 'no'} |", "",
            f"{declared} This is look {look['look']} of {look['looks']}. The claim stands only "
            f"where this interval excludes 0; the 95% interval above is the fixed-sample "
            f"one.{why}", ""]


def _spoken(looks: tuple[int, ...]) -> str:
    """(3, 5) -> "3 and 5"; (2, 3, 5) -> "2, 3 and 5"."""
    return " and ".join(filter(None, [", ".join(map(str, looks[:-1])), str(looks[-1])]))
