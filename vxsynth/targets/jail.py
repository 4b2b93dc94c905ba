"""Run an untrusted native program in a jail, so that it can hurt only itself.

The program runs under bubblewrap in new user, pid, mount, network, ipc, uts and cgroup namespaces: it sees only
itself (read-only), its inputs (read-only) and one empty output directory; no /usr, no shell, no /proc of the host,
no network. The output directory is a tmpfs of a fixed size and number of files (the run's disk quota), mounted by an
outer namespace that copies what the program left there to the host folder after it exits; a run that fills it
fails. A seccomp allowlist (a BPF program built here from the policy's system call names) kills it on any other
system call, and fork/vfork are refused (clone only with CLONE_THREAD). Resource limits bound CPU time,
address space, file size and open files. On timeout the whole process group is killed (bubblewrap's pid namespace
takes every process the program started with it). Every way the run can end is a `JailResult` with a reason.
"""

from __future__ import annotations

import functools
import os
import platform
import resource
import shutil
import signal
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vxsynth.targets import proc
from vxsynth.targets.proc import ProcResult

UNISTD = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
AUDIT_ARCH_X86_64 = 0xC000003E
CLONE_THREAD = 0x00010000
RET_KILL, RET_ALLOW, RET_ENOSYS = 0x80000000, 0x7FFF0000, 0x00050000 | 38
LD_W_ABS, JEQ_K, JSET_K, JGE_K, RET_K = 0x20, 0x15, 0x45, 0x35, 0x06

# What a statically linked, multi-threaded program of the host executor needs: start-up, malloc, threads,
# barriers, reading its inputs and writing its output (glibc 2.36 and 2.39). clone3 and rseq answer ENOSYS.
ALLOW = ("read", "write", "openat", "close", "fstat", "newfstatat", "lseek", "mmap", "munmap", "mprotect", "brk",
         "madvise", "futex", "rt_sigprocmask", "rt_sigaction", "sigaltstack", "set_robust_list", "set_tid_address",
         "arch_prctl", "prlimit64", "getrandom", "sched_yield", "sched_getaffinity", "getpid", "gettid", "tgkill",
         "exit", "exit_group", "execve", "clock_gettime", "clock_nanosleep", "nanosleep", "readlink", "readlinkat", "wait4")
ENOSYS = ("clone3", "rseq")


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 600            # CPU seconds over all threads
    address_space_mb: int = 8192
    file_mb: int = 1024         # largest file it may write
    output_mb: int = 256        # all it writes together: the size of its output tmpfs
    output_files: int = 64      # files (inodes) of its output tmpfs
    open_files: int = 64


class JailError(RuntimeError):
    """The jail itself cannot run on this machine (not the program's fault)."""


@functools.lru_cache(maxsize=1)
def syscall_numbers() -> dict[str, int]:
    """x86-64 system call numbers from the kernel's own header."""
    if platform.machine() != "x86_64":
        raise JailError(f"the jail's seccomp filter is built for x86-64; this machine is {platform.machine()}")
    if not UNISTD.exists():
        raise JailError(f"{UNISTD} missing: install linux-libc-dev (the kernel's system call numbers)")
    out = {}
    for line in UNISTD.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_") and parts[2].isdigit():
            out[parts[1][5:]] = int(parts[2])
    return out


def seccomp_filter(allow=ALLOW, enosys=ENOSYS) -> bytes:
    """A classic-BPF seccomp program: x86-64 only, `allow` allowed, `enosys` answered ENOSYS, clone only for
    threads, everything else kills the process."""
    nr = syscall_numbers()
    unknown = [s for s in (*allow, *enosys) if s not in nr]
    if unknown:
        raise JailError(f"unknown system calls in the jail policy: {', '.join(unknown)}")
    ins = [(LD_W_ABS, 0, 0, 4), (JEQ_K, 1, 0, AUDIT_ARCH_X86_64), (RET_K, 0, 0, RET_KILL),
           (LD_W_ABS, 0, 0, 0), (JGE_K, 0, 1, 0x40000000), (RET_K, 0, 0, RET_KILL)]   # x32 ABI numbers
    for name in enosys:
        ins += [(JEQ_K, 0, 1, nr[name]), (RET_K, 0, 0, RET_ENOSYS)]
    # clone: allowed only with CLONE_THREAD in its flags (args[0], low word at offset 16): threads, never processes
    ins += [(JEQ_K, 0, 4, nr["clone"]), (LD_W_ABS, 0, 0, 16), (JSET_K, 0, 1, CLONE_THREAD), (RET_K, 0, 0, RET_ALLOW),
            (RET_K, 0, 0, RET_KILL)]
    for name in allow:
        ins += [(JEQ_K, 0, 1, nr[name]), (RET_K, 0, 0, RET_ALLOW)]
    ins.append((RET_K, 0, 0, RET_KILL))
    return b"".join(struct.pack("<HBBI", *i) for i in ins)


def available() -> str | None:
    """None when jailed runs work here, else why not (one line)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) not found: install it (apt-get install bubblewrap); candidate code never runs unjailed"
    if shutil.which("mount") is None:
        return "mount not found: install util-linux (the jail's output quota is a tmpfs it mounts)"
    try:
        syscall_numbers()
    except JailError as e:
        return str(e)
    return None


def _limits(lim: Limits):
    def apply():
        os.setsid()
        for res, val in ((resource.RLIMIT_CPU, lim.cpu_s), (resource.RLIMIT_AS, lim.address_space_mb << 20),
                         (resource.RLIMIT_FSIZE, lim.file_mb << 20), (resource.RLIMIT_NOFILE, lim.open_files),
                         (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(res, (val, val))
    return apply


# The outer namespace (user + mount, root with every capability there only): mount the quota tmpfs, run the jail
# (bwrap "$@") with its console output in files of that tmpfs, then move those files to the stage folder, copy the
# rest out and record the jail's exit status, the tmpfs's free blocks and inodes and the copy-out's status.
OUTER = """m=$1 o=$2 s=$3 opts=$4; shift 4
mount -t tmpfs -o "$opts" vxout "$m" || exit 1
"$@" >"$m/.stdout" 2>"$m/.stderr"; rc=$?
free=$(stat -f -c '%f %d' "$m")
mv "$m/.stdout" "$m/.stderr" "${s%/*}/" && cp -RP --sparse=always "$m/." "$o/"; echo "$rc $free $?" > "$s"
exit $rc"""
CONSOLE_TAIL = 1 << 16          # bytes of the program's stdout and stderr kept


def run(program: Path, args: list[str], inputs: dict[str, Path], outdir: Path, timeout_s: float,
        limits: Limits = Limits()) -> ProcResult:
    """Run `program args...` jailed. Inside, the program is /prog, input files are /in/<name> (read-only) and the
    working directory /out is a tmpfs of `limits.output_mb` whose files are copied to `outdir` after the run (must be
    empty and private to this run); its stdout and stderr are files there too, of which the last 64 KB come back. Never raises for the program's behaviour; raises JailError when the jail cannot
    be set up on this machine."""
    why = available()
    if why:
        raise JailError(why)
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vxjail-") as stage, tempfile.TemporaryFile() as bpf:
        mnt, status = Path(stage) / "out", Path(stage) / "status"
        mnt.mkdir()
        bpf.write(seccomp_filter())
        bpf.flush()
        bpf.seek(0)
        fd = bpf.fileno()
        opts = f"size={limits.output_mb << 20},nr_inodes={limits.output_files},mode=0700,nosuid,nodev,noexec"
        cmd = ["bwrap", "--unshare-user", "--uid", "0", "--gid", "0", "--cap-add", "ALL", "--bind", "/", "/",
               "--die-with-parent", "sh", "-c", OUTER, "sh", str(mnt), str(outdir), str(status), opts,
               "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
               "--ro-bind", str(program), "/prog", "--bind", str(mnt), "/out", "--chdir", "/out"]
        for name, path in inputs.items():
            cmd += ["--ro-bind", str(path), f"/in/{name}"]
        cmd += ["--seccomp", str(fd), "/prog", *args]
        r = proc.run(cmd, timeout_s, setup=_limits(limits), pass_fds=(fd,))
        done = status.read_text().split() if status.exists() else []
        r.stdout, r.stderr = _tail(Path(stage) / ".stdout"), r.stderr + _tail(Path(stage) / ".stderr")
    if r.returncode is None:
        return r                                     # timed out or not started: its reason is set
    if len(done) != 4:
        r.ok, r.error = False, f"jail set-up failed: {proc.tail(r.stderr, 200)}"
    elif "0" in done[1:3]:
        r.ok, r.error = False, f"output quota filled ({limits.output_mb} MB, {limits.output_files} files)"
    elif done[3] != "0":
        r.ok, r.error = False, "its outputs could not be copied out of the jail"
    else:
        r.error = _why(r.returncode, r.stderr)
    return r


def _tail(f: Path) -> str:
    """The end of a console file of the program (all of its output counts against the quota, only this is read)."""
    if not f.exists():
        return ""
    with f.open("rb") as h:
        h.seek(max(0, f.stat().st_size - CONSOLE_TAIL))
        return h.read().decode(errors="replace")


def _why(rc: int, err: str) -> str:
    """bubblewrap reports the program's fate as exit status (128 + signal when it was killed)."""
    if rc == 0:
        return ""
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else 0
    if sig == signal.SIGSYS:
        return "killed by the seccomp filter (a forbidden system call)"
    if sig == signal.SIGXCPU:
        return "CPU time limit exceeded"
    if sig == signal.SIGXFSZ:
        return "file size limit exceeded"
    if sig:
        return f"killed by signal {signal.Signals(sig).name}" if sig in signal.valid_signals() else f"killed by signal {sig}"
    if "bwrap:" in err:
        return f"jail set-up failed: {err.strip().splitlines()[-1][:200]}"
    return f"exit status {rc}"
