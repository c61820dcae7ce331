"""Print the short table of a ``tritonconv bench`` JSON file (``bench.json`` or, for a run that
was cut off, ``bench.partial.json``): one line per row, ours vs the reference."""

import json
import sys
from pathlib import Path

rows = json.loads(Path(sys.argv[1]).read_text())["rows"]
print(
    f"{'suite':8} {'case':18} {'op':12} {'dtype':8} {'ours ms':>9} {'ref ms':>9} "
    f"{'speedup':>8} {'kernel x':>8} {'rate':>16}  ref"
)
for r in rows:
    sp = f"{r['speedup']:.2f}" if r["speedup"] else "-"
    ksp = f"{r['kernel_speedup']:.2f}" if r.get("kernel_speedup") else "-"
    ref = f"{r['ref_ms']:.3f}" if r["ref_ms"] else "-"
    rate = f"{r['rate']:.1f} {r['unit']}" if r["rate"] is not None else "-"
    print(
        f"{r['suite']:8} {r['case'][:18]:18} {r['op'][:12]:12} {r['dtype']:8} "
        f"{r['ours_ms']:9.3f} {ref:>9} {sp:>8} {ksp:>8} {rate:>16}  {r['ref_name']}"
    )
