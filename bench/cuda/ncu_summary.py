#!/usr/bin/env python3
"""Sums an `ncu --metrics gpu__time_duration.sum --csv --print-units base` log per kernel
name and grid: total ms, launches, us per launch, largest first.
Usage: ncu_summary.py NCU.csv [TOP]"""
import collections
import csv
import sys


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows = list(csv.DictReader(lines))
    acc = collections.defaultdict(lambda: [0.0, 0])
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0]
        key = f"{name} grid {r['Grid Size']}"
        acc[key][0] += float(r["Metric Value"].replace(",", "")) / 1e6
        acc[key][1] += 1
    total = sum(v[0] for v in acc.values())
    print(f"# total {total:.2f} ms over {sum(v[1] for v in acc.values())} kernels; "
          "per kernel name and grid: total ms, launches, us per launch")
    for key, (ms, n) in sorted(acc.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{ms:8.3f} ms {n:5d} {1000 * ms / n:8.1f} us  {key}")


if __name__ == "__main__":
    main()
