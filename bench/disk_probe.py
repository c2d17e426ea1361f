"""The disk's single-thread append+fdatasync rate: what a raise costs at best on that disk."""

import os
import time


def append_fdatasync_rate(directory, seconds):
    """Appends of an 80-byte record, each followed by fdatasync, per second for one thread, on a
    scratch file in `directory` (removed afterwards)."""
    path = os.path.join(directory, "fsync-probe.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    record = b"x" * 79 + b"\n"
    count, start = 0, time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            os.write(fd, record)
            os.fdatasync(fd)
            count += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return count / (time.monotonic() - start)
