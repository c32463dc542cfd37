"""The in-jail command runner: one long-lived process per sandbox, stdlib only.

`sandbox.executor` starts it once inside the jail as `python -I -S -c <program> <cfg>`, the program
being `sandbox.executor_wire`'s source followed by this file's (so the project need not be
importable there), and sends it one request per command (`executor_wire`'s framing).

Each command runs in a bash of its own, in a new session. That shell is spawned right after the
previous reply: its prelude (`isolation.limits_prelude`) sets the limits and enters the working
copy, then it waits for the command on fd 3 and `eval`s it, with the sandbox tag exported (the
runner carries no tag: tagged processes are exactly the commands'). Bash's start-up, several ms
under load, is so paid while the agent thinks. Simplification: a syntax error reads
"bash: eval: line N" instead of "bash: -c: line N".

The reply comes when the command exits (its output is then drained for at most GRACE_S, so a
background job holding the pipe cannot block it) or at the timeout. Either way every process of
the command is then SIGKILLed, background and `setsid` children included: in a pid namespace,
every process but the runner and the namespace's init; elsewhere every member of the sandbox's
pids cgroup, or every process carrying the tag. Output is kept as head + tail (`Capture`) while it
is read, so a command printing gigabytes costs no memory; the reply carries the kept bytes.
One command runs at a time. The runner is not dumpable, so commands (same uid) cannot reach its
pipes through /proc and forge replies. Commands run without address-space randomisation
(`fixed_layout`), so a rerun prints the same object addresses.

Needs Python >= 3.8 (posix_spawn with setsid).
"""

import json
import os
import select
import signal
import sys
import time

if __name__ != "__main__":  # in the jail, executor_wire's source comes first (see the docstring)
    from sandbox.executor_wire import REPORT_FD, Capture, Report, read_frame, write_all, write_frame

TYPE_CHECKING = False  # as in executor_wire: no `typing` in the jail; quoted annotations
if TYPE_CHECKING:
    import ctypes

    from sandbox.executor_wire import ReplyHeader, Request, RunnerConfig

GRACE_S = 0.1
"""How long output is still read after the command exits (a background job may hold the pipe)."""
KILL_ROUNDS = 100
READ_AND_RUN = "IFS= read -r -d '' __swe_rlvr_cmd <&3; exec 3<&-; eval \"$__swe_rlvr_cmd\""
"""A prepared shell, after its prelude and `export TAG=...`: read the command (NUL-terminated)
from fd 3, close fd 3, run it. The tag is exported by the shell itself, so an idle prepared shell
carries none in its /proc environ; its children do."""
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
ADDR_NO_RANDOMIZE = 0x0040000


# --------------------------------------------------------------------------- the runner


class Runner:
    def __init__(self, cfg: "RunnerConfig") -> None:
        self.cfg = cfg
        self.me = os.getpid()
        self.null = os.open(os.devnull, os.O_RDWR)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() when a child exits
        self.statuses: dict[int, int] = {}
        self.next: tuple[int, int, int, int] | None = None

    def run(self, req: "Request") -> "tuple[ReplyHeader, bytes]":
        start = time.monotonic()
        try:
            pid, output, command, report = self.take()
        except OSError as exc:
            message = (f"cannot start the command: {exc} (the sandbox's process limit is reached; "
                       "wait for background jobs to end)\n").encode()
            return self.reply(req, 126, False, Capture(req["limit"]), start, message)
        try:
            write_all(command, req["cmd"].encode("utf-8", "replace") + b"\0")
        except OSError:
            pass  # the shell is gone; its exit status says why
        os.close(command)
        stream = Report()
        capture, timed_out = self.pump(pid, output, start + req["timeout"], req["limit"], report, stream)
        self.kill_all(pid)
        stream.drain(report)
        os.close(output)
        os.close(report)
        status = self.wait(pid)
        code = 124 if timed_out else _exit_code(status)
        return self.reply(req, code, timed_out, capture, start, report=stream if req.get("report") else None)

    def prepare(self) -> None:
        """Start the next command's shell now, while the agent thinks: bash's own start-up
        (a few ms) is then off the command's path. Failures wait until a command needs it."""
        if self.next is None:
            try:
                self.next = self.fork()
            except OSError:
                pass

    def take(self) -> "tuple[int, int, int, int]":
        """The prepared shell if it is still waiting, else a new one: (pid, output, command fd,
        report fd)."""
        job, self.next = self.next, None
        if job is not None and self.idle_exit(job[0]):
            for fd in job[1:]:
                os.close(fd)
            job = None
        return job or self.fork()

    def idle_exit(self, pid: int) -> bool:
        """Whether a prepared shell died before it got its command (reaped if so)."""
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        return done != 0

    def fork(self) -> "tuple[int, int, int, int]":
        """Spawn a shell that waits for its command: (pid, output fd, command fd, report fd).
        posix_spawn (vfork) keeps this cheap; the shell's prelude sets the limits and enters the
        repo. The command's fd 4 is the write end of the report pipe (`REPORT_FD`)."""
        out_r, out_w = os.pipe()
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        dup2 = os.POSIX_SPAWN_DUP2
        script = "{}\nexport {}='{}'\n{}".format(self.cfg["prelude"], self.cfg["tag_var"],
                                              self.cfg["tag"].replace("'", ""), READ_AND_RUN)
        try:
            return os.posix_spawnp(
                "bash", ["bash", "-c", script], os.environ, setsid=True,
                file_actions=[(dup2, self.null, 0), (dup2, out_w, 1), (dup2, out_w, 2),
                              (dup2, cmd_r, 3), (dup2, rep_w, REPORT_FD)],
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD)), out_r, cmd_w, rep_r
        except OSError:
            os.close(out_r)
            os.close(cmd_w)
            os.close(rep_r)
            raise
        finally:
            os.close(out_w)
            os.close(cmd_r)
            os.close(rep_w)

    def pump(self, pid: int, fd: int, deadline: float, limit: int, report: int,
             stream: "Report") -> "tuple[Capture, bool]":
        """Read output (and the report pipe, into `stream`) until the command exited and the
        output pipe is drained (or GRACE_S passed since its exit), or until the deadline. Returns
        (capture, timed out)."""
        capture, eof = Capture(limit), False
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if exited_at is None and self.exited(pid):
                exited_at = now
            if exited_at is not None and (eof or now - exited_at > GRACE_S):
                return capture, False
            if now >= deadline:
                return capture, exited_at is None
            wait = deadline - now if exited_at is None else min(deadline - now, GRACE_S)
            fds = ([self.wake_r] if eof else [self.wake_r, fd]) + ([] if stream.eof else [report])
            ready = select.select(fds, [], [], wait)[0]
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            if report in ready:
                stream.read(report)
            if fd in ready:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    capture.add(chunk)
                else:
                    eof = True

    def exited(self, pid: int) -> bool:
        """Whether the command has exited. In a pid namespace every exited child is reaped here
        (orphans too, where this runner is the init); elsewhere the command stays a zombie until
        its group is killed, so its group id cannot be reused by a host process meanwhile."""
        if self.cfg["scope"] == "namespace":
            self.reap()
            return pid in self.statuses
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.statuses[pid] = status

    def wait(self, pid: int) -> int:
        """The command's wait status (it has been killed by now)."""
        if pid in self.statuses:
            return self.statuses.pop(pid)
        return os.waitpid(pid, 0)[1]

    def kill_all(self, pid: int) -> None:
        """SIGKILL the command's group, then every other process of the sandbox, until none
        is left."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        for _ in range(KILL_ROUNDS):
            others = self.others()
            if not others:
                break
            for other in others:
                try:
                    os.kill(other, signal.SIGKILL)
                except OSError:
                    pass
            self.reap_others(pid)
            time.sleep(0.001)
        self.reap_others(pid)

    def reap_others(self, pid: int) -> None:
        """Reap killed orphans where this runner is their parent (the namespace's init)."""
        if self.cfg["scope"] == "namespace":
            self.reap()
            self.statuses = {k: v for k, v in self.statuses.items() if k == pid}

    def others(self) -> "list[int]":
        """Live processes of the sandbox other than this runner (and the namespace's init)."""
        scope = self.cfg["scope"]
        if scope == "namespace":
            pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
            pids = [p for p in pids if p not in (1, self.me)]
        elif scope == "cgroup":
            pids = _cgroup_pids(self.cfg["cgroup"])
        else:
            pids = _tagged_pids("{}={}".format(self.cfg["tag_var"], self.cfg["tag"]))
        return [p for p in pids if p != self.me and _alive(p)]

    def reply(self, req: "Request", code: int, timed_out: bool, capture: Capture, start: float,
              message: bytes = b"", report: "Report | None" = None) -> "tuple[ReplyHeader, bytes]":
        head, tail = bytes(capture.head) + message, capture.tail_bytes()
        body = bytes(report.data) if report is not None else b""
        header: ReplyHeader = {"id": req["id"], "exit_code": code, "timed_out": timed_out,
                  "dropped": capture.dropped, "head": len(head), "tail": len(tail),
                  "duration_s": time.monotonic() - start, "report": len(body),
                  "report_dropped": report.dropped if report is not None else 0}
        return header, head + tail + body


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _alive(pid: int) -> bool:
    """False for a zombie or a vanished pid (a killed process not yet reaped by its parent)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _cgroup_pids(group: str) -> "list[int]":
    try:
        with open(os.path.join(group, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _tagged_pids(needle: str) -> "list[int]":
    entry, pids = needle.encode(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if entry in f.read().split(b"\0"):
                        pids.append(int(name))
            except OSError:
                pass
    return pids


def harden(cfg: "RunnerConfig") -> None:
    """Enter the jail's root and drop to its uid where the level asks for it
    (`drop_privileges`), die with the sandbox's owner, and keep commands (same uid) out of this
    process's fds and memory: a non-dumpable process's /proc entries are closed to them. Also
    turn address-space randomisation off for the commands (`fixed_layout`)."""
    parent = cfg.get("parent")
    try:
        import ctypes
        libc: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        libc = None
    drop_privileges(libc, cfg.get("chroot"), cfg.get("uid"))
    if libc is not None:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
            fixed_layout(libc)
        except (AttributeError, OSError):
            pass
    if parent and os.getppid() != parent:  # the owner died before the death signal was armed
        os._exit(1)


def drop_privileges(libc: "ctypes.CDLL | None", root: "str | None", uid: "int | None") -> None:
    """chroot into `root` (the `unshare` level's view), then become `uid`:`uid` with no groups,
    an empty capability bounding set and no_new_privs: the commands this runner starts can
    neither gain privileges nor leave the root. Failing any step ends the runner (a jail that
    did not drop never greets)."""
    if root:
        os.chroot(root)
        os.chdir("/")
    if uid is None:
        return
    if libc is None:
        sys.exit("cannot drop privileges: no ctypes")
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: ignored
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or os.getuid() != uid:
        sys.exit("cannot drop privileges")


def fixed_layout(libc: "ctypes.CDLL") -> None:
    """Set ADDR_NO_RANDOMIZE in this process's personality, which every command inherits across
    exec (as `setarch -R`): object addresses in their output (pytest prints `<generator object
    at 0x7f...>` in assertion messages) then repeat from run to run, and so do the agent's tokens.
    Randomisation protects nothing here: the commands are the untrusted party."""
    current = libc.personality(0xFFFFFFFF)  # query
    if current != -1:
        libc.personality(current | ADDR_NO_RANDOMIZE)


def main(argv: "list[str]") -> None:
    cfg = json.loads(argv[1])
    harden(cfg)
    requests, replies = os.dup(0), os.dup(1)  # non-inheritable: commands never see them
    runner = Runner(cfg)
    os.dup2(runner.null, 0)
    os.dup2(runner.null, 1)
    write_frame(replies, {"ready": True, "pid": os.getpid()})
    runner.prepare()
    while True:
        req = read_frame(requests)
        if req is None:  # the owner closed the pipe or died
            return
        header, payload = runner.run(req)
        write_frame(replies, header, payload)
        runner.prepare()


if __name__ == "__main__":
    main(sys.argv)
