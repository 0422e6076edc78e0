"""bench/serve.py's process accounting: CPU seconds of a process tree, of the machine, of
this script, and of a server's threads by name (from /proc)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))




_TICK = os.sysconf("SC_CLK_TCK")


# -- CPU accounting ----------------------------------------------------------------------------------


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its children: the process, its live children, and its reaped
    children (``cutime``/``cstime``): a PostgreSQL cluster (backends that exited, such as the
    pgbench's), or a pgfeed server (capture processes)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == root:
            total += sum(int(f) for f in fields[11:15]) / _TICK
        elif int(fields[1]) == root:
            total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _TICK


def client_cpu() -> float:
    """CPU seconds of this process and of its children waited for (pgbench)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Cpu:
    """CPU seconds used during one measured interval, by whom."""

    server: float = 0.0
    postgres: float = 0.0
    clients: float = 0.0
    machine: float = 0.0
    seconds: float = 0.0

    @classmethod
    @contextlib.contextmanager
    def measure(cls, server_pid: int, postmaster: int) -> Iterator[Cpu]:
        cpu = cls()
        s0, p0, c0 = tree_cpu(server_pid), tree_cpu(postmaster), client_cpu()
        m0, t0 = machine_cpu(), time.monotonic()
        try:
            yield cpu
        finally:
            cpu.server = tree_cpu(server_pid) - s0
            cpu.postgres = tree_cpu(postmaster) - p0
            cpu.clients = client_cpu() - c0
            cpu.machine = machine_cpu() - m0
            cpu.seconds = time.monotonic() - t0

    @property
    def other(self) -> float:
        """CPU the machine spent on processes this benchmark did not start."""
        return max(0.0, self.machine - self.server - self.postgres - self.clients)

    def share(self, value: float) -> str:
        return f"{value / (self.seconds or 1.0):.0%}"

    def text(self) -> str:
        return (f"CPU: server {self.share(self.server)}, postgres {self.share(self.postgres)}, "
                f"clients {self.share(self.clients)}, other {self.share(self.other)} (of a core)")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process, by thread id."""
    out = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def thread_names(pid: int, exe: str) -> dict[int, str]:
    """Python thread names by thread id, from ``py-spy dump`` (empty without py-spy); threads that
    run no Python (grpc's pollers) are not named."""
    try:
        text = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names = {}
    for line in text.splitlines():
        m = re.match(r'Thread (0x[0-9a-fA-F]+|\d+) \(\w+\): "(.*)"', line)
        if m:
            names[int(m.group(1), 0)] = m.group(2)
    return names


def load_text(values: tuple[float, float, float]) -> str:
    """Load averages as ``1 / 5 / 15``-minute figures."""
    return " / ".join(f"{v:.2f}" for v in values)
