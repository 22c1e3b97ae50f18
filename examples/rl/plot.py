#!/usr/bin/env python3
"""Plots GRPO logs (examples/rl/grpo.py --out ...): reward per step, and the largest
|sampler logprob - trainer logprob| per step, one line per log."""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--out", required=True, help="PNG file")
    a = ap.parse_args(argv)
    fig, (ax_r, ax_d) = plt.subplots(1, 2, figsize=(11, 4))
    for path in a.logs:
        recs = [json.loads(line) for line in open(path) if line.strip()]
        label = f"trainer forward: {recs[0]['trainer']}"
        steps = [r["step"] for r in recs]
        ax_r.plot(steps, [r["reward"] for r in recs], marker=".", label=label)
        # exactly 0 cannot go on a log axis: it is drawn at the bottom and marked in the legend
        diffs = [r["max_abs_logprob_diff"] for r in recs]
        zero = all(d == 0 for d in diffs)
        ax_d.plot(steps, [d if d > 0 else 1e-9 for d in diffs], marker=".",
                  label=label + (" (exactly 0 every step)" if zero else ""))
    ax_r.set_xlabel("step")
    ax_r.set_ylabel("mean reward (0.5: starts with a number, 1: the sum)")
    ax_r.set_title("reward")
    ax_r.legend()
    ax_d.set_yscale("log")
    ax_d.set_ylim(5e-10, 1)
    ax_d.set_xlabel("step")
    ax_d.set_ylabel("max |sampler logprob - trainer logprob|")
    ax_d.set_title("sampler / trainer mismatch (1e-9 = exactly 0)")
    ax_d.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
