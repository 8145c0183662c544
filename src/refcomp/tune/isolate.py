"""One call in a fresh process, with a time limit: how the tuner isolates every candidate.

`start(fn, args, limit_s)` pickles `(fn, args)` and runs `fn(conn, *args)` in a new process;
the child reports through `conn.send(...)` and the parent reads the report with a deadline
(`IsolatedCall.poll`, `recv`), killing the child when it gives none in time.  A child that cannot
unpickle the call reports `("build_error", (), message)`, the runner's form of a report.

Children never come from a plain `fork` of the tuning process: GNU libgomp keeps its thread
pool's bookkeeping across `fork` but not its threads, so the child of a process that has run
an OpenMP region waits forever in its first parallel region.  Instead:

- in an ordinary process, children are forked by multiprocessing's fork server, a fresh
  interpreter that imported refcomp once and never runs a kernel (a child costs a fork);
- in a daemonic process, which multiprocessing does not allow to have children (a Dask
  worker is one by default), a child is a new interpreter started with `subprocess`; it reads
  the pickled call from its stdin and reports on an inherited pipe.

Either way the child arms an alarm of `limit_s` (plus a margin) that ends it even when its
parent died without killing it (a worker killed mid-measurement), so no candidate outlives its
time limit by much.

Everything a child needs travels by pickle: build hooks must be functions or instances of
classes defined at the top level of an importable module (not the main script).  When
cloudpickle is installed (it comes with Dask), closures, lambdas and the main script's functions
work too.  Frozen IR mappings (`MappingProxyType` attributes) are
pickled as the dict they wrap.
"""
from __future__ import annotations

import contextlib
import copyreg
import io
import math
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from types import MappingProxyType
from typing import Any, Callable

from ..ast.node import freeze_mapping
from ..errors import RefcompError

# The fork server imports these once; every child forked from it has them already (the build
# imports the driver, the emitters and cffi).  Not the main script: one without a
# `__name__ == "__main__"` guard would run again in the server.
_PRELOAD = ["refcomp.tune.runner", "refcomp.driver", "cffi.cparser"]
_ALARM_MARGIN_S = 10
_MAIN_LOCK = threading.Lock()


def _reduce_mapping_proxy(mapping: MappingProxyType) -> tuple:
    return freeze_mapping, (dict(mapping),)


def _pickler(buffer: io.BytesIO) -> pickle.Pickler:
    try:
        import cloudpickle
    except ImportError:
        pickler: pickle.Pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        table = dict(copyreg.dispatch_table)
    else:
        pickler = cloudpickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        table = dict(getattr(pickler, "dispatch_table", copyreg.dispatch_table))
    table[MappingProxyType] = _reduce_mapping_proxy
    pickler.dispatch_table = table  # type: ignore[misc]
    return pickler


def dumps(obj: Any, what: str = "the call") -> bytes:
    """obj pickled for another process (IR mappings included); a RefcompError when it cannot be."""
    buffer = io.BytesIO()
    try:
        _pickler(buffer).dump(obj)
    except (pickle.PicklingError, TypeError, AttributeError) as error:
        raise RefcompError(
            f"tune: {what} cannot be sent to a worker process ({error}); build hooks and references "
            f"must be module-level functions or instances of module-level classes (or install "
            f"cloudpickle, which pickles closures)") from error
    return buffer.getvalue()


def _run(conn: Connection, payload: bytes) -> None:
    try:
        limit_s, fn, args = pickle.loads(payload)
    except Exception as error:  # e.g. a hook pickled by reference to the main script, absent here
        conn.send(("build_error", (), f"the worker process cannot load the call: {type(error).__name__}: {error} "
                                      f"(define build hooks in an importable module, or install cloudpickle)"))
        return
    if hasattr(signal, "alarm"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(int(math.ceil(limit_s)) + _ALARM_MARGIN_S)
    fn(conn, *args)


def _exec_main() -> None:
    """The entry of an exec'd child: argv[1] is the report pipe's fd, the call comes on stdin."""
    conn = Connection(int(sys.argv[1]), readable=False, writable=True)
    payload = sys.stdin.buffer.read()
    _run(conn, payload)
    conn.close()


class IsolatedCall:
    """A running child: poll/recv its report, join, kill; exitcode when it ended."""

    def __init__(self, conn: Connection, process: Any = None, popen: subprocess.Popen | None = None) -> None:
        self.conn = conn
        self._process = process
        self._popen = popen

    def poll(self, timeout: float) -> bool:
        return self.conn.poll(timeout)

    def recv(self) -> Any:
        return self.conn.recv()

    def is_alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        return self._process.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._popen is not None:
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        else:
            self._process.join(timeout)

    def kill(self) -> None:
        if self._popen is not None:
            self._popen.kill()
        else:
            self._process.kill()

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else self._process.exitcode

    def close(self) -> None:
        self.conn.close()


def _daemonic() -> bool:
    return bool(multiprocessing.current_process().daemon)


def method() -> str:
    """How children start in this process: "forkserver", or "exec" in a daemonic process."""
    if _daemonic() or "forkserver" not in multiprocessing.get_all_start_methods():
        return "exec"
    return "forkserver"


@contextlib.contextmanager
def _main_script_hidden():
    """While a child starts, the main module shows multiprocessing neither a file nor a spec.

    Otherwise a fork-server child runs the parent's main script again (as `__mp_main__`) before
    its call: a script that tunes at its top level, with no `if __name__ == "__main__":` guard,
    would start tuning again in every child, which multiprocessing stops with a RuntimeError, so
    every candidate failed.  The child never needs the main script: its call arrives pickled
    (`dumps`), the main script's functions by value or not at all."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _MAIN_LOCK:
        namespace = vars(main)
        saved = {name: namespace[name] for name in ("__file__", "__spec__") if name in namespace}
        namespace.pop("__file__", None)
        namespace["__spec__"] = None
        try:
            yield
        finally:
            namespace.pop("__spec__", None)
            namespace.update(saved)


def start(fn: Callable[..., None], args: tuple, limit_s: float, what: str = "the call") -> IsolatedCall:
    """Run fn(conn, *args) in a fresh process; it must report with conn.send before limit_s."""
    payload = dumps((limit_s, fn, args), what)
    if method() == "forkserver":
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        receive, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_run, args=(send, payload), daemon=True)
        with _main_script_hidden():
            process.start()
        send.close()
        return IsolatedCall(receive, process=process)
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        popen = subprocess.Popen(
            [sys.executable, "-c", "from refcomp.tune.isolate import _exec_main; _exec_main()", str(write_fd)],
            stdin=subprocess.PIPE, pass_fds=(write_fd,), env=env, close_fds=True)
    finally:
        os.close(write_fd)
    conn = Connection(read_fd, readable=True, writable=False)
    try:
        assert popen.stdin is not None
        popen.stdin.write(payload)
        popen.stdin.close()
    except BrokenPipeError:
        pass  # the child died at once; its exit code says so
    return IsolatedCall(conn, popen=popen)
