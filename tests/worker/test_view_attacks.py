"""Attacks on lre from inside a real action, through a real lre, per backend.

Each test starts ``python -m lre up`` (once per backend and identity, shared
by the attacks), sends the attack as an ordinary action over gRPC and then
looks, from outside, whether it worked. Identities (``lre_as.SETUPS``): lre
run as the user running the tests (root in CI), and lre itself run as
``nobody`` (``setpriv``), where only ``userns`` and ``portable`` can work.
Each runs with ``action_user: "root"`` (the default: lre's own user), and
pidns as root also with ``"unprivileged"`` (``nobody``; elsewhere that
value is lre's own user again, the same as the default).
Every outcome goes into docs/security.md's table through the ``attack``
marker (``tests/_support/attack_report.py``, ``$LRE_ATTACK_RESULTS``); a
protection a setup is known not to have (``_known_missing``) is expected
not to hold, and the test fails if it unexpectedly does (so the table stays
true both ways).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lre.digest import digest_of
from lre.proto import re_pb2
from tests._support.attack_report import known_missing
from tests._support.configs import config_text, local_worker, simple_scheduler
from tests._support.lre_as import SETUPS, require_setup
from tests._support.reapi import Client, digest
from tests._support.servers import free_port
from tests._support.whole_lre import serving, whole_lre

_VIEWLESS = {
    "rewrite-cas-file",
    "append-action-cache-log",
    "append-input-journal",
    "swap-running-input",
    "plant-idle-symlink",
    "proc-lre-mem-environ",
    "inplace-input-write",
    "unmount-mask-write-cas",
    "remount-host-writable",
    "read-lre-state",
}
#: What only an action holding root's administrative capabilities could do
#: (mount, open_by_handle_at, write kernel settings): under portable run by
#: root the action has them all.
_ROOT_POWERS = {"open-by-handle-write-cas", "mount-cgroup-tree", "write-kernel-setting"}

#: The setups each lre is started in: (backend, lre's user, action_user).
#: "unprivileged" differs from the default only under pidns as root.
VIEW_SETUPS = (*((b, i, "root") for b, i in SETUPS), ("pidns", "own", "unprivileged"))


def _known_missing(lre: Lre, attack: str) -> bool:
    """Protections a setup does not have (docs/security.md): portable makes
    no view, and its actions of a root lre hold every capability; an action
    that is lre's own user reads what lre's user may read (only pidns run by
    root with action_user "unprivileged" gives actions a user of their own);
    under userns run by root, an action (uid 0 mapped to itself) writes
    host kernel settings through its /proc."""
    if lre.backend == "portable" and (
        attack in _VIEWLESS or (attack in _ROOT_POWERS and lre.identity == "own")
    ):
        return True
    if (lre.backend, lre.identity, attack) == ("userns", "own", "write-kernel-setting"):
        # Not yet locked: a root lre's userns action is uid 0 mapped to
        # itself, and uid 0 writes /proc/sys by its mode (docs/security.md).
        return True
    own_user = not (lre.backend == "pidns" and lre.action_user == "unprivileged")
    return attack == "read-lre-users-own-file" and own_user


@dataclass
class Lre:
    """A running lre and what an attacker can learn about it (its config is
    readable by actions, so its directories are no secret)."""

    backend: str
    identity: str
    #: ``workers[].local.action_user`` of this lre
    action_user: str
    home: Path
    pid: int
    client: Client

    @property
    def work(self) -> Path:
        return self.home / "work" / "local"

    def cas_file(self, hash_: str) -> Path:
        for parent, _dirs, files in os.walk(self.home / "cas"):
            for name in files:
                if hash_ in name:
                    return Path(parent) / name
        raise AssertionError(f"blob {hash_} not found under {self.home / 'cas'}")


def _config(
    home: Path,
    backend: str,
    port: int,
    action_user: str,
    extra_worker: str = "",
    extra_global: str = "",
) -> str:
    fields = f', containment: "{backend}", action_user: "{action_user}"{extra_worker}'
    return config_text(
        home,
        schedulers=[simple_scheduler()],
        workers=[
            local_worker(
                home, max_inflight=4, resources='cpu_count: 4, memory_budget: "2GiB"', fields=fields
            )
        ],
        front="queue",
        port=port,
        extra_global=extra_global,
    )


def _start(backend: str, identity: str, action_user: str, extra_worker: str = "") -> Iterator[Lre]:
    """Start lre under ``backend`` as ``identity`` with the workers'
    ``action_user`` and ``extra_worker`` fields (each starting with a comma;
    also used by tests/worker/test_view_dev_attacks.py and
    test_writable_attacks.py)."""
    require_setup(backend, identity)
    if identity == "nobody" and os.geteuid() != 0:
        pytest.fail("running lre as nobody needs root (setpriv)")
    home = Path(tempfile.mkdtemp(prefix=f"lre-attack-{backend}-{identity}-", dir="/var/tmp"))
    port = free_port()
    prefix: list[str] = []
    if identity == "nobody":
        shutil.chown(home, "nobody", "nogroup")
        os.chmod(home, 0o700)
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "util-linux setpriv is needed to run lre as nobody"
        prefix = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    config = _config(home, backend, port, action_user, extra_worker)
    try:
        with (
            whole_lre(home, config, port, prefix=prefix) as running,
            Client(f"127.0.0.1:{port}") as client,
        ):
            serving(running, client)
            yield Lre(backend, identity, action_user, home, running.process.pid, client)
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(
    scope="module", params=VIEW_SETUPS, ids=[f"{b}-{i}-actions-{a}" for b, i, a in VIEW_SETUPS]
)
def lre(request: pytest.FixtureRequest) -> Iterator[Lre]:
    backend, identity, action_user = request.param
    yield from _start(backend, identity, action_user)


def _verdict(
    lre: Lre, attack: str, held: bool, detail: str = "", *, missing: bool | None = None
) -> None:
    """Record the outcome and check it against what the backend promises:
    ``missing`` says whether this protection is known to be missing there
    (default: ``_known_missing``)."""
    where = f"{lre.backend} as {lre.identity} (action_user {lre.action_user})"
    if missing is None:
        missing = _known_missing(lre, attack)
    if missing:
        assert not held, f"{attack} held under {where}: update _known_missing and the docs"
        known_missing()
    else:
        assert held, f"{attack} worked under {where}: {detail}"


#: The first line every attack's program writes to its stderr: an attack
#: whose program never ran (not in the view, not on PATH) would otherwise
#: look like one that was held.
_RAN = b"attack helper ran\n"


def _ran(lre: Lre, response: re_pb2.ExecuteResponse) -> bytes:
    """The stderr of an attack that ran (its marker removed); fails the
    test when the program never started."""
    assert response.status.code == 0, response.status
    err = lre.client.stderr(response.result)
    assert err.startswith(_RAN), f"the attack's program never ran: {err!r}"
    return err[len(_RAN) :]


def _sh(lre: Lre, script: str, **prepare: object) -> tuple[int, bytes, bytes]:
    response = lre.client.run(
        ["/bin/sh", "-c", f"echo {_RAN.decode().strip()} >&2\n{script}"], **prepare
    )
    err = _ran(lre, response)
    return response.result.exit_code, lre.client.stdout(response.result), err


def _python_run(lre: Lre, script: str, *args: str, **prepare: object) -> re_pb2.ExecuteResponse:
    """``script`` run by the action's Python with ``args``, checked to have
    started (``_ran``)."""
    marked = f"import sys\nsys.stderr.write({_RAN.decode()!r}); sys.stderr.flush()\n{script}"
    response = lre.client.run(["python3", "-c", marked, *args], **prepare)
    _ran(lre, response)
    return response


def _python(lre: Lre, script: str, **prepare: object) -> bytes:
    return lre.client.stdout(_python_run(lre, script, **prepare).result)


def _unique(tag: str) -> bytes:
    return f"{tag} {os.urandom(8).hex()}\n".encode()


@pytest.mark.attack("view: an action rewrites a CAS file it was never given")
def test_rewrite_a_cas_file_of_a_blob_never_given(lre: Lre) -> None:
    blob = _unique("stored")
    lre.client.upload([blob])
    path = lre.cas_file(digest(blob).hash)
    forged = b"X" * (len(blob) - 1) + b"\n"
    _sh(lre, f"chmod u+w {path}; printf '{forged.decode().strip()}\\n' > {path}")
    stored = lre.client.read_blob(digest_of(blob))
    _verdict(lre, "rewrite-cas-file", stored in (blob, None) and path.read_bytes() == blob)


@pytest.mark.attack("view: an action appends to the action cache's log")
def test_append_to_the_action_cache_log(lre: Lre) -> None:
    _sh(lre, "true")  # the log exists once a result was stored
    log = next((lre.home / "ac").rglob("actions.log"))
    before = log.read_bytes()
    _sh(lre, f"echo forged-record >> {log}")
    _verdict(
        lre,
        "append-action-cache-log",
        log.read_bytes().startswith(before) and b"forged-record" not in log.read_bytes(),
    )


@pytest.mark.attack("view: an action appends to the linked-inputs journal")
def test_append_to_the_linked_inputs_journal(lre: Lre) -> None:
    journal = lre.work / "linked-inputs.journal"
    _sh(lre, f'echo \'["S", 1, "{"0" * 64}", 1, false, "/etc/passwd"]\' >> {journal}')
    text = journal.read_text() if journal.exists() else ""
    _verdict(lre, "append-input-journal", "/etc/passwd" not in text)


@pytest.mark.attack("view: an action swaps another running action's input")
def test_swap_another_running_actions_staged_input(lre: Lre) -> None:
    original = _unique("victim input")
    results: list[bytes] = []

    def victim() -> None:
        _, out, _ = _sh(lre, "sleep 2; cat victim.txt", inputs={"victim.txt": original})
        results.append(out)

    thread = threading.Thread(target=victim)
    thread.start()
    time.sleep(1.0)
    _sh(lre, f"for f in {lre.work}/*/root/victim.txt; do rm -f $f; echo swapped > $f; done")
    thread.join()
    _verdict(lre, "swap-running-input", results == [original], repr(results))


@pytest.mark.attack("view: an action writes a stored output through a held descriptor")
def test_write_another_actions_output_through_a_held_descriptor(lre: Lre) -> None:
    """One action hands its output's descriptor to another over a Unix socket
    and ends; the other writes through it after lre stored the output."""
    name = f"lre-attack-{os.urandom(6).hex()}"
    receiver = f"""
import array, os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.bind("\\0{name}"); s.listen()
c, _ = s.accept()
fds = array.array("i")
msg, anc, _, _ = c.recvmsg(1, socket.CMSG_LEN(4))
fds.frombytes(anc[0][2][:4])
time.sleep(2)
os.pwrite(fds[0], b"TAMPERED", 0)
print("wrote")
"""
    sender = f"""
import array, os, socket, time
fd = os.open("out.txt", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"genuine output!!\\n")
for _ in range(100):
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect("\\0{name}"); break
    except OSError:
        time.sleep(0.05)
c.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
"""
    done: list[bytes] = []

    def hold() -> None:
        done.append(_python(lre, receiver))

    thread = threading.Thread(target=hold)
    thread.start()
    time.sleep(0.5)
    response = _python_run(lre, sender, output_paths=["out.txt"])
    thread.join()
    (out,) = response.result.output_files
    stored = lre.client.read(out.digest)
    _verdict(
        lre,
        "write-stored-output-via-descriptor",
        stored == b"genuine output!!\n",
        f"{stored!r} {done!r}",
    )


@pytest.mark.attack("view: an action plants a symlink in an idle action directory")
def test_plant_a_symlink_in_an_idle_action_directory(lre: Lre) -> None:
    _sh(lre, "true")  # idle directories exist
    target = lre.home / "planted-target"
    plant = (
        f"for d in {lre.work}/a*; do ln -s {target} $d/stdout.new && "
        f"mv -f $d/stdout.new $d/stdout; ln -s {target} $d/root.new; done"
    )
    lre.client.run(["/bin/sh", "-c", plant])  # what lre answers does not matter
    planted = _symlinks_in_action_directories(lre.work)
    _verdict(lre, "plant-idle-symlink", planted == [], repr(planted))


def _symlinks_in_action_directories(work: Path) -> list[Path]:
    """Symlinks directly inside ``work``'s action directories. lre removes
    released directories in the background (one the attack made unrecyclable,
    its own included, may vanish while this looks): a directory gone
    meanwhile holds nothing lre could hand out, so it is skipped."""
    found: list[Path] = []
    for directory in work.glob("a*"):
        try:
            with os.scandir(directory) as entries:
                found.extend(Path(e.path) for e in entries if e.is_symlink())
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found


@pytest.mark.attack("view: an action opens /proc/<lre>/mem and environ")
def test_open_lres_memory_and_environment(lre: Lre) -> None:
    script = f"""
import sys
got = []
for name, mode in (("environ", "rb"), ("mem", "r+b")):
    try:
        open("/proc/{lre.pid}/" + name, mode).close(); got.append(name)
    except OSError as error:
        pass
print(" ".join(got))
"""
    out = _python(lre, script)
    _verdict(lre, "proc-lre-mem-environ", out.strip() == b"", out.decode())


@pytest.mark.attack("view: an action writes an input in place through /proc/self/fd")
def test_write_an_input_in_place_through_proc_self_fd(lre: Lre) -> None:
    original = _unique("genuine input")
    script = f"""
import os
fd = os.open("data", os.O_RDONLY)
st = os.fstat(fd)
path = "/proc/self/fd/%d" % fd
os.chmod(path, 0o644)
out = os.open(path, os.O_WRONLY)
os.pwrite(out, b"Z" * {len(original) - 1} + b"\\n", 0)
os.chmod(path, st.st_mode & 0o7777)
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
"""
    _python(lre, script, inputs={"data": original})
    _, later, _ = _sh(lre, "cat data", inputs={"data": original})
    stored = lre.client.read_blob(digest_of(original))
    _verdict(
        lre,
        "inplace-input-write",
        later == original and stored in (original, None),
        f"{later!r} {stored!r}",
    )


@pytest.mark.attack("identity: an action unmounts a mask and rewrites a CAS file")
def test_unmount_a_mask_and_rewrite_a_cas_file(lre: Lre) -> None:
    """The view's masks and read-only host are mounts in the action's own
    namespace: an action holding CAP_SYS_ADMIN there (root without a user
    of its own) unmounts the mask over the CAS, makes the mount below
    writable again and rewrites a blob it was never given."""
    blob = _unique("masked")
    lre.client.upload([blob])
    path = lre.cas_file(digest(blob).hash)
    forged = "F" * (len(blob) - 1)
    cas = lre.home / "cas"
    _sh(
        lre,
        f'umount -l {cas}; mount -o remount,bind,rw "$(findmnt -n -o TARGET -T {path})"; '
        f"chmod u+w {path}; printf '{forged}\\n' > {path}",
    )
    stored = lre.client.read_blob(digest_of(blob))
    _verdict(
        lre,
        "unmount-mask-write-cas",
        stored in (blob, None) and path.read_bytes() == blob,
        repr(path.read_bytes()),
    )


@pytest.mark.attack("identity: an action remounts the host writable")
def test_remount_the_host_writable(lre: Lre) -> None:
    """A directory of the host anyone may write: the view shows it
    read-only, unless the action remounts it writable."""
    target = Path(tempfile.mkdtemp(prefix="lre-attack-remount-", dir="/var/tmp"))
    try:
        os.chmod(target, 0o777)
        _sh(
            lre,
            f'mount -o remount,bind,rw "$(findmnt -n -o TARGET -T {target})"; '
            f"echo forged > {target}/forged",
        )
        _verdict(lre, "remount-host-writable", not (target / "forged").exists())
    finally:
        shutil.rmtree(target, ignore_errors=True)


@pytest.mark.attack("identity: an action reads a file only lre's user may read")
def test_read_a_file_only_lres_user_may_read(lre: Lre) -> None:
    """A host file of lre's user, mode 0600 (outside lre's directories, so
    no view hides it): an action running as lre's user reads it."""
    secret = _unique("secret")
    handle, name = tempfile.mkstemp(prefix="lre-attack-secret-", dir="/var/tmp")
    try:
        os.write(handle, secret)
        os.close(handle)
        if lre.identity == "nobody":
            shutil.chown(name, "nobody", "nogroup")
        os.chmod(name, 0o600)
        _, out, _ = _sh(lre, f"cat {name} || true")
        _verdict(lre, "read-lre-users-own-file", secret not in out, repr(out))
    finally:
        os.unlink(name)


def _file_handle(path: Path) -> bytes:
    """``struct file_handle`` of ``path`` as ``name_to_handle_at`` gives it
    (``handle_bytes``, ``handle_type``, the handle), read here on the host."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint32.from_buffer(buffer).value = 128
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, str(path).encode(), buffer, ctypes.byref(mount_id), 0) != 0:
        raise OSError(ctypes.get_errno(), f"name_to_handle_at {path}")
    size = ctypes.c_uint32.from_buffer(buffer).value
    return buffer.raw[: 8 + size]


@pytest.mark.attack("identity: an action opens a CAS file by handle and rewrites it")
def test_open_a_cas_file_by_handle_and_rewrite_it(lre: Lre) -> None:
    """The classic escape from a mount namespace: ``open_by_handle_at``
    (CAP_DAC_READ_SEARCH) opens a file by its inode's handle, whatever
    covers its path, through any mount of its filesystem (the action's
    writable TMPDIR is on the CAS's), so the masks do not hide it."""
    blob = _unique("by handle")
    lre.client.upload([blob])
    path = lre.cas_file(digest(blob).hash)
    forged = b"H" * (len(blob) - 1) + b"\n"
    script = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
handle = ctypes.create_string_buffer(bytes.fromhex("{_file_handle(path).hex()}"))
mount = os.open(os.environ["TMPDIR"], os.O_RDONLY | os.O_DIRECTORY)
for flags in (os.O_RDWR, os.O_RDONLY):
    fd = libc.open_by_handle_at(mount, handle, flags)
    if fd >= 0:
        if flags == os.O_RDWR:
            os.pwrite(fd, {forged!r}, 0)
        print("read", os.pread(fd, 4096, 0))
        break
    print("open_by_handle_at", flags, os.strerror(ctypes.get_errno()))
"""
    out = _python(lre, script)
    _verdict(
        lre,
        "open-by-handle-write-cas",
        path.read_bytes() == blob and blob.strip() not in out,
        out.decode(errors="replace"),
    )


@pytest.mark.attack("identity: an action mounts the host's cgroup tree and changes it")
def test_mount_the_hosts_cgroup_tree_and_change_it(lre: Lre) -> None:
    """The view shows /sys read-only, but an action holding CAP_SYS_ADMIN
    mounts the host's cgroup2 hierarchy afresh, writable (it shares lre's
    cgroup namespace), and could then move, freeze or starve any process of
    the host, lre included; here it only makes a cgroup."""
    name = f"lre-attack-{os.urandom(4).hex()}"
    _, out, err = _sh(lre, f"mkdir -p m && mount -t cgroup2 none m && mkdir m/{name}; umount m")
    with tempfile.TemporaryDirectory(prefix="lre-attack-cgroup-") as where:
        found = subprocess.run(
            [
                *("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c"),
                f"mount -t cgroup2 none {where} && [ -d {where}/{name} ] && "
                f"rmdir {where}/{name} && echo found",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    _verdict(lre, "mount-cgroup-tree", "found" not in found, (out + err).decode())


@pytest.mark.attack("identity: an action writes a kernel setting of the host")
def test_write_a_kernel_setting_of_the_host(lre: Lre) -> None:
    """uid 0 may write most of /proc/sys whatever its capabilities (the
    kernel checks the file's mode: root's bits for uid 0), and settings such
    as kernel.core_pattern or kernel.modprobe name a program the kernel then
    runs as root outside any namespace. This one is harmless: the NIS
    domain name of the host's UTS namespace, which the action shares."""
    setting = Path("/proc/sys/kernel/domainname")
    before = setting.read_text()
    token = f"lre-attack-{os.urandom(4).hex()}"
    try:
        _, out, err = _sh(lre, f"echo {token} > {setting}")
        after = setting.read_text()
    finally:
        setting.write_text(before)
    _verdict(lre, "write-kernel-setting", token not in after, (out + err).decode())


_READ_ATTACK = """
import os, sys
secret = sys.argv[1].encode()
for path in sys.argv[2:]:
    routes = [path, "/proc/self/root" + path, "/proc/1/root" + path]
    # the same file by a path relative to the action's own directory
    up = os.path.relpath(path, os.getcwd())
    routes.append(up)
    for route in routes:
        try:
            with open(route, "rb") as handle:
                data = handle.read()
        except OSError as error:
            print("refused", route, error.errno)
            continue
        print("LEAKED" if secret in data else "read-without-secret", route)
print("attack ran")
"""


@pytest.mark.attack("view: an action reads lre's CAS, action cache log, state and tokens")
def test_read_lres_own_files_by_every_path(lre: Lre) -> None:
    """Writes are stopped by the read-only host already; this one checks
    that lre's directories are not there at all (the masks), by reading."""
    secret = f"secret-{os.urandom(8).hex()}"
    blob = f"{secret} in a blob never given\n".encode()
    lre.client.upload([blob])
    cas = lre.cas_file(digest(blob).hash)
    _sh(lre, "true")  # the action cache's log exists once a result was stored
    ac_log = next((lre.home / "ac").rglob("actions.log"))
    with ac_log.open("ab") as handle:  # a secret in the log itself
        handle.write(f"{secret}\n".encode())
    state = lre.home / "state" / "token"
    state.parent.mkdir(exist_ok=True)
    state.write_text(secret)
    if lre.identity == "nobody":
        shutil.chown(state, "nobody", "nogroup")
    response = _python_run(lre, _READ_ATTACK, secret, str(cas), str(ac_log), str(state))
    text = lre.client.stdout(response.result).decode()
    assert "attack ran" in text, text  # the attack really ran
    assert text.count("\n") >= 13, text  # every route of every file was tried
    _verdict(lre, "read-lre-state", "LEAKED" not in text, text)
