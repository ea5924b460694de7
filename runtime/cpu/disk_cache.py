"""The cpu backend's object code on disk, so that a second process skips LLVM.

An entry is machine code this process will run, so the cache guarantees:

  1. **Only the user's own directory is used.** The directory (default
     `$XDG_CACHE_HOME/inplace-compiler/cpu`, else `~/.cache/inplace-compiler/cpu`;
     `COMPILER_CACHE_DIR` overrides, and `COMPILER_CACHE_DIR=` (empty) turns the cache off) is
     created with mode 0700, and so is every missing directory above it (the XDG spec's rule).
     A directory that is a symbolic link, is not a directory, that another user owns, or that
     its group or others can write is refused: the cache is off for this process and one
     `RuntimeWarning` says why. The checked directory is opened once (`O_NOFOLLOW`) and every
     file operation goes through that descriptor (`dir_fd`), so renaming a path component
     afterwards can't redirect the cache.
  2. **Only entries this user's compiler wrote are loaded.** Each entry carries an HMAC-SHA256
     under a random key of 32 bytes kept in the directory (`KEY_NAME`, mode 0600, created
     once: written to a private file and hard-linked into place, so two processes racing end
     with one key both use). The MAC covers the header (format, the entry's key, the
     object's size, the machine) and the object code, so an entry copied under another key, a
     forged one (another program's code under this key with a recomputed hash), a truncated
     or corrupted one is never loaded: the caller recompiles and the fresh entry replaces it.
     A key file that is not a regular file, that another user owns, that group or others can
     read or write, or that has the wrong length turns the cache off, with one warning.
     An entry is opened without following symlinks and without blocking (a FIFO must not hang
     the compile), and refused unless it is a regular file that this user owns and nobody
     else can write; a name that is not a regular file is recompiled with one warning.
  3. **The key names what the code depends on.** The key (`entry_key`) is a SHA-256 over the
     module's IR text (the graph, with the options that change code: sanitize, profiling),
     the optimisation level and exported names, the host CPU's name and features, the target
     triple and machine settings, the llvmlite and LLVM versions, and for a long program how
     the module was cut into parts (`jit.plan_parts`: one entry then holds the parts' object
     files, packed by `jit._pack`). The MAC sits in the same file as the object so that one
     rename publishes both.
  4. **Processes filling the cache at once are safe.** An entry is written to a private
     temporary file (`O_EXCL`, mode 0600) in the same directory and renamed over the entry's
     name (atomic on POSIX): a reader sees the old entry, no entry, or the whole new one.
     Two writers of one key write equivalent entries; the last rename wins.
  5. **Bounded size; only the cache's own files are deleted.** After each store, if the
     entries exceed `COMPILER_CACHE_MAX_BYTES` (default 1 GiB) the least recently used ones are
     removed (a hit refreshes an entry's mtime). Temporary files left by a killed process are
     removed after an hour. Pruning and `clear` delete only files the cache wrote: a regular
     file of this user named as an entry (64 hex digits, `.o`) or a temporary file, whose
     content starts with the entry magic; anything else in the directory (a `main.o` of a
     build directory the cache was pointed at) is left alone.

What it does not protect against: a process running as the same user can read the key and so
write entries that will be loaded; the cache is not a sandbox (README, "disk cache").

`STATS` counts what happened in this process (hits, misses, stores, and each refusal by
reason); the tests read it, `python -m compiler cache info` prints the directory's state and
`python -m compiler cache clear` empties it.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import threading
import time
import warnings
from collections import Counter

MAGIC_PREFIX = b"INPLACE-COMPILER-CPU-OBJECT"   # every format's entries start with it
MAGIC = MAGIC_PREFIX + b" 2\n"                   # format 1 (no MAC) entries are recompiled
FORMAT = 2
SUFFIX = ".o"
TMP_PREFIX = ".tmp-"
KEY_NAME = ".mac-key"
KEY_BYTES = 32
DEFAULT_MAX_BYTES = 1 << 30
STALE_TMP_SECONDS = 3600
# A store scans the directory again after this many stores of this process (other processes
# store there too) or STALE_TMP_SECONDS after its last scan, and whenever its own count says
# the entries may exceed the limit: `_prune_if_due`.
PRUNE_EVERY = 64
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.o\Z")
_TMP_NAME = re.compile(r"\.tmp-[0-9a-f]{16}\.(o|key)\Z")
_TAG_LEN = 64  # hex digits of the HMAC-SHA256

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

STATS: Counter = Counter()


class _Dir:
    """A checked cache directory: its descriptor (every file operation goes through it), the
    MAC key kept in it, and what the last full scan (`_prune`) found: the entries' bytes, and
    the bytes and stores this process added since (`_prune_if_due`)."""
    __slots__ = ("path", "fd", "mac_key", "scanned_bytes", "scanned_at", "added", "stores")

    def __init__(self, path: str, fd: int, mac_key: bytes):
        self.path, self.fd, self.mac_key = path, fd, mac_key
        self.scanned_bytes, self.scanned_at, self.added, self.stores = None, 0.0, 0, 0


class _Refused(Exception):
    pass


_lock = threading.Lock()
_checked_dirs: dict[str, _Dir | str] = {}  # path -> the usable directory, or why it is refused
_warned_entries: set = set()               # (directory, name) of non-regular entries warned of


def cache_dir() -> str | None:
    """The cache directory this process uses, or None when the cache is turned off."""
    env = os.environ.get("COMPILER_CACHE_DIR")
    if env is not None:
        return os.path.abspath(os.path.expanduser(env)) if env else None
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative path is invalid, ignore it
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "inplace-compiler", "cpu")


def entry_key(ir_text: str, exports, opt: int, machine: dict) -> str:
    """The SHA-256 naming the object code of `ir_text` built with these options on this
    machine (`machine`: jit.machine_description(): CPU, features, triple, versions)."""
    desc = {"format": FORMAT, "opt": opt, "exports": list(exports), "machine": machine,
            "ir": hashlib.sha256(ir_text.encode()).hexdigest()}
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()


# -- who owns what ----------------------------------------------------------------------------
def foreign(st: os.stat_result) -> str | None:
    """Why a file or directory with this stat must not be trusted, or None. Another owner, or
    write permission for group or others, means someone else could have put code there."""
    if st.st_uid != os.geteuid():
        return f"another owner: uid {st.st_uid}, not this user's {os.geteuid()}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by others: mode {stat.S_IMODE(st.st_mode):04o}"
    return None


def _makedirs_private(path: str):
    """Create `path` and every missing directory above it with mode 0700 (os.makedirs gives
    the ones above the default mode)."""
    parent = os.path.dirname(path)
    if parent != path and not os.path.isdir(parent):
        _makedirs_private(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def _open_dir(path: str) -> _Dir:
    """Check the directory and its key (creating both when missing); raises _Refused."""
    try:
        _makedirs_private(path)
        lst = os.lstat(path)
    except OSError as e:
        raise _Refused(f"unusable: {e.strerror}")
    if stat.S_ISLNK(lst.st_mode):
        raise _Refused("a symbolic link")
    if not stat.S_ISDIR(lst.st_mode):
        raise _Refused("not a directory")
    try:
        fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as e:  # replaced since the lstat
        raise _Refused(f"unusable: {e.strerror}")
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (lst.st_dev, lst.st_ino):
            raise _Refused("replaced while it was checked")
        why = foreign(st)
        if why:
            raise _Refused(why)
        return _Dir(path, fd, _mac_key(fd))
    except BaseException:
        os.close(fd)
        raise


def _mac_key(dfd: int) -> bytes:
    """The directory's MAC key, created when missing."""
    for attempt in range(20):
        try:
            kfd = os.open(KEY_NAME, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=dfd)
        except FileNotFoundError:
            try:
                _create_key(dfd)
            except OSError as e:  # a read-only directory, a full disk
                raise _Refused(f"key file {KEY_NAME}: can't be created: {e.strerror}")
            continue
        except OSError as e:  # ELOOP: a symlink; ENXIO: a socket
            raise _Refused(f"key file {KEY_NAME}: "
                           + ("a symbolic link" if e.errno == errno.ELOOP else e.strerror))
        try:
            st = os.fstat(kfd)
            if not stat.S_ISREG(st.st_mode):
                raise _Refused(f"key file {KEY_NAME}: not a regular file")
            if st.st_uid != os.geteuid():
                raise _Refused(f"key file {KEY_NAME}: another owner: uid {st.st_uid}, "
                               f"not this user's {os.geteuid()}")
            if st.st_mode & 0o077:
                raise _Refused(f"key file {KEY_NAME}: mode {stat.S_IMODE(st.st_mode):04o}, "
                               "group or others can read or write it (must be 0600)")
            data = os.read(kfd, KEY_BYTES + 1)
        except OSError as e:
            raise _Refused(f"key file {KEY_NAME}: {e.strerror}")
        finally:
            os.close(kfd)
        if len(data) == KEY_BYTES:
            return data
        if len(data) > KEY_BYTES or attempt >= 10:
            raise _Refused(f"key file {KEY_NAME}: {len(data)} bytes, not {KEY_BYTES}")
        time.sleep(0.01)  # being written by a process without hard links (see _create_key)
    raise _Refused(f"key file {KEY_NAME}: can't be created")


def _create_key(dfd: int):
    """Write a fresh key to a private file and hard-link it into place: link never replaces,
    so of two processes racing one key wins and both read it."""
    tmp, fd = _open_tmp(dfd, ".key")
    try:
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
        finally:
            os.close(fd)
        try:
            os.link(tmp, KEY_NAME, src_dir_fd=dfd, dst_dir_fd=dfd)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links: create it in place
            try:
                kfd = os.open(KEY_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                              | _CLOEXEC, 0o600, dir_fd=dfd)
            except FileExistsError:
                return
            try:
                os.write(kfd, secrets.token_bytes(KEY_BYTES))
            finally:
                os.close(kfd)
    finally:
        _unlink(dfd, tmp)


def _open_tmp(dfd: int, suffix: str) -> tuple[str, int]:
    """A new private (0600) file in the directory: (name, writable descriptor)."""
    while True:
        name = f"{TMP_PREFIX}{secrets.token_hex(8)}{suffix}"
        try:
            return name, os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                                 | _CLOEXEC, 0o600, dir_fd=dfd)
        except FileExistsError:
            continue


def _dir_for(path: str, stacklevel: int = 4) -> _Dir | None:
    """The checked directory at `path` (None when refused: warned once per directory)."""
    with _lock:
        d = _checked_dirs.get(path)
        if d is None:
            try:
                d = _open_dir(path)
            except _Refused as e:
                d = _checked_dirs[path] = str(e)  # recorded before the warning, which
                STATS["refused directory"] += 1   # may be raised as an error
                warnings.warn(f"compiler cache directory {path} refused ({d}): the disk cache is "
                              "off for this process (set COMPILER_CACHE_DIR to a directory of "
                              "your own, mode 0700, or to '' to turn the cache off)",
                              RuntimeWarning, stacklevel=stacklevel)
            _checked_dirs[path] = d
    return d if isinstance(d, _Dir) else None


def _usable_dir() -> _Dir | None:
    """The cache directory, created (mode 0700) when missing; None when the cache is off or
    the directory is refused (warned once per directory)."""
    path = cache_dir()
    return None if path is None else _dir_for(path)


def _reset():
    """Forget which directories were checked (tests change COMPILER_CACHE_DIR)."""
    with _lock:
        for d in _checked_dirs.values():
            if isinstance(d, _Dir):
                os.close(d.fd)
        _checked_dirs.clear()
        _warned_entries.clear()


# -- entries -----------------------------------------------------------------------------------
def _mac(mac_key: bytes, head_line: bytes, obj: bytes) -> bytes:
    m = hmac.new(mac_key, MAGIC, hashlib.sha256)
    m.update(head_line)
    m.update(obj)
    return m.hexdigest().encode()


def _entry_bytes(key: str, obj: bytes, machine: dict, mac_key: bytes) -> bytes:
    """magic line, JSON header line, MAC line (hex), object code."""
    head = {"format": FORMAT, "key": key, "size": len(obj), "machine": machine,
            "created": time.time()}
    head_line = json.dumps(head, sort_keys=True).encode() + b"\n"
    return MAGIC + head_line + _mac(mac_key, head_line, obj) + b"\n" + obj


def _parse(data: bytes, key: str, mac_key: bytes) -> tuple[bytes | None, str | None]:
    """(object code, None) for a whole entry of `key` this user's compiler wrote, else (None,
    why it is refused)."""
    if not data.startswith(MAGIC):
        return None, ("foreign: another format" if data.startswith(MAGIC_PREFIX)
                      else "corrupted: no header")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return None, "truncated: header"
    head_line = data[len(MAGIC):end + 1]
    try:
        head = json.loads(head_line)
    except ValueError:
        return None, "corrupted: header"
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("key") != key:
        return None, "foreign: another key or format"
    tag, obj = data[end + 1:end + 1 + _TAG_LEN], data[end + 2 + _TAG_LEN:]
    if len(tag) < _TAG_LEN or data[end + 1 + _TAG_LEN:end + 2 + _TAG_LEN] != b"\n":
        return None, "truncated: MAC" if len(data) < end + 2 + _TAG_LEN else "corrupted: MAC"
    if len(obj) != head.get("size"):
        return None, "truncated: code" if len(obj) < (head.get("size") or 0) else "corrupted: size"
    if not hmac.compare_digest(_mac(mac_key, head_line, obj), tag):
        return None, "unauthenticated: the MAC differs (not written by this user's compiler)"
    return obj, None


def entry_path(key: str) -> str | None:
    d = cache_dir()
    return None if d is None else os.path.join(d, key + SUFFIX)


def load(key: str) -> bytes | None:
    """The object code stored under `key`, or None (missing, refused, or cache off)."""
    d = _usable_dir()
    if d is None:
        return None
    name = key + SUFFIX
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=d.fd)
    except FileNotFoundError:
        STATS["miss"] += 1
        return None
    except OSError as e:
        return _refuse_special(d, name, "a symbolic link" if e.errno == errno.ELOOP else
                               "a socket" if e.errno == errno.ENXIO else e.strerror)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _refuse_special(d, name, _kind(st.st_mode))
        why = foreign(st)
        if why:
            return _refuse(why)
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
        obj, why = _parse(data, key, d.mac_key)
        if why:
            return _refuse(why)
        try:
            os.utime(fd)  # least recently used goes first when pruning
        except OSError:
            pass
    finally:
        os.close(fd)
    STATS["hit"] += 1
    return obj


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode)
            or stat.S_ISBLK(mode) else "not a regular file")


def _refuse(why: str):
    STATS["refused entry"] += 1
    STATS[f"refused: {why.split(':')[0]}"] += 1
    return None


def _refuse_special(d: _Dir, name: str, what: str):
    """Something other than a regular file at an entry's name: recompile, warn once."""
    if (d.path, name) not in _warned_entries:
        _warned_entries.add((d.path, name))
        warnings.warn(f"compiler cache entry {os.path.join(d.path, name)} is not a regular file "
                      f"({what}): it is never loaded, the program is compiled again",
                      RuntimeWarning, stacklevel=3)
    return _refuse("not a regular file")


def store(key: str, obj: bytes, machine: dict) -> bool:
    """Write the entry atomically; False when the cache is off or the write failed (a full
    disk, or a directory at the entry's name, must not fail the compile)."""
    d = _usable_dir()
    if d is None:
        return False
    entry = _entry_bytes(key, obj, machine, d.mac_key)
    try:
        tmp, fd = _open_tmp(d.fd, SUFFIX)
    except OSError:
        STATS["store failed"] += 1
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(entry)
        os.replace(tmp, key + SUFFIX, src_dir_fd=d.fd, dst_dir_fd=d.fd)
    except OSError:
        STATS["store failed"] += 1
        _unlink(d.fd, tmp)
        return False
    STATS["store"] += 1
    _prune_if_due(d, len(entry))
    return True


# -- what the cache wrote, and removing it ------------------------------------------------------
def _candidates(d: _Dir):
    """(name, lstat) of the regular files of this user named as entries or temporaries: all
    that pruning and clearing may consider (their content is checked before removal)."""
    out = []
    try:
        with os.scandir(d.fd) as it:
            for e in it:
                if _ENTRY_NAME.match(e.name) or _TMP_NAME.match(e.name):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                        out.append((e.name, st))
    except OSError:
        pass
    return out


def _written_by_cache(d: _Dir, name: str) -> bool:
    """Does the file hold what the cache writes there: an entry (any format's magic), or a
    temporary left by a killed writer (an entry's start, or empty; a key's 32 bytes)?"""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=d.fd)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False
        head = os.read(fd, len(MAGIC_PREFIX))
    except OSError:
        return False
    finally:
        os.close(fd)
    if not _TMP_NAME.match(name):
        return head == MAGIC_PREFIX
    if name.endswith(".key"):
        return st.st_size in (0, KEY_BYTES)
    return head == MAGIC_PREFIX or st.st_size == 0


def max_bytes() -> int:
    try:
        return int(os.environ.get("COMPILER_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES))
    except ValueError:
        return DEFAULT_MAX_BYTES


def prune(d: str | None = None, limit: int | None = None) -> int:
    """Remove stale temporary files, then least recently used entries until the rest fit in
    `limit` bytes. Returns how many files were removed. Only files the cache wrote."""
    cd = _dir_for(os.path.abspath(d), stacklevel=3) if d else _usable_dir()
    return 0 if cd is None else _prune(cd, limit)


def _prune_if_due(d: _Dir, size: int) -> None:
    """After a store of `size` bytes: scan and prune only when the entries may now exceed the
    limit, or PRUNE_EVERY stores or STALE_TMP_SECONDS after the last scan: a scan per store
    made N stores into one directory cost O(N^2) (the test suite's thousands of compiles per
    process spent about half their system time listing it)."""
    d.added += size
    d.stores += 1
    if d.scanned_bytes is None or d.scanned_bytes + d.added > max_bytes() \
            or d.stores >= PRUNE_EVERY or time.time() - d.scanned_at > STALE_TMP_SECONDS:
        _prune(d)


def _prune(d: _Dir, limit: int | None = None) -> int:
    limit = max_bytes() if limit is None else limit
    now, removed, entries = time.time(), 0, []
    for name, st in _candidates(d):
        if name.startswith(TMP_PREFIX):
            if now - st.st_mtime > STALE_TMP_SECONDS and _written_by_cache(d, name) \
                    and _unlink(d.fd, name):
                removed += 1
        else:
            entries.append((st.st_mtime, st.st_size, name))
    total = sum(size for _, size, _ in entries)
    for _, size, name in sorted(entries):
        if total <= limit:
            break
        if _written_by_cache(d, name) and _unlink(d.fd, name):
            removed += 1
            total -= size
    d.scanned_bytes, d.scanned_at, d.added, d.stores = total, now, 0, 0
    return removed


def _unlink(dfd: int, name: str) -> bool:
    try:
        os.unlink(name, dir_fd=dfd)
        return True
    except OSError:
        return False


def clear() -> int:
    """Remove every entry (and temporary file) the cache wrote; returns the count. Other files
    in the directory are left alone."""
    d = _usable_dir()
    if d is None:
        return 0
    return sum(_written_by_cache(d, n) and _unlink(d.fd, n) for n, _ in _candidates(d))


def info() -> dict:
    """The directory, whether it is used (and why not), its entries and their bytes, and how
    many other files it holds (the cache's key aside; `clear` leaves them)."""
    path = cache_dir()
    d = _usable_dir()
    entries, others = [], 0
    if d is not None:
        ours = {n for n, _ in _candidates(d) if _written_by_cache(d, n)}
        entries = [st for n, st in _candidates(d) if n in ours and not n.startswith(TMP_PREFIX)]
        try:
            others = sum(1 for n in os.listdir(d.fd) if n not in ours and n != KEY_NAME)
        except OSError:
            pass
    status = "off (COMPILER_CACHE_DIR is empty)" if path is None else \
        "in use" if d is not None else f"refused: {_checked_dirs.get(path)}"
    return {"directory": path, "status": status, "entries": len(entries),
            "bytes": sum(st.st_size for st in entries), "max_bytes": max_bytes(),
            "other files": others}
