"""Stopping a run within two seconds of SIGTERM or Ctrl-C, even inside a native call.

Python runs a signal handler in the main thread between bytecodes, so a run that is
inside one long native call (a torch op, a numba kernel, a CUDA wait) would not stop
until the call returns: minutes at large N. A :class:`Watchdog` (``with Watchdog() as
stop:``) bounds that:

- ``signal.set_wakeup_fd`` makes the C-level handler write each signal's number into a
  pipe the moment it arrives, whatever the main thread is doing;
- a Python thread waits for SIGTERM or SIGINT there. If the main thread has not stopped
  (left the ``with`` block) ``GRACE`` seconds later, it waits for a row being written to
  end (``guard``), fsyncs the results file (``attach``), prints what is in it and exits the
  process with ``os._exit(128 + signal)``: 143 or 130, as a normal stop;
- a Python thread needs the GIL, which a numba kernel compiled without ``nogil`` holds
  for its whole call. So the pipe is read by a numba thread that runs without the GIL
  (libc ``read``, ``fsync``, ``write`` and ``_exit``): it hands each signal to the Python
  thread and, where the process is still alive ``NATIVE_GRACE`` seconds after the signal,
  fsyncs the results file, writes a message prepared in advance and exits itself. No row
  is being written then: a row's ``write`` releases the GIL, so the Python thread would
  have run.

Every row already written is whole (``ResultWriter`` writes a row in one system call,
and the guard keeps the exit out of a write) and on disk. POSIX only; elsewhere, or off
the main thread, the watchdog does nothing.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Optional

import numpy as np
from numba import njit, types

GRACE = 1.5  # seconds the main thread has to stop by itself before the Python thread exits the process
NATIVE_GRACE = 1.7  # seconds before the numba thread does, where no Python thread could run
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_MESSAGE_BYTES = 4096

# state: what the numba thread reads while the main thread may hold the GIL
_STOOD_DOWN, _FILE_FD, _TERM_LENGTH, _INT_LENGTH = range(4)


def _what(signum: int) -> str:
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


c_read = types.ExternalFunction("read", types.intp(types.intc, types.voidptr, types.uintp))
c_write = types.ExternalFunction("write", types.intp(types.intc, types.voidptr, types.uintp))
c_usleep = types.ExternalFunction("usleep", types.intc(types.uintc))
c_fsync = types.ExternalFunction("fsync", types.intc(types.intc))
c_exit = types.ExternalFunction("_exit", types.void(types.intc))


@njit(nogil=True, cache=True)
def _native_loop(signal_fd, notify_fd, state, term_message, int_message, grace_us):  # pragma: no cover
    """Without the GIL: pass SIGTERM/SIGINT from ``signal_fd`` on to ``notify_fd``; exit
    ``grace_us`` after one unless ``state`` says the run stopped. A 0 byte or EOF ends it."""
    buf = np.zeros(1, dtype=np.uint8)
    errors = 0
    while True:
        got = c_read(signal_fd, buf.ctypes, 1)
        if got == 0 or (got == 1 and buf[0] == 0) or errors > 100:
            return 0
        if got < 0:  # interrupted: the thread blocks signals, so only by mistake
            errors += 1
            continue
        if buf[0] == 15 or buf[0] == 2:
            c_write(notify_fd, buf.ctypes, 1)
            break
    waited = 0
    while waited < grace_us:
        c_usleep(10000)
        waited += 10000
        if state[0] != 0:
            return 1
    if state[1] >= 0:
        c_fsync(state[1])
    if buf[0] == 15:
        c_write(2, term_message.ctypes, state[2])
    else:
        c_write(2, int_message.ctypes, state[3])
    c_exit(128 + buf[0])
    return 2


def _make_native_watch():
    """The numba thread's loop, compiled (or loaded from numba's cache) now, while this
    thread has the GIL; None where that fails."""
    try:
        read_end, write_end = os.pipe()
        os.close(write_end)
        empty = np.zeros(1, dtype=np.uint8)
        _native_loop(read_end, -1, np.zeros(4, dtype=np.int64), empty, empty, 0)
        os.close(read_end)
    except Exception:  # pragma: no cover
        return None
    return _native_loop


_native_watch: Optional[Callable] = None
_native_tried = False


def native_watch():
    """The compiled numba loop, made once per process (None where it cannot be)."""
    global _native_watch, _native_tried
    if not _native_tried:
        _native_tried = True
        _native_watch = _make_native_watch()
    return _native_watch


class Watchdog:
    """Exits the process ``GRACE`` seconds after SIGTERM or SIGINT where the main thread
    has not left the ``with`` block by then (see the module docstring). ``running`` is
    False where it could not start (not POSIX, not the main thread, or another wakeup fd
    is in use); its methods then do nothing."""

    def __init__(self):
        self.running = False
        self._done = threading.Event()
        self._lock = threading.Lock()  # stand-down against a forced exit
        self._row = threading.Lock()  # held while a row is written
        self._rows = 0
        self._file_fd = -1
        self._summary: Optional[Callable[[Optional[int]], str]] = None
        self._state = np.zeros(4, dtype=np.int64)
        self._state[_FILE_FD] = -1
        self._messages = np.zeros((2, _MESSAGE_BYTES), dtype=np.uint8)  # SIGTERM's, SIGINT's
        self._fds: list[int] = []
        self._threads: list[threading.Thread] = []
        self._previous_wakeup = -1

    # ------------------------------------------------------------------ the run's side

    def attach(self, path, summary: Callable[[Optional[int]], str]) -> None:
        """The results file to fsync before a forced exit, and ``summary(rows)``: what is
        in it, printed then (``rows``: those written through :meth:`guard`; None in the
        message prepared for the numba thread, which cannot count)."""
        if not self.running:
            return
        try:
            self._file_fd = os.open(path, os.O_RDONLY)  # fsync flushes the file whatever fd names it
        except OSError:
            self._file_fd = -1
        self._summary = summary
        for row, signum in enumerate(STOP_SIGNALS):
            text = self._message(signum, None).encode(errors="replace")[:_MESSAGE_BYTES]
            self._messages[row, :len(text)] = np.frombuffer(text, dtype=np.uint8)
            self._state[_TERM_LENGTH + row] = len(text)
        self._state[_FILE_FD] = self._file_fd

    def guard(self, write: Callable[[dict], None]) -> Callable[[dict], None]:
        """``write`` such that a forced exit waits for a row being written to end."""
        def guarded(row: dict) -> None:
            with self._row:
                write(row)
                self._rows += 1

        return guarded

    # ------------------------------------------------------------------ start and stop

    def __enter__(self) -> "Watchdog":
        if os.name != "posix" or threading.current_thread() is not threading.main_thread():
            return self
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        if previous != -1:  # someone else's (an event loop's): leave it to them
            signal.set_wakeup_fd(previous)
            os.close(read_end)
            os.close(write_end)
            return self
        self._fds = [read_end, write_end]
        watch = native_watch()
        python_reads = read_end
        if watch is not None:
            notify_read, notify_write = os.pipe()
            self._fds += [notify_read, notify_write]
            python_reads = notify_read
            self._threads.append(threading.Thread(
                target=self._blocking_signals, name="nmsbench-native-watchdog", daemon=True,
                args=(watch, read_end, notify_write, self._state, self._messages[0], self._messages[1],
                      int(NATIVE_GRACE * 1e6))))
        self._threads.append(threading.Thread(target=self._blocking_signals, name="nmsbench-watchdog", daemon=True,
                                              args=(self._watch, python_reads)))
        for thread in self._threads:
            thread.start()
        self.running = True
        return self

    def __exit__(self, *exc) -> None:
        if not self.running:
            return
        with self._lock:
            self._done.set()
            self._state[_STOOD_DOWN] = 1
        signal.set_wakeup_fd(-1)
        for fd in self._fds[1::2]:  # a 0 byte on each pipe ends the thread reading it
            try:
                os.write(fd, b"\0")
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=1.0)
        if not any(thread.is_alive() for thread in self._threads):  # a reader still there would see a reused fd
            for fd in self._fds + ([self._file_fd] if self._file_fd >= 0 else []):
                os.close(fd)
        self.running = False

    # ------------------------------------------------------------------ the threads

    @staticmethod
    def _blocking_signals(target, *args) -> None:
        """``target(*args)`` in a thread that takes no signals (they go to the main thread,
        whose handlers raise there; a read here is then never interrupted)."""
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        target(*args)

    def _watch(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 1)
            except OSError:
                return
            if not data or data == b"\0":
                return
            if data[0] in STOP_SIGNALS:
                if self._done.wait(GRACE):
                    return
                self._force(data[0])

    def _force(self, signum: int) -> None:
        """fsync, say what is written, exit: the main thread did not stop in time."""
        with self._lock:
            if self._done.is_set():
                return
            self._row.acquire(timeout=0.5)  # a row being written ends first
            if self._file_fd >= 0:
                try:
                    os.fsync(self._file_fd)
                except OSError:
                    pass
            try:
                os.write(2, ("\n" + self._message(signum, self._rows)).encode(errors="replace"))
            except Exception:
                pass
            os._exit(128 + signum)

    def _message(self, signum: int, rows: Optional[int]) -> str:
        after = GRACE if rows is not None else NATIVE_GRACE
        what = f"{_what(signum)} inside a call that had not returned {after:g} s later"
        return f"{what}: {self._summary(rows) if self._summary else 'no rows were written'}\n"
