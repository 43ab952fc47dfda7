"""pe.utils._process — the kernel's parent-death signal, for PE's child processes.

A process PE starts (a spawned or launched rank, a DataLoader worker) must
not outlive the process it works for, however that one dies (SIGKILL
included). Linux's PR_SET_PDEATHSIG asks the kernel to send a signal to the
child when its parent goes; elsewhere there is nothing to set and the
callers keep their own checks.

Linux sends the signal when the *thread* that forked the child ends, even
if the process lives on (the child is then handed to another of its
threads, and getppid() does not change): a handler that must tell the two
apart compares getppid() with the parent's pid.
"""


def set_parent_death_signal(sig):
    """Asks for signal number sig when the parent dies; True when set (Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(sig), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError, TypeError):
        return False
