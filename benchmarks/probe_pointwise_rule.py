"""Probe (issue 11, session 19): the ``tritonconv`` CLI with ``auto``'s rule for 16-bit
channels-last 1x1 stride-1 convolutions on or off. The rule sends them to im2col + GEMM (one
cuBLAS GEMM per pass, replayed from launch plans since session 19) in compiled graphs.

    python benchmarks/probe_pointwise_rule.py [--without-rule | --eager-too] bench ...

``--without-rule`` hands the heuristic ``channels_last=False``, which only that rule reads, so
those layers take the implicit GEMM everywhere (as before session 19); ``--eager-too`` applies
the rule to eager calls as well (``traced=True``: session 19's first version, measured slower
in eager). ``--without-tma`` (session 20) keeps the implicit GEMM's pointer-load kernel for
the 1x1 layers that ``pointwise_tma_kernel`` takes (``pointwise_tma_config`` answers None).
Run the variants in one device call: each suite's ratios are against cuDNN in its own process.
"""

from __future__ import annotations

import os
import sys

from tritonconv import choice, cli
from tritonconv.ops import implicit_gemm

VARIANTS = ("--without-rule", "--eager-too", "--without-tma")


def main(argv: list[str]) -> int:
    variant_name = next((a for a in argv if a in VARIANTS), "default")
    # in the environment, so that AOTAutograd's cache keys tell the variants apart
    # (aot_cache.digest reads every TRITONCONV_* variable): a compiled graph of one variant
    # must not be loaded from the cache by another
    os.environ["TRITONCONV_PROBE_POINTWISE_RULE"] = variant_name
    rule = choice.heuristic
    if "--without-rule" in argv:

        def variant(dtype, args, candidates, channels_last=False, traced=False):
            return rule(dtype, args, candidates, False, traced)

        choice.heuristic = variant
    elif "--eager-too" in argv:

        def variant(dtype, args, candidates, channels_last=False, traced=False):
            return rule(dtype, args, candidates, channels_last, True)

        choice.heuristic = variant
    elif "--without-tma" in argv:
        implicit_gemm.pointwise_tma_config = lambda *args, **kwargs: None
    return cli.main([a for a in argv if a not in VARIANTS])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
