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
    """Resident bytes of `pid` and all its descendants, from /proc (psutil is not needed: without
    it, this once measured the launching process alone, missing its children's memory)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, ()))
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


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


def compile_installed(root) -> None:
    """Byte-compile tokenbeam's packages in the checkout `root`, as `pip install .` does on a regular
    install: from an editable install, and where PYTHONDONTWRITEBYTECODE is set (as on our machines),
    every run would compile each of our modules from source, a cost (~0.2 CPU-s a process) that no
    installed user's run pays, nor any peer's, whose packages pip compiled."""
    folders = [os.path.join(root, name) for name in ("bpe_ops", "pipelines", "schemas")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True, stdout=subprocess.DEVNULL)


def python(*args: str) -> list[str]:
    return [sys.executable, *args]
