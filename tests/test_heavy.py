"""tests/heavy.py: beside the other session, a scale module runs alone and is not passed."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

HOLD = """
import sys, time
sys.path.insert(0, {here!r})
import heavy
with heavy.{how}():
    print("in", flush=True)
    time.sleep({secs})
"""


def _start(how: str, secs: float, lock: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD.format(here=str(HERE), how=how, secs=secs)],
                            stdout=subprocess.PIPE, text=True,
                            env={"SLURM_HOOKS_TEST_HEAVY_LOCK": str(lock), "PATH": "/usr/bin:/bin"})


def _entered(p: subprocess.Popen) -> float:
    assert p.stdout is not None
    assert p.stdout.readline() == "in\n"
    return time.monotonic()


def test_a_scale_module_waits_for_the_tests_running_and_the_next_ones_wait_for_it(tmp_path):
    lock = tmp_path / "heavy.lock"
    first = _start("beside", 2.0, lock)
    _entered(first)
    scale = _start("alone", 2.0, lock)
    time.sleep(0.5)                      # the scale module now waits at the lock, holding the gate
    later = _start("beside", 0.1, lock)
    t_scale = _entered(scale)
    t_later = _entered(later)
    assert first.wait(10) == 0
    for p in (scale, later):
        assert p.wait(10) == 0
    # The scale module came in only after the running test, and the test that came after it
    # only once the module was done.
    assert t_later - t_scale >= 1.8


def test_two_tests_beside_each_other_do_not_wait(tmp_path):
    lock = tmp_path / "heavy.lock"
    a = _start("beside", 3.0, lock)
    _entered(a)
    b = _start("beside", 0.1, lock)
    _entered(b)
    assert a.poll() is None                  # b came in while a was still inside
    assert a.wait(10) == 0 and b.wait(10) == 0
