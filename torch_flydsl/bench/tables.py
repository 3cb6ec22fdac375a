"""The printed table and the CSV."""

from __future__ import annotations

import csv
from pathlib import Path


def table(rows: list, headers: list, floatfmt: str = ".4g") -> str:
    try:
        from tabulate import tabulate
    except ImportError:
        cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
        return "\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells)
    return tabulate(rows, headers=headers, floatfmt=floatfmt, missingval="-")


def write_csv(path: Path, rows: list, columns: list) -> None:
    with Path(path).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
