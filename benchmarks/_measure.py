"""Measure a command the way the benchmarks report it: wall time, CPU time (the process and every
descendant it waited for) and peak resident memory of the whole process tree (sampled)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass


@dataclass
class Measured:
    wall: float
    cpu: float
    peak_rss_mb: float
    returncode: int
    stderr: str


def _tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and all its descendants (from /proc; psutil when available)."""
    try:
        import psutil
        proc = psutil.Process(pid)
        total = proc.memory_info().rss
        for child in proc.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return total
    except Exception:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
    return 0


def measure(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> Measured:
    """Run `cmd`, sampling the tree's RSS every 50 ms; CPU from wait4's rusage (children included)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    stderr_chunks: list[str] = []
    reader = threading.Thread(target=lambda: stderr_chunks.append(proc.stderr.read()), daemon=True)
    reader.start()
    status = None
    while status is None:
        peak = max(peak, _tree_rss(proc.pid))
        pid, st, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status = (st, usage)
        else:
            time.sleep(0.05)
    wall = time.perf_counter() - started
    reader.join()
    st, usage = status
    proc.returncode = os.waitstatus_to_exitcode(st)
    return Measured(wall, usage.ru_utime + usage.ru_stime, max(peak, usage.ru_maxrss * 1024) / 1e6,
                    proc.returncode, "".join(stderr_chunks))


def python(*args: str) -> list[str]:
    return [sys.executable, *args]
