"""Probe (issue 11, session 19): the ``tritonconv`` CLI with or without ``auto``'s rule that
sends 16-bit channels-last 1x1 stride-1 convolutions to im2col + GEMM (one cuBLAS GEMM per
pass, replayed from launch plans since session 19).

    python benchmarks/probe_pointwise_rule.py [--without-rule] bench --suite models ...

``--without-rule`` hands the heuristic ``channels_last=False``, which only that rule reads, so
those layers take the implicit GEMM as before session 19. Run both in one device call: the
models suite's ratios are each against cuDNN in the same process.
"""

from __future__ import annotations

import sys

from tritonconv import choice, cli


def main(argv: list[str]) -> int:
    if "--without-rule" in argv:
        argv = [a for a in argv if a != "--without-rule"]
        rule = choice.heuristic

        def without_rule(dtype, args, candidates, channels_last=False):
            return rule(dtype, args, candidates, False)

        choice.heuristic = without_rule
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
