"""Run facts shared by the benchmark scripts: machine, load, commit, ratios."""
import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ratio(a, b):
    return a / b if a and b else None


def machine_info():
    info = {"platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "L2 cache", "L3 cache", "Hypervisor vendor"):
                info[k.strip()] = v.strip()
        with open("/proc/meminfo") as f:
            info["mem_total"] = f.readline().split(":")[1].strip()
    except OSError:
        pass
    return info


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def git_commit():
    try:
        r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        d = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "include"],
                           capture_output=True, text=True)
    except OSError:  # no git (a device machine's copy of the tree): the caller records the commit
        return os.environ.get("INVAR_COMMIT", "unknown")
    # Say when the binary may hold uncommitted code.
    return r.stdout.strip() + ("+uncommitted-src" if d.stdout.strip() else "")
