"""Two ``tritonconv bench`` JSON files side by side: each row's speedup over the reference in
the first (before) and the second (after), per-call and kernel, and their ratio. For a change
measured in one GPU session: run the suite from the old source and the new one, back to back.

    PYTHONPATH=.vendor/old/src python -m tritonconv.cli bench --suite dense --out before
    PYTHONPATH=src python -m tritonconv.cli bench --suite dense --out after
    python benchmarks/compare_bench.py before/bench.json after/bench.json
"""

from __future__ import annotations

import argparse
import json
import math


def _rows(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    return {(r["suite"], r["case"], r["op"], r["dtype"]): r for r in data["rows"]}


def _geomean(values: list[float]) -> float:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args()
    before, after = _rows(args.before), _rows(args.after)
    print(f"{'case':28} {'op':34} {'dtype':9} {'speedup before → after':>24} {'kernel':>20}")
    gains = []
    for key, new in after.items():
        old = before.get(key)
        if old is None:
            continue
        ks_old, ks_new = old.get("kernel_speedup"), new.get("kernel_speedup")
        kernel = f"{ks_old:.2f} → {ks_new:.2f}" if ks_old and ks_new else "—"
        if ks_old and ks_new:
            gains.append(ks_new / ks_old)
        speed = f"{old['speedup']:.2f} → {new['speedup']:.2f}"
        print(f"{key[1]:28} {key[2][:34]:34} {key[3]:9} {speed:>24} {kernel:>20}")
    print(f"kernel speedup after / before, geomean over {len(gains)} rows: {_geomean(gains):.3f}")


if __name__ == "__main__":
    main()
