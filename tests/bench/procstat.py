"""A process's CPU time from /proc/PID/stat, for the benchmarks that put a
proxy's or the runner's own CPU beside a wall-clock figure."""
import os


def cpu(pid):
    """(utime+stime, cutime+cstime) of a process in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rpartition(")")[2].split()
    tck = os.sysconf("SC_CLK_TCK")
    ut, st, cut, cst = (int(x) for x in fields[11:15])
    return (ut + st) / tck, (cut + cst) / tck


def children(pid):
    """The process's children now (an nginx master's workers)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def cpu_with_children(pid):
    """utime+stime in seconds of the process and its living children (a
    child that has exited is left out: cutime counts only reaped ones)."""
    total = 0.0
    for q in [pid] + children(pid):
        try:
            total += cpu(q)[0]
        except (OSError, IndexError, ValueError):
            pass
    return total
