""":class:`BadRowReport`: what ``on_bad_rows="skip-and-report"`` removed, rule by rule.

Rows are never dropped silently: every removed row is counted here, so
``rows_read == rows_kept + total``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from theory.data.schema import MAX_EXAMPLES, RULES

__all__ = ["BadRowReport", "Example"]

#: One example of a violation: (row, column, raw value as read).
Example = tuple[int, str, object]


@dataclass
class BadRowReport:
    """What validation removed: per-rule counts and up to 5 examples per rule.

    ``counts[rule_name]`` counts violations (a row may break rules on several columns);
    ``total`` counts distinct rows removed, so ``rows_read == rows_kept + total``.
    ``examples[rule_name]`` holds ``(row, column, raw value)`` tuples.
    """

    rows_read: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[Example]] = field(default_factory=dict)
    total: int = 0

    @classmethod
    def of(
        cls,
        rows_read: int,
        total: int,
        counts: Mapping[str, int],
        examples: Mapping[str, Sequence[Example]],
    ) -> BadRowReport:
        """A report in the one canonical form both readers return: rules in :data:`RULES`
        order, zero counts left out, each rule's examples its lowest rows (at most 5)."""
        return cls(
            rows_read,
            {r.name: counts[r.name] for r in RULES if counts.get(r.name)},
            {
                r.name: sorted(examples[r.name], key=lambda e: e[0])[:MAX_EXAMPLES]
                for r in RULES
                if examples.get(r.name)
            },
            total,
        )

    @property
    def rows_kept(self) -> int:
        """Rows that passed validation."""
        return self.rows_read - self.total

    @property
    def ok(self) -> bool:
        """True when no row was removed."""
        return self.total == 0

    def merge(self, other: BadRowReport) -> BadRowReport:
        """The report of two inputs read one after the other (rows already numbered)."""
        counts = dict(self.counts)
        examples = {k: list(v) for k, v in self.examples.items()}
        for name, c in other.counts.items():
            counts[name] = counts.get(name, 0) + c
        for name, ex in other.examples.items():
            have = examples.setdefault(name, [])
            have.extend(ex[: max(0, MAX_EXAMPLES - len(have))])
        return BadRowReport(
            self.rows_read + other.rows_read, counts, examples, self.total + other.total
        )

    def summary(self) -> str:
        """A human-readable multi-line summary."""
        if self.total == 0:
            return f"{self.rows_read} rows read, no bad rows"
        lines = [
            f"{self.rows_read} rows read, {self.total} bad rows removed, {self.rows_kept} kept"
        ]
        for rule in RULES:
            c = self.counts.get(rule.name, 0)
            if not c:
                continue
            ex = ", ".join(f"row {r}: {v!r}" for r, _, v in self.examples.get(rule.name, []))
            eg = f"; e.g. {ex}" if ex else ""
            lines.append(f"  {rule.name} ({rule.description}): {c}{eg}")
        return "\n".join(lines)
