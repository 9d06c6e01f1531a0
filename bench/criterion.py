"""Does a cheap look at the K-shot sample through the FROZEN encoder say when the long schedule pays?

Records: every (data, K, sample) with ``default`` and ``long`` (60 steps at 5e-5, wise-ft 1; ``longhalf``: the
same at wise-ft 0.5) in ``--runs`` (default: heldout_kinds: trec, sms-spam, crowdflower-tweets, mcid;
crossfit_builtin: mr, bbc-news; systems named as in bench/loso.py). Its training sample is drawn again by the
``few-shot`` protocol as bench/fewshot.py draws it (seed 0, validation 64; ``data_hash`` must equal the record's
``train_hash``, else the study stops), encoded by the pretrained minilm-l6 (the package's loading, mean pooling,
L2-normalised) and scored from the training sample alone (never the test set):
``centroid`` / ``1nn``: leave-one-out nearest-centroid / 1-NN accuracy (cosine), normalised (acc - 1/C) / (1 - 1/C);
``silhouette`` (cosine); ``gap`` / ``ratio``: mean within-class cosine minus / over mean between-class cosine;
``logreg``: leave-one-out logistic regression (C=1, as the recipe's head), normalised; ``logreg_bal``: the same,
class weights balanced (added: leaving one out makes its class the minority, and at C=1 on unit vectors the
plain fit then often predicts the other class, an artefact rather than separability).

Target per run: accuracy(long) - accuracy(default), and longhalf - default. Measured: Spearman rho (over runs,
over (data, K) means), and a leave-one-SET-out rule "long if criterion < t (or > t), else default" whose t and
direction maximise the accuracy on the other sets (sets weighted equally; ties: fewest long runs), scored on the
left-out set against default, long, the better of the two and a per-run oracle; beside it the fixed choice made
the same way (``constant``), the recorded ``crossfit`` system and a null (the criterion shuffled over the runs).
Main analysis K = 8 (six sets, 18 runs); a supplement takes every K (trec, sms-spam also at K = 4, 16).

    .venv/bin/python bench/criterion.py --out bench/results/criterion_k8
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
from scipy import stats

from contrastfit.atomic import write_json_atomic, write_text_atomic
from contrastfit.data import data_hash, load_data
from contrastfit.encoders import default_pooling
from contrastfit.experiments.protocols.few_shot import few_shot
from contrastfit.modeling import ContrastiveClassifier
from loso import cells, read  # bench/loso.py: reads the records (the latest record of a key wins)

BENCH = Path(__file__).resolve().parent
SYSTEMS = {"default": "default", "wise1": "wise1=ce-scl-lr:wise_ft=1",
           "long": "long=ce-scl-lr:min_steps=60,learning_rate=5e-5,wise_ft=1",
           "longhalf": "longhalf=ce-scl-lr:min_steps=60,learning_rate=5e-5"}
ALTS = ("long", "longhalf")
CRITERIA = ("centroid", "1nn", "silhouette", "gap", "ratio", "logreg", "logreg_bal")


def criteria(x: np.ndarray, y: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    """The criteria of one L2-normalised training sample ``x`` with labels ``y``, and each one's seconds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import silhouette_score

    classes, n = np.unique(y), len(y)
    sim, same, rest = x @ x.T, y[:, None] == y[None, :], [np.arange(n) != i for i in range(n)]
    sums = np.stack([x[y == k].sum(0) for k in classes])

    def normed(hits) -> float:
        return (hits / n - 1 / len(classes)) / (1 - 1 / len(classes))

    def centroid() -> float:  # leave-one-out: the point leaves its own class's centroid
        hits = 0
        for i in range(n):
            cent = sums.copy()
            cent[np.searchsorted(classes, y[i])] -= x[i]
            hits += classes[np.argmax((cent / np.linalg.norm(cent, axis=1, keepdims=True)) @ x[i])] == y[i]
        return normed(hits)

    def logreg(weight: str | None) -> float:  # leave-one-out, the recipe head's settings
        return normed(sum(LogisticRegression(C=1.0, max_iter=1000, random_state=0, class_weight=weight)
                          .fit(x[k], y[k]).predict(x[i:i + 1])[0] == y[i] for i, k in enumerate(rest)))

    def within() -> float:
        return sim[same & ~np.eye(n, dtype=bool)].mean()

    funcs = {"centroid": centroid, "1nn": lambda: normed(np.sum(y[(sim - 3 * np.eye(n)).argmax(1)] == y)),
             "silhouette": lambda: silhouette_score(x, y, metric="cosine"), "gap": lambda: within() - sim[~same].mean(),
             "ratio": lambda: within() / sim[~same].mean(), "logreg": lambda: logreg(None),
             "logreg_bal": lambda: logreg("balanced")}
    out, secs = {}, {}
    for name, f in funcs.items():
        t = time.perf_counter()
        out[name], secs[name] = float(f()), time.perf_counter() - t
    return out, secs


def build_runs(records: list[dict], model: str) -> tuple[list[dict], float]:
    """One row per (data, K, sample) with default and long records: accuracies, criteria, seconds."""
    table = cells(records, [SYSTEMS["default"], SYSTEMS["long"]])
    hashes = {(r["data"], r["shots"], r["sample"]): r["train_hash"] for r in records if r.get("train_hash")}
    acc = {(r["data"], r["shots"], r["sample"], r["system"]): float(r["accuracy"]) for r in records if "accuracy" in r}
    t, clf, rows = time.perf_counter(), None, []
    for name in sorted(table):
        data = load_data(name)
        for run in few_shot(data, shots=sorted({k for k, _ in table[name]}), samples=1 + max(s for _, s in table[name]),
                            validation_size=64, seed=0):
            key = (name, run.params["shots"], run.sample)
            if key[1:] not in table[name]:
                continue
            if (got := data_hash(run.data.train)) != hashes[key]:
                sys.exit(f"{key}: the rebuilt training sample's hash is {got}, the record's {hashes[key]}: stopping")
            if clf is None:  # the frozen pretrained encoder; its head is never used
                clf = ContrastiveClassifier.from_encoder(model, "linear-probe", data.label_names,
                                                         pooling=default_pooling(model), max_length=128)
                load_s = time.perf_counter() - t
            t0 = time.perf_counter()
            x = clf.embed(list(run.data.train["text"]), normalize=True).astype(np.float64)
            encode_s, y = time.perf_counter() - t0, np.asarray(run.data.train["label"])
            crit, secs = criteria(x, y)
            accs = {s: acc.get((*key, SYSTEMS[s])) for s in SYSTEMS}
            rows.append({"data": name, "K": key[1], "sample": key[2], "classes": len(np.unique(y)), "n": len(y),
                         "train_hash": got, "criteria": crit, "encode_s": encode_s, "criterion_s": secs, "accuracy": accs,
                         "diff": {a: None if accs[a] is None else accs[a] - accs["default"] for a in ALTS},
                         "crossfit": acc.get((*key, "crossfit"))})
            print(f"{key}: hash ok, " + ", ".join(f"{k} {v:.3f}" for k, v in crit.items()), flush=True)
    return rows, load_s


def correlations(rows: list[dict], alt: str) -> dict:
    rows = [r for r in rows if r["diff"][alt] is not None]
    groups = [[r for r in rows if (r["data"], r["K"]) == g] for g in sorted({(r["data"], r["K"]) for r in rows})]

    def rho(a, b) -> dict:
        res = stats.spearmanr(a, b)
        return {"rho": float(res.statistic), "p": float(res.pvalue), "n": len(a)}

    return {c: {"runs": rho([r["criteria"][c] for r in rows], [r["diff"][alt] for r in rows]),
                "cells": rho([np.mean([r["criteria"][c] for r in g]) for g in groups],
                             [np.mean([r["diff"][alt] for r in g]) for g in groups])} for c in CRITERIA}


def fit_rule(v: np.ndarray, d: np.ndarray, a: np.ndarray, w: np.ndarray) -> tuple[str, float]:
    """(direction, t) maximising sum(w * the rule's accuracy); ties: the fewest runs given the alternative, then '<'."""
    u = np.unique(v)
    ts, best = np.concatenate([[-np.inf], (u[1:] + u[:-1]) / 2, [np.inf]]), None
    for direction in ("<", ">"):
        m = v[None, :] < ts[:, None] if direction == "<" else v[None, :] > ts[:, None]
        for j, score in enumerate(np.where(m, a, d) @ w):
            key = (round(float(score), 10), -int(m[j].sum()), direction == "<")
            if best is None or key > best[0]:
                best = (key, direction, float(ts[j]))
    return best[1], best[2]


def loso_rule(v: np.ndarray, d: np.ndarray, a: np.ndarray, sets: np.ndarray, constant: bool = False) -> dict:
    """Each set left out in turn: the rule fitted on the others (``constant``: t = +-inf only, i.e. bench/loso.py's
    fixed choice of the two), applied to its runs."""
    per_set = []
    for held in np.unique(sets):
        tr, te = sets != held, sets == held
        names, counts = np.unique(sets[tr], return_counts=True)
        w = 1 / (len(names) * counts[np.searchsorted(names, sets[tr])])  # each set weighted equally
        direction, t = ("<", np.inf if a[tr] @ w > d[tr] @ w else -np.inf) if constant else fit_rule(v[tr], d[tr], a[tr], w)
        m = v[te] < t if direction == "<" else v[te] > t
        per_set.append(outcome(str(held), np.where(m, a[te], d[te]), d[te], a[te], direction=direction, t=t,
                               used_alt=int(m.sum())))
    return summary(per_set)


def outcome(held: str, got: np.ndarray, d: np.ndarray, a: np.ndarray, **extra) -> dict:
    r, dm, am = float(got.mean()), float(d.mean()), float(a.mean())
    return {"held_out": held, "runs": len(got), **extra, "rule": r, "default": dm, "alt": am, "best_of_two": max(dm, am),
            "oracle": float(np.maximum(a, d).mean()), "vs_default": r - dm, "vs_best": r - max(dm, am)}


def summary(per_set: list[dict]) -> dict:
    vs = [s["vs_default"] for s in per_set]
    return {"sets": per_set, "mean_vs_default": float(np.mean(vs)), "worst_vs_default": float(min(vs)),
            "mean_vs_best": float(np.mean([s["vs_best"] for s in per_set])),
            "mean_vs_alt": float(np.mean([s["rule"] - s["alt"] for s in per_set]))}


def loso(rows: list[dict], alt: str, permutations: int) -> dict:
    rows = [r for r in rows if r["diff"][alt] is not None]
    sets, (d, a) = np.array([r["data"] for r in rows]), (np.array([r["accuracy"][s] for r in rows]) for s in ("default", alt))
    out = {c: loso_rule(np.array([r["criteria"][c] for r in rows]), d, a, sets) for c in CRITERIA}
    out["constant"] = loso_rule(np.zeros(len(rows)), d, a, sets, constant=True)
    if alt == "long" and all(r["crossfit"] is not None for r in rows):  # its own per-run choice between the two
        cf = np.array([r["crossfit"] for r in rows])
        out["crossfit (recorded)"] = summary([outcome(str(h), cf[sets == h], d[sets == h], a[sets == h]) for h in np.unique(sets)])
    rng, v0 = np.random.default_rng(0), np.arange(len(rows), dtype=float)
    null = [loso_rule(rng.permutation(v0), d, a, sets) for _ in range(permutations)]
    nm, nw = np.array([n["mean_vs_default"] for n in null]), np.array([n["worst_vs_default"] for n in null])
    for c in CRITERIA:
        out[c]["null_p_mean"] = float(np.mean(nm >= out[c]["mean_vs_default"] - 1e-12))
    out["null"] = {"permutations": permutations, "median_mean_vs_default": float(np.median(nm)),
                   "pass_rate": float(np.mean((nm > 0) & (nw >= -0.01))),
                   "pass_and_beat_constant_rate": float(np.mean((nw >= -0.01) & (nm > out["constant"]["mean_vs_default"] + 1e-12)))}
    return out


def pct(v: float) -> str:
    return f"{100 * v:+.1f}"


def markdown(res: dict) -> str:
    cols = [*CRITERIA, "default", "long-def", "longhalf-def", "wise1-def", "crossfit-def"]
    L = [f"# {res['title']}\n", res["about"] + "\n", "## Per run (criteria: frozen encoder, training sample only; accuracy in %, "
         "differences in points)\n", "| data | K | s | C | " + " | ".join(cols) + " |", "|" + "---|" * (4 + len(cols))]
    for r in res["runs"]:
        a = r["accuracy"]
        diffs = ["–" if v is None else pct(v - a["default"]) for v in (a["long"], a["longhalf"], a["wise1"], r["crossfit"])]
        L.append(f"| {r['data']} | {r['K']} | {r['sample']} | {r['classes']} | " + " | ".join(
            [f"{r['criteria'][c]:.3f}" for c in CRITERIA] + [f"{100 * a['default']:.1f}"] + diffs) + " |")
    for part, an in res["analyses"].items():
        L += [f"\n## {part}: Spearman rho of criterion with the accuracy difference\n",
              "| criterion | long-def, runs | long-def, (data,K) means | longhalf-def, runs | longhalf-def, (data,K) means |",
              "|---|---|---|---|---|"]
        L += [f"| {c} | " + " | ".join(f"{x['rho']:+.2f} (p={x['p']:.2f}, n={x['n']})" for x in
                                       (an["correlations"][a][c][w] for a in ALTS for w in ("runs", "cells"))) + " |" for c in CRITERIA]
        for alt in ALTS:
            lo = {c: v for c, v in an["loso"][alt].items() if c != "null"}
            L += [f"\n### {part}: leave-one-set-out rule \"{alt} if criterion < t (or > t), else default\"\n",
                  f"Cells: rule minus default on the left-out set, in points (runs given {alt} / runs there).\n",
                  "| rule | " + " | ".join(s["held_out"] for s in lo["constant"]["sets"]) + " | mean vs default | worst vs "
                  f"default | mean vs best of two | mean vs {alt} | shuffle p |", "|" + "---|" * (6 + len(lo["constant"]["sets"]))]
            L += [f"| {c} | " + " | ".join(pct(s["vs_default"]) + (f" ({s['used_alt']}/{s['runs']})" if "used_alt" in s else "")
                                          for s in v["sets"]) + f" | {pct(v['mean_vs_default'])} | {pct(v['worst_vs_default'])} | "
                  f"{pct(v['mean_vs_best'])} | {pct(v['mean_vs_alt'])} | {v.get('null_p_mean', '–')} |" for c, v in lo.items()]
            L.append(f"| accuracy: default / {alt} / per-run oracle | " + " | ".join(
                f"{100 * s['default']:.1f} / {100 * s['alt']:.1f} / {100 * s['oracle']:.1f}" for s in lo["constant"]["sets"]) + " | | | | | |")
            n = an["loso"][alt]["null"]
            L.append(f"\nShuffle null ({n['permutations']} shuffles of the criterion over the runs): median mean vs default "
                     f"{pct(n['median_mean_vs_default'])}; {n['pass_rate']:.0%} gain on average with no set below -1 point, "
                     f"{n['pass_and_beat_constant_rate']:.0%} of them also beating `constant`. Shuffle p: the share of shuffles "
                     "whose mean vs default is at least the criterion's (not corrected for the criteria tried).")
    t = res["timing"]
    L += ["\n## Cost\n", f"Loading the encoder once: {t['load_s']:.1f} s. Per run, mean (max): encoding the sample "
          f"{t['encode_s_mean']:.2f} s ({t['encode_s_max']:.2f}); " + ", ".join(
              f"{c} {1000 * t['criterion_s_mean'][c]:.0f} ms" for c in CRITERIA) + f"; all together {t['total_s_mean']:.1f} s "
          f"({t['total_s_max']:.1f}). For scale, the records' fine-tuning at K = 8 (CPU): default {t['train_s']['default']:.0f} s, "
          f"long {t['train_s']['long']:.0f} s a run.", "\n## Verdict (K = 8)\n", res["verdict"]]
    return "\n".join(L) + "\n"


def verdict(an: dict) -> str:
    sig = [f"{c} vs {a}" for a in ALTS for c, v in an["correlations"][a].items() if v["runs"]["p"] < 0.05]
    top = max((abs(v["runs"]["rho"]), c, a) for a in ALTS for c, v in an["correlations"][a].items())
    lines = [f"- Per run: p < 0.05 in {len(sig)} of {2 * len(CRITERIA)} Spearman tests ({', '.join(sig) or 'none'}); the "
             f"largest |rho| is {top[0]:.2f} ({top[1]} vs {top[2]}, {an['runs']} runs)."]
    plain = []
    for alt in ALTS:
        lo, const = an["loso"][alt], an["loso"][alt]["constant"]
        ok = [c for c in CRITERIA if lo[c]["mean_vs_default"] > 0 and lo[c]["worst_vs_default"] >= -0.01]
        better = [c for c in ok if lo[c]["mean_vs_default"] > const["mean_vs_default"] + 1e-9]
        where = {c: ", ".join(f"{s['held_out']} {pct(s['vs_default'] - k['vs_default'])}" for s, k in zip(lo[c]["sets"], const["sets"])
                              if abs(s["vs_default"] - k["vs_default"]) > 5e-4) for c in better}
        lines.append(f"- **{alt}**: the fixed choice made on the other sets gives {pct(const['mean_vs_default'])} on average, "
                     f"worst set {pct(const['worst_vs_default'])}. Rules with mean > 0 and no set below -1 point: " + (", ".join(
                         f"{c} ({pct(lo[c]['mean_vs_default'])}, worst {pct(lo[c]['worst_vs_default'])}, shuffle p "
                         f"{lo[c]['null_p_mean']:.2f})" for c in ok) or "none") + "; of these better than the fixed choice: "
                     + ("; ".join(f"{c} (its difference from the fixed choice, by set: {where[c]})" for c in better) or "none")
                     + f". A shuffled criterion passes the same test {lo['null']['pass_rate']:.0%} of the time, and "
                     f"{lo['null']['pass_and_beat_constant_rate']:.0%} also beats the fixed choice.")
        if better:
            c = max(better, key=lambda c: lo[c]["mean_vs_default"])
            plain.append(f"for {alt} the best rule, on {c}, gives {pct(lo[c]['mean_vs_default'])} against {pct(const['mean_vs_default'])} "
                         f"for the fixed choice and {pct(lo[c]['mean_vs_alt'])} against always {alt}, and changes the outcome on "
                         f"only {len(where[c].split(', '))} of {len(const['sets'])} left-out sets ({where[c]}); its shuffle p {lo[c]['null_p_mean']:.2f} "
                         f"is {min(1.0, len(CRITERIA) * lo[c]['null_p_mean']):.2f} once corrected for the {len(CRITERIA)} criteria tried")
        else:
            plain.append(f"for {alt} no rule beats the fixed choice without costing a set more than 1 point")
    lines.append(f"- **In plain words**: {'no criterion ranks the runs by the gain' if not sig else 'some criterion ranks the runs'}; "
                 + "; ".join(plain) + ". An advantage that rests on one or two left-out sets is a hypothesis for new data "
                 "sets, not a per-run choice to ship.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", type=Path, default=[BENCH / "results/heldout_kinds_runs.jsonl",
                                                          BENCH / "results/crossfit_builtin_runs.jsonl"])
    p.add_argument("--model", default="minilm-l6")
    p.add_argument("--permutations", type=int, default=1000, help="shuffles of the criterion for the null rule")
    p.add_argument("--out", type=Path, default=BENCH / "results/criterion_k8", help="files OUT.{json,md,png}")
    args = p.parse_args(argv)
    started, records = time.perf_counter(), read(args.runs)
    rows, load_s = build_runs(records, args.model)
    k8 = [r for r in rows if r["K"] == 8]
    analyses = {part: {"runs": len(keep), "correlations": {a: correlations(keep, a) for a in ALTS},
                       "loso": {a: loso(keep, a, args.permutations) for a in ALTS}}
                for part, keep in (("K = 8", k8), ("All K", rows))}
    totals = [r["encode_s"] + sum(v for c, v in r["criterion_s"].items()) for r in rows]
    timing = {"load_s": load_s, "encode_s_mean": float(np.mean([r["encode_s"] for r in rows])),
              "encode_s_max": float(max(r["encode_s"] for r in rows)), "total_s_mean": float(np.mean(totals)),
              "total_s_max": float(max(totals)),
              "criterion_s_mean": {c: float(np.mean([r["criterion_s"][c] for r in rows])) for c in CRITERIA},
              "train_s": {s: float(np.mean([r["train_s"] for r in records if r.get("system") == SYSTEMS[s]
                                            and r.get("shots") == 8 and "train_s" in r])) for s in ("default", "long")}}
    result = {"title": "Frozen-encoder criteria of the K-shot sample against the longer recipes' gain",
              "about": f"{len(rows)} runs ({len(k8)} at K = 8) from {', '.join(f.name for f in args.runs)}; every training "
                       "sample was rebuilt and its train_hash matched the record's.",
              "config": {"runs": [str(f) for f in args.runs], "model": args.model, "systems": SYSTEMS,
                         "permutations": args.permutations},
              "runs": rows, "analyses": analyses, "timing": timing, "verdict": verdict(analyses["K = 8"])}
    result["wall_s"] = time.perf_counter() - started
    write_json_atomic(args.out.with_suffix(".json"), result)
    write_text_atomic(args.out.with_suffix(".md"), markdown(result))
    plot(k8, args.out.with_suffix(".png"))
    print(markdown(result))
    return 0


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(ALTS), len(CRITERIA), figsize=(3 * len(CRITERIA), 3.2 * len(ALTS)), squeeze=False)
    for (i, alt), (j, c) in ((a, b) for a in enumerate(ALTS) for b in enumerate(CRITERIA)):
        for k, d in enumerate(sorted({r["data"] for r in rows})):
            pts = [(r["criteria"][c], 100 * r["diff"][alt]) for r in rows if r["data"] == d and r["diff"][alt] is not None]
            axes[i][j].scatter(*zip(*pts), color=f"C{k}", label=d, s=25)
        axes[i][j].axhline(0, color="grey", lw=0.8)
        axes[i][j].set(xlabel=c, ylabel=f"{alt} - default (points)" if j == 0 else "")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("K = 8: frozen-encoder criterion of the training sample vs the longer recipe's gain (a colour per set)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
