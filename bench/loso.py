"""Leave-one-set-out: does a recipe choice carry over to data it was not chosen on?

Reads few-shot records (``bench/fewshot.py``'s ``*_runs.jsonl``, several files at once) and a list of
candidate systems (recipes, as the records name them). For each data set in turn, the candidate with
the best mean accuracy on *the other* sets (each set weighted equally: its mean over the K and samples
where every candidate has a record) is "chosen", and scored on the set left out: its accuracy there,
the best candidate's there (the choice one would have made knowing that set), and the difference of
the chosen candidate from ``--baseline`` (the current default) on the same samples (a paired t-test over
the set's cells). A choice carries over when, set after set, the left-out set does not lose by it.

    python bench/loso.py --runs bench/results/heldout_kinds_runs.jsonl bench/results/crossfit_builtin_runs.jsonl \\
        --candidates default wise1=... long=... --name loso_recipes
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from contrastfit.atomic import write_json_atomic, write_text_atomic

RESULTS = Path(__file__).resolve().parent / "results"


def read(paths: list[Path]) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def cells(records: list[dict[str, Any]], candidates: list[str], shots: list[int] | None = None
          ) -> dict[str, dict[tuple, dict[str, float]]]:
    """data set -> (K, sample) -> candidate -> accuracy, for the cells where every candidate has a
    record (the latest record of a key wins, as in the bench)."""
    latest: dict[tuple, float] = {}
    for r in records:
        if r.get("system") in candidates and "accuracy" in r and r.get("shots") is not None:
            if shots is None or r["shots"] in shots:
                latest[(r["data"], r["shots"], r["sample"], r["system"])] = float(r["accuracy"])
    out: dict[str, dict[tuple, dict[str, float]]] = defaultdict(dict)
    for data, k, sample in {key[:3] for key in latest}:
        row = {c: latest.get((data, k, sample, c)) for c in candidates}
        if all(v is not None for v in row.values()):
            out[data][(k, sample)] = row
    return dict(out)


def _paired_p(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy import stats

    if len(a) < 2 or np.allclose(a - b, (a - b)[0]):
        return None
    return float(stats.ttest_rel(a, b).pvalue)


def leave_one_set_out(table: dict[str, dict[tuple, dict[str, float]]], candidates: list[str],
                      baseline: str) -> list[dict[str, Any]]:
    """One row per data set: the candidate chosen on the other sets and how it does on this one."""
    means = {d: {c: float(np.mean([row[c] for row in rows.values()])) for c in candidates} for d, rows in table.items()}
    out = []
    for held in sorted(table):
        others = [d for d in table if d != held]
        if not others:
            continue
        chosen = max(candidates, key=lambda c: (np.mean([means[d][c] for d in others]), c == baseline))
        best = max(candidates, key=lambda c: (means[held][c], c == baseline))
        rows = list(table[held].values())
        got, base = np.array([r[chosen] for r in rows]), np.array([r[baseline] for r in rows])
        out.append({"held_out": held, "cells": len(rows), "chosen": chosen, "accuracy": means[held][chosen],
                    "best": best, "best_accuracy": means[held][best], "gap_to_best": means[held][chosen] - means[held][best],
                    "baseline_accuracy": means[held][baseline], "vs_baseline": float((got - base).mean()),
                    "p_vs_baseline": _paired_p(got, base),
                    "means": means[held]})
    return out


def markdown(rows: list[dict[str, Any]], baseline: str) -> str:
    def pct(x: float) -> str:
        return f"{100 * x:.1f}"

    lines = [f"| left out | cells | chosen on the others | its accuracy | best there | gap | {baseline} | vs {baseline} |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["p_vs_baseline"]
        lines.append(f"| {r['held_out']} | {r['cells']} | {r['chosen']} | {pct(r['accuracy'])} | {r['best']} "
                     f"({pct(r['best_accuracy'])}) | {100 * r['gap_to_best']:+.1f} | {pct(r['baseline_accuracy'])} | "
                     f"{100 * r['vs_baseline']:+.1f}{'' if p is None else f' (p={p:.2f})'} |")
    if rows:
        lines.append(f"| mean | | | {pct(np.mean([r['accuracy'] for r in rows]))} | | "
                     f"{100 * np.mean([r['gap_to_best'] for r in rows]):+.1f} | "
                     f"{pct(np.mean([r['baseline_accuracy'] for r in rows]))} | "
                     f"{100 * np.mean([r['vs_baseline'] for r in rows]):+.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", type=Path, required=True, help="few-shot record files (*_runs.jsonl)")
    p.add_argument("--candidates", nargs="+", required=True, help="systems (recipes) to choose between")
    p.add_argument("--baseline", default="default", help="the system the choice is compared with (default: default)")
    p.add_argument("--shots", nargs="*", type=int, default=None, help="only these K (default: all)")
    p.add_argument("--name", default="loso", help="files: bench/results/NAME.{json,md}")
    args = p.parse_args(argv)
    if args.baseline not in args.candidates:
        p.error(f"--baseline {args.baseline} must be one of the candidates")
    table = cells(read(args.runs), args.candidates, args.shots)
    rows = leave_one_set_out(table, args.candidates, args.baseline)
    text = markdown(rows, args.baseline)
    write_json_atomic(RESULTS / f"{args.name}.json", {"config": vars(args), "rows": rows})
    write_text_atomic(RESULTS / f"{args.name}.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
