"""benchmarks/gpu_check.py runs on cpu as a smoke test: every check passes (or is skipped with a reason),
and without CUDA the default device stops at once with one line saying to pass --device cpu.

The script is what a researcher runs first on a GPU machine; this keeps it runnable between GPU sessions.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
LINE = re.compile(r"^(PASS|FAIL|SKIP) (\w+): (.*)$")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_every_check_passes_on_cpu():
    # Prepare
    args = ("--device", "cpu")

    # Execute
    proc = run(*args)

    # Assert
    lines = proc.stdout.strip().splitlines()
    checks = [LINE.match(line) for line in lines[:-1]]
    summary = re.match(r"^gpu_check: (\d+) passed, 0 failed, (\d+) skipped on cpu \(torch ", lines[-1])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert checks and all(checks), f"not a check line among: {lines[:-1]}"
    assert all(m[1] == "PASS" or (m[1] == "SKIP" and m[3].strip()) for m in checks), proc.stdout
    assert summary and int(summary[1]) + int(summary[2]) == len(checks), lines[-1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: the default device runs the checks")
def test_default_device_without_cuda_exits_2_with_one_line():
    # Prepare
    args: tuple[str, ...] = ()

    # Execute
    proc = run(*args)

    # Assert
    out = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2
    assert len(out) == 1 and "no CUDA" in out[0] and "--device cpu" in out[0], out
