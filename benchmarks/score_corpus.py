"""Score the log classifiers on the diagnosis corpus: family, facts, one finding per fault, false positives.

    python benchmarks/score_corpus.py                 # the open part, a table per family
    python benchmarks/score_corpus.py --part sealed   # round 1's sealed third (scored once, then read)
    python benchmarks/score_corpus.py --part holdout2 # round 2's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout3 # round 3's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout4 # round 4's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout5 # round 5's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout6 # round 6's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout7 # round 7's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout8 # round 8's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout9 # round 9's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part holdout10 # round 10's held-out set (scored once, then read)
    python benchmarks/score_corpus.py --part dev      # every part scored and read: rounds 1 to 10
    python benchmarks/score_corpus.py --failures      # and every sample that missed, with why

How the corpus was drawn, labelled and split, and what "right" means: ``corpus/PROCEDURE.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corpus.scoring import (  # noqa: E402  (the repository root is put on the path first)
    FAMILIES,
    HELD_OUT,
    NEGATIVE,
    PARTS,
    ManifestError,
    Tally,
    load_manifests,
    pct,
    score,
    select,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--part", choices=PARTS, default="open", help="which part of the corpus to score (default: open)")
    ap.add_argument("--family", choices=FAMILIES, help="only the samples of this family")
    ap.add_argument("--failures", action="store_true", help="list every sample that missed and why (never one of a held-out round)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    try:
        samples = select(load_manifests(), args.part, args.family)
    except ManifestError as exc:
        print(f"score_corpus: {exc}", file=sys.stderr)
        return 2
    if not samples:
        print(f"score_corpus: no samples in the {args.part} part", file=sys.stderr)
        return 2
    verdicts = score(samples)
    by_family: dict[str, Tally] = defaultdict(Tally)
    total, positives = Tally(), Tally()
    for v in verdicts:
        by_family[v.sample.family].add(v)
        total.add(v)
        if v.sample.family != NEGATIVE:
            positives.add(v)
    if args.json:
        print(json.dumps({
            "part": args.part,
            "families": {f: vars(t) for f, t in sorted(by_family.items())},
            "positives": vars(positives),
            "false_positives": total.false_positives,
            "negatives": total.negatives,
        }, indent=2))
        return 0
    print(f"{'family':<22}{'samples':>8}{'family right':>14}{'facts right':>18}{'one per fault':>15}")
    rows = sorted(by_family.items(), key=lambda kv: FAMILIES.index(kv[0]))
    for fam, t in rows:
        facts = f"{t.facts_right}/{t.facts} {pct(t.facts_right, t.facts)}" if t.facts else "-"
        print(f"{fam:<22}{t.samples:>8}{pct(t.family_right, t.samples):>14}{facts:>18}{pct(t.one_per_fault, t.samples):>15}")
    print(f"{'positives':<22}{positives.samples:>8}{pct(positives.family_right, positives.samples):>14}"
          f"{f'{positives.facts_right}/{positives.facts} {pct(positives.facts_right, positives.facts)}':>18}"
          f"{pct(positives.one_per_fault, positives.samples):>15}")
    print(f"false positives: {total.false_positives} of {total.negatives} negative controls")
    if args.failures:
        for v in verdicts:
            if v.sample.part in HELD_OUT:
                continue  # a held-out part's failures are not shown: it is a measurement, not a to-do list
            if v.family_right and not v.facts_wrong and v.one_per_fault:
                continue
            s = v.sample
            kinds = ", ".join(v.found.kinds) or "nothing"
            print(f"\n{s.folder}/{s.file} [{s.family}, {s.faults} fault(s)]: found {kinds}")
            for w in v.facts_wrong:
                print(f"    {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
