"""The `swe-rlvr` command line.

Each command group lives beside the code it drives and registers itself through a `register(sub)`
function; the modules are imported lazily by name, and each keeps heavy imports (torch, prefect,
docker) inside its handlers, so `swe-rlvr --help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

# command group -> "module:function" that adds its subparsers
COMMAND_GROUPS: dict[str, str] = {
    "config": "swe_rlvr.config_cli:register",
    "instances": "swe_rlvr.instances_cli:register",
    "grade": "sandbox.cli:register",
    "sandbox": "swe_rlvr.sweep_cli:register",   # `sandbox sweep` composes sandbox's and flows' sweeps
    "model": "agent.cli:register",
    "train": "flows.cli:register",
    "experiment": "flows.experiment_cli:register",
}


class CommandError(Exception):
    """A failure whose message says everything the user needs (its cause, the fix, where to look):
    the CLI prints the message alone and keeps the traceback for `-v`."""


class _BriefFormatter(logging.Formatter):
    """Log lines without the tracebacks attached to them (Prefect logs one per failed flow run);
    the error's own message follows at the end, and `-v` shows them all."""

    def format(self, record: logging.LogRecord) -> str:
        brief = logging.makeLogRecord(record.__dict__)  # other handlers still see the traceback
        brief.exc_info, brief.exc_text, brief.stack_info = None, None, None
        return super().format(brief)


CHATTY_LOGGERS = ("httpx", "httpcore", "urllib3", "filelock", "alembic", "docker")
"""Libraries whose INFO lines are noise at the CLI; `-v` shows them again."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swe-rlvr", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for target in COMMAND_GROUPS.values():
        module_name, func_name = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue  # a command group that this installation does not ship yet
            raise
        getattr(module, func_name)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Prefect's ephemeral server would try to send usage telemetry and log an ERROR when the
    # machine is offline (training boxes often are); set it to true to opt back in.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    args = build_parser().parse_args(argv)
    _log_setup(args.verbose)
    before = _stop_on_sigterm()
    try:
        with _stop_deadline(_grace_s()):
            return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return stop(130)
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: one clear message, not a traceback
        from swe_rlvr.config import ConfigError
        explained = (CommandError, ConfigError, FileNotFoundError, ValueError)
        if isinstance(exc, explained) and not args.verbose:
            print(f"error: {exc}", file=sys.stderr)
            return 1 if isinstance(exc, CommandError) else 2
        raise
    except BaseException as exc:
        # SIGTERM inside a flow run: Prefect raises its TerminationSignal, a BaseException that
        # carries the signal's number (told by that number: swe_rlvr imports no Prefect)
        number = getattr(exc, "signal", None)
        if isinstance(number, int) and not isinstance(exc, (SystemExit, GeneratorExit)):
            return stop(128 + number)
        raise
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _stop_on_sigterm() -> Any:
    """Make SIGTERM end the command through `stop`; the handler it replaces (None off the main
    thread, where no handler can be set). Inside a flow run Prefect swaps in its own, and after
    the run's crash handling (flow and MLflow runs marked) it restores this one and sends the
    signal again: without it, that second signal killed the process before `stop` could say how
    to resume."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda number, _frame: stop(128 + number))


STOPPED = ("stopped: every finished stage and episode is kept; rerun the same command to resume "
           "(`swe-rlvr sandbox sweep` removes containers a docker run left)")


def stop(code: int) -> NoReturn:
    """End the process now, with `code`, after Ctrl-C or SIGTERM. A normal exit would wait for the
    threads of the flow's tasks (a rollout stage's episodes, a grading pool): they are not daemons
    and never hear the signal, so a stopped ladder went on sampling until its stage ended. What a
    rerun needs is on disk already (stage manifests, episode journals), and the flow and MLflow
    runs were marked crashed or failed on the way out; jailed processes die with this one
    (bwrap's --die-with-parent) and Prefect's ephemeral server with its watchdog
    (`flows.ephemeral`)."""
    print(STOPPED, file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


GRACE_ENV = "SWE_RLVR_STOP_GRACE_S"
STOP_GRACE_S = 30.0
"""How long a stopped command may take on its way out before it exits anyway (`GRACE_ENV`
overrides it). The way out marks the Prefect flow runs crashed and the MLflow runs failed: calls
to servers, which take a second or two, and held a stopped run for minutes when the Prefect API
did not answer (its client waits 60 s a try and tries again)."""


def _grace_s() -> float:
    raw = os.environ.get(GRACE_ENV, "")
    try:
        grace = float(raw) if raw else STOP_GRACE_S
    except ValueError:
        grace = -1.0
    if not grace > 0:
        raise CommandError(f"{GRACE_ENV}={raw!r} is not a positive number of seconds; unset it "
                           f"for the default ({STOP_GRACE_S:g} s)")
    return grace


_STOPS = (signal.SIGINT, signal.SIGTERM)
_PIPE: list[int] = []
"""The deadline's pipe while one is in force (read end, write end)."""


@contextlib.contextmanager
def _stop_deadline(grace_s: float) -> Iterator[None]:
    """End the process `grace_s` seconds after SIGTERM or Ctrl-C, whatever its main thread is
    doing then. The signal's Python handler belongs to whoever set it last (Prefect swaps in its
    own during a flow run), and its way out waits on servers. Python writes the number of every
    signal it catches to the wakeup fd, in C, before any handler runs; a thread that reads it
    hears the signal whoever handles it. Off the main thread (no wakeup fd can be set) it does
    nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    _PIPE[:] = [read, write]
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(read, before, grace_s, done),
                               name="stop-deadline", daemon=True)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)   # the watcher is born blocking them:
    try:                                # the kernel hands them to the main thread, whose sleep
        watcher.start()                 # they must interrupt (a Python handler runs only there)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(before)
        watcher.join()
        _PIPE.clear()
        os.close(read)
        os.close(write)


def _watch(read: int, forward: int, grace_s: float, done: threading.Event) -> None:
    """The deadline's thread: pass each signal byte on to the wakeup fd it displaced, and once a
    stop signal came, exit if the command has not ended `grace_s` seconds later."""
    while not done.is_set():
        if not select.select([read], [], [], 0.5)[0]:
            continue
        chunk = os.read(read, 64)
        if forward >= 0:
            with contextlib.suppress(OSError):
                os.write(forward, chunk)
        caught = [number for number in chunk if number in _STOPS]
        if caught and not done.wait(grace_s):
            late = (f"{STOPPED}\nthe way out took over {grace_s:g} s ({GRACE_ENV}) and was cut "
                    "short: a Prefect flow run may still show Running\n")
            os.write(2, late.encode())          # not print: the main thread may hold stderr's lock
            os._exit(128 + caught[0])


def _forget_in_child() -> None:
    """In a child forked without exec, the wakeup fd is still the parent's pipe: a signal sent
    to the child would reach the parent's watcher and end the parent. The child forgets it as it
    starts (only a signal that reaches it before its fork hooks run still gets through)."""
    if _PIPE:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
        for fd in _PIPE:
            with contextlib.suppress(OSError):
                os.close(fd)
        _PIPE.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def entry() -> int:
    """The console script: the process's allocator first (`swe_rlvr.allocator`), then `main`."""
    from swe_rlvr import allocator
    try:
        allocator.preload()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return main()


def _log_setup(verbose: bool) -> None:
    """INFO lines without tracebacks (DEBUG and everything with -v)."""
    handler = logging.StreamHandler()
    fmt, datefmt = "%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"
    handler.setFormatter((logging.Formatter if verbose else _BriefFormatter)(fmt, datefmt))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    if not verbose:  # one line per API call to Prefect's server drowns the run's own log
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(entry())
