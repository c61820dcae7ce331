"""Where compile time goes, ours against ``torch.nn.Conv2d`` (issue 10: "compile time within
2x of compiling the network with nn.Conv2d").

Each measurement is a fresh process (so neither side inherits the other's warm imports,
Inductor's worker pool or caches) with its own Triton and Inductor cache directories:
``cold`` is the first compile with empty caches, ``warm`` the same command again on the
caches the cold run left (what a user sees on the second run of a script). ``eager first``
(ours only) runs the model eagerly before compiling, as the host suite does: the Triton cache
entries the compile adds then are kernels Inductor compiled again.

Per run it prints the first call's seconds, the Triton cache entries the compile added, and
Dynamo's compile-time table (Dynamo, AOTAutograd and Inductor phases); ``--profile`` adds the
top of a cProfile of ours' cold compile (default mode, the 8-conv stack).

    PYTHONPATH=src python benchmarks/probe_compile_time.py [--models stack,bottleneck3]
        [--modes default,reduce-overhead] [--profile] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _entries(path: str) -> set[str]:
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def _kernel_names(path: str, entries: set[str]) -> list[str]:
    """The names of the files in Triton cache entries (kernel names, launcher stubs)."""
    names = []
    for entry in sorted(entries):
        files = os.listdir(os.path.join(path, entry))
        names.append(
            ",".join(sorted({f.split(".")[0] for f in files if not f.startswith("__grp")}))
        )
    return names


def _model(name: str, ours: bool):
    import torch
    from torch import nn

    import tritonconv.nn as tnn
    from tritonconv.bench.host import Bottleneck, ConvStack

    conv = tnn.Conv2d if ours else nn.Conv2d
    torch.manual_seed(0)
    if name == "stack":
        model, shape = ConvStack(conv), (1, 64, 56, 56)
    elif name == "bottleneck3":
        model = nn.Sequential(*(Bottleneck(conv) for _ in range(3)))
        shape = (8, 256, 56, 56)
    elif name == "resnet50":
        import torchvision

        model, shape = torchvision.models.resnet50(), (8, 3, 224, 224)
        if ours:
            tnn.convert(model)
    else:
        raise SystemExit(f"unknown model {name!r}")
    model = model.to("cuda", torch.bfloat16).eval().to(memory_format=torch.channels_last)
    x = torch.randn(shape, device="cuda").to(torch.bfloat16, memory_format=torch.channels_last)
    return model, x


def one(args) -> None:
    """Runs in the child: compiles one model once and prints one JSON line."""
    import torch
    import torch._dynamo.utils

    model, x = _model(args.model, args.conv == "ours")
    if args.eager_first:
        with torch.no_grad():
            model(x)
        torch.cuda.synchronize()
    cache = os.environ["TRITON_CACHE_DIR"]
    before = _entries(cache)
    kwargs = {} if args.mode == "default" else {"mode": args.mode}
    compiled = torch.compile(model, fullgraph=True, **kwargs)
    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    start = time.perf_counter()
    with torch.no_grad():
        out = compiled(x)
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    with torch.no_grad():  # (the compiled model computes what the eager one does)
        want = model(x).float()
    error = ((out.float() - want).abs().max() / want.abs().max()).item()
    if profile is not None:
        import pstats

        profile.disable()
        stats = pstats.Stats(profile, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(20)
    table = torch._dynamo.utils.compile_times(repr="str", aggregate=True)
    print(table, file=sys.stderr)
    for group, counts in torch._dynamo.utils.counters.items():
        if group in ("inductor", "aot_autograd", "stats", "graph_break"):
            print(f"counters[{group}]: {dict(counts)}", file=sys.stderr)
    added = _entries(cache) - before
    print(f"Triton cache entries added: {_kernel_names(cache, added)}", file=sys.stderr)
    record = {"seconds": seconds, "triton_entries_added": len(added), "error": error}
    if args.time:  # per-call time, eager and compiled, in alternation (median of rounds)
        import statistics

        def per_call_ms(fn, calls=10):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            return (time.perf_counter() - start) / calls * 1e3

        with torch.no_grad():
            for fn in (lambda: model(x), lambda: compiled(x)):
                per_call_ms(fn, 3)
            rounds = [(per_call_ms(lambda: model(x)), per_call_ms(lambda: compiled(x)))]
            for _ in range(6):
                rounds.append((per_call_ms(lambda: model(x)), per_call_ms(lambda: compiled(x))))
        record["eager_ms"] = statistics.median(r[0] for r in rounds)
        record["compiled_ms"] = statistics.median(r[1] for r in rounds)
    print("RESULT " + json.dumps(record))


def _run(model, conv, mode, dirs, *, eager_first=False, profile=False, timed=False) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=dirs[0], TORCHINDUCTOR_CACHE_DIR=dirs[1])
    cmd = [sys.executable, __file__, "--one", model, conv, mode]
    cmd += ["--eager-first"] * eager_first + ["--profile"] * profile + ["--time"] * timed
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    lines = [s for s in done.stdout.splitlines() if s.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        print(done.stderr[-3000:])
        return {"failed": done.returncode}
    record = json.loads(lines[-1][len("RESULT ") :]) | {"process_s": wall}
    record["log"] = done.stderr
    return record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "CONV", "MODE"))
    parser.add_argument("--eager-first", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--models", default="stack,bottleneck3")
    parser.add_argument("--modes", default="default,reduce-overhead")
    parser.add_argument("--json")
    parser.add_argument(
        "--runs",
        default="torch,ours,ours-eager",
        help="which: torch, ours, ours-eager (ours, run eagerly before compiling)",
    )
    parser.add_argument("--verbose", action="store_true", help="every run's phase table")
    parser.add_argument(
        "--time", action="store_true", help="also time eager and compiled calls (warm runs)"
    )
    args = parser.parse_args()
    if args.one:
        args.model, args.conv, args.mode = args.one
        one(args)
        return
    rows = []
    root = Path(tempfile.mkdtemp(prefix="compile-probe-"))
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            names = args.runs.split(",")
            runs = [(n.split("-")[0], n.endswith("-eager")) for n in names]
            for conv, eager_first in runs:
                tag = f"{model}-{mode}-{conv}-{int(eager_first)}"
                dirs = (str(root / tag / "triton"), str(root / tag / "inductor"))
                for state in ("cold", "warm") if not eager_first else ("cold",):
                    timed = args.time and state == "warm"
                    r = _run(model, conv, mode, dirs, eager_first=eager_first, timed=timed)
                    label = f"{model:12} {mode:16} {conv:6}{' eager first' * eager_first:12}"
                    if "failed" in r:
                        print(f"{label} {state}: FAILED")
                        continue
                    print(
                        f"{label} {state}: {r['seconds']:6.2f} s compile "
                        f"({r['process_s']:5.1f} s process), "
                        f"{r['triton_entries_added']} Triton cache entries added, "
                        f"error {r['error']:.1e}"
                        + (
                            f"; per call {r['eager_ms']:.2f} ms eager, "
                            f"{r['compiled_ms']:.2f} ms compiled "
                            f"({r['compiled_ms'] / r['eager_ms']:.2f}x)"
                            if "eager_ms" in r
                            else ""
                        ),
                        flush=True,
                    )
                    if args.verbose or (conv == "ours" and state == "cold" and not eager_first):
                        # Dynamo's phase table, the caches' counters, what Triton compiled
                        print("\n".join("   : " + s[:400] for s in r["log"].splitlines()))
                    rows.append(
                        {"model": model, "mode": mode, "conv": conv, "state": state}
                        | {"eager_first": eager_first}
                        | {k: v for k, v in r.items() if k != "log"}
                    )
    if args.profile:
        tag = root / "profile"
        r = _run("stack", "ours", "default", (str(tag / "t"), str(tag / "i")), profile=True)
        print("---- cProfile of ours' cold compile (stack, default)")
        print(r.get("log", "")[:20000])
    print("---- compile seconds, ours / torch (same state, fresh processes)")
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            for state in ("cold", "warm"):
                pick = {
                    r["conv"]: r["seconds"]
                    for r in rows
                    if (r["model"], r["mode"], r["state"], r["eager_first"])
                    == (model, mode, state, False)
                }
                if len(pick) == 2:
                    print(
                        f"{model:12} {mode:16} {state}: ours {pick['ours']:6.2f} s, "
                        f"torch {pick['torch']:6.2f} s, ratio {pick['ours'] / pick['torch']:.2f}"
                    )
                timed = {
                    r["conv"]: r
                    for r in rows
                    if (r["model"], r["mode"], r["state"]) == (model, mode, state)
                    and "compiled_ms" in r
                }
                if len(timed) == 2:
                    ours, ref = timed["ours"], timed["torch"]
                    print(
                        f"{model:12} {mode:16} per call: compiled ours / compiled torch "
                        f"{ours['compiled_ms'] / ref['compiled_ms']:.2f}, eager ours / eager "
                        f"torch {ours['eager_ms'] / ref['eager_ms']:.2f}, ours compiled / ours "
                        f"eager {ours['compiled_ms'] / ours['eager_ms']:.2f}"
                    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
