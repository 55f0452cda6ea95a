"""The exclusive lock a run holds on its results file for the whole run.

A writer (``nmsbench sweep``, ``pipeline``, ``accuracy``; :class:`nmsbench.results.ResultWriter`)
takes ``flock`` on ``<name>.csv.lock`` beside the CSV before it truncates (``--force``) or
reads (``--resume``) the file, and keeps it until the run ends, so a second writer of the same
file is refused instead of interleaving its rows. The lock file holds the holder's pid, host,
command and start time, for the refusal to name it. The kernel drops a ``flock`` when its
holder dies (even by ``kill -9``), so a lock file left behind never blocks a later run; a
holder deletes the file when it releases it. (``fcntl`` directly, not the filelock package:
the refusal names the holder, which filelock's flock-based lock does not record.)
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path


class ResultsFileBusy(ValueError):
    """Another process holds the lock of a results file (``holder``: what its lock file says)."""

    def __init__(self, path: Path, holder: dict):
        self.path, self.holder = path, holder
        super().__init__(f"{path} is being written by another run ({describe_holder(holder)}); wait for it to end "
                         "or stop it, or write another file")


def describe_holder(holder: dict) -> str:
    """'pid 123 on host, since 2026-...: nmsbench sweep ...' from a lock file's record."""
    if not holder.get("pid"):
        return "a process that has not recorded itself yet"
    text = f"pid {holder['pid']} on {holder.get('host') or 'an unknown host'}"
    if holder.get("since"):
        text += f", since {holder['since']}"
    return text + (f": {holder['command']}" if holder.get("command") else "")


def lock_path(path) -> Path:
    """``<name>.csv.lock`` beside the file ``path`` names (symbolic links followed, so two
    names of one file share its lock)."""
    real = Path(os.path.realpath(path))
    return real.with_name(real.name + ".lock")


def _read_holder(fd: int) -> dict:
    """The lock file's record, waiting briefly for a holder that has locked but not yet written it."""
    for _ in range(20):
        try:
            record = json.loads(os.pread(fd, 65536, 0) or b"null")
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict):
            return record
        time.sleep(0.05)
    return {}


class ResultsLock:
    """The exclusive lock of results file ``path`` (see the module docstring); taken by the
    constructor, which raises :class:`ResultsFileBusy` naming the holder when another process
    has it, or ValueError when the lock file cannot be made. ``release()`` (or leaving a
    ``with`` block) gives it back."""

    def __init__(self, path, command: str = ""):
        import fcntl  # here: reading results (the dashboard) needs no fcntl

        self.path = Path(path)
        self.lock_file = lock_path(path)
        self.lock_file.parent.mkdir(parents=True, exist_ok=True)
        command = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
        while True:
            try:
                fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise ValueError(f"{self.path}: cannot make its lock file {self.lock_file} ({e.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _read_holder(fd) if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES) else None
                os.close(fd)
                if holder is None:
                    raise ValueError(f"{self.path}: cannot lock {self.lock_file} ({e.strerror}); write results on "
                                     "a file system that supports locks (a local disk)") from None
                raise ResultsFileBusy(self.path, holder) from None
            # the holder before us may have deleted the file between our open and our lock:
            # the lock counts only on the file that is at the path now
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.lock_file))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.holder = {"pid": os.getpid(), "host": platform.node(), "command": command,
                       "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
        self._fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(self.holder) + "\n").encode(), 0)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lock back and delete the lock file (a no-op when already released)."""
        import fcntl

        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if os.getpid() != self.holder["pid"]:  # a forked child: the lock is its parent's to give back
            os.close(fd)
            return
        try:
            os.unlink(self.lock_file)  # while still locked: a waiter then locks a new file, never this one
        except OSError:
            pass
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):  # a lock dropped without release() must not stay held for the process's life
        if getattr(self, "_fd", None) is not None:
            try:
                self.release()
            except Exception:  # at interpreter exit the kernel drops the lock anyway
                pass

