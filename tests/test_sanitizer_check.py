"""scripts/sanitizer_check.sh's arguments: a bad one is refused, with a message saying what it
takes, before the script looks for compute-sanitizer (so on this machine too) or runs
anything."""

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "sanitizer_check.sh"


def _run(tmp_path, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, OUT=str(tmp_path), **env)
    return subprocess.run(
        ["bash", str(SCRIPT)], env=environment, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("shard", ["0/2", "3/2", "2", "a/b", "1/0"])
def test_a_malformed_shard_is_refused(shard, tmp_path):
    done = _run(tmp_path, PYTEST_SHARD=shard, STAGES="pytest")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"PYTEST_SHARD={shard}: expected i/n with 1 <= i <= n" in done.stdout


def test_an_unknown_stage_is_refused(tmp_path):
    done = _run(tmp_path, STAGES="pytest memchek")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown stage memchek (huge, racecheck, fuzz, pytest)" in done.stdout
