"""How many cores this process may use: the fewest of the cores it may be scheduled on and the
CPU quota of its control group (a container's `resources.limits.cpu`), cgroup v2 or v1, rounded
up. `os.cpu_count()` counts the node's cores, which a container limited to two of them on a
64-core node must not take for its own."""

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores(root: Path = CGROUP_ROOT, membership: Path = Path("/proc/self/cgroup")) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpu_quota(root, membership)
    return max(1, min(cores, math.ceil(quota))) if quota is not None else cores


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, membership: Path = Path("/proc/self/cgroup")) -> float | None:
    """The tightest CPU quota (in cores) on the way from this process's control group up to the
    hierarchy's root, or None when there is none (or no cgroup file system to read)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: one hierarchy, the quota in cpu.max
            mount, read = _v2_mount(root), _v2_quota
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own hierarchy
            mount, read = _v1_mount(root, controllers), _v1_quota
        else:
            continue
        if mount is None:
            continue
        for directory in _up_from(mount, path):
            if (quota := read(directory)) is not None:
                quotas.append(quota)
    return min(quotas, default=None)


def _v2_mount(root: Path) -> Path | None:
    for mount in (root, root / "unified"):
        if (mount / "cgroup.controllers").exists():
            return mount
    return None


def _v1_mount(root: Path, controllers: str) -> Path | None:
    for name in (controllers, "cpu,cpuacct", "cpu"):
        if (root / name / "cpu.cfs_quota_us").exists():
            return root / name
    return None


def _up_from(mount: Path, path: str) -> list[Path]:
    """The group's directory and each one above it, up to the mount (in a cgroup namespace the
    group is the mount itself, and `path` is "/")."""
    parts = [p for p in path.split("/") if p]
    found = [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
    return [d for d in found if d.is_dir()]


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota < 0 or period <= 0 else quota / period
