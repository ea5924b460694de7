"""The cpu backend's object code on disk, so that a second process skips LLVM.

An entry is machine code this process will run, so the cache guarantees:

  1. **Only the user's own files are loaded.** The directory (default
     `$XDG_CACHE_HOME/inplace-compiler/cpu`, else `~/.cache/inplace-compiler/cpu`;
     `COMPILER_CACHE_DIR` overrides, and `COMPILER_CACHE_DIR=` (empty) turns the cache off) is
     created with mode 0700. A directory that is not a directory, that another user owns, or
     that its group or others can write is refused: the cache is off for this process and a
     `RuntimeWarning` says why. An entry is opened without following symlinks and refused
     unless it is a regular file that this user owns and nobody else can write.
  2. **Only a whole, matching entry is loaded.** The key (`entry_key`) is a SHA-256 over
     everything the object code depends on: the module's IR text (the graph, with the options
     that change code: sanitize, profiling), the optimisation level and exported names, the
     host CPU's name and features, the target triple and machine settings, and the llvmlite
     and LLVM versions. An entry is one file: a magic line, a JSON header holding the key, the
     object's size and its SHA-256, then the object code. A truncated or corrupted entry
     (size or hash differ) or a foreign one (another key, format or llvmlite in its header)
     is never loaded: the caller recompiles and the fresh entry replaces it. The hash sits in
     the same file as the object (rather than in a second file beside it) so that one rename
     publishes both: there is no moment at which they disagree.
  3. **Processes filling the cache at once are safe.** An entry is written to a private
     temporary file (`mkstemp`, mode 0600) in the same directory and renamed over the entry's
     name (`os.replace`, atomic on POSIX): a reader sees the old entry, no entry, or the whole
     new one. Two writers of one key write the same bytes; the last rename wins.
  4. **Bounded size.** After each store, if the entries exceed `COMPILER_CACHE_MAX_BYTES`
     (default 1 GiB) the least recently used ones are removed (a hit refreshes an entry's
     mtime). Temporary files left by a killed process are removed after an hour.

`STATS` counts what happened in this process (hits, misses, stores, and each refusal by
reason); the tests read it, `python -m compiler cache info` prints the directory's state and
`python -m compiler cache clear` empties it.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
import warnings
from collections import Counter

MAGIC = b"INPLACE-COMPILER-CPU-OBJECT\n"
FORMAT = 1
SUFFIX = ".o"
TMP_PREFIX = ".tmp-"
DEFAULT_MAX_BYTES = 1 << 30
STALE_TMP_SECONDS = 3600

STATS: Counter = Counter()
_checked_dirs: dict[str, str | None] = {}  # path -> why it is refused (None: usable)


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


def _usable_dir() -> str | None:
    """The cache directory, created (mode 0700) when missing; None when the cache is off or
    the directory is refused (warned once per directory)."""
    path = cache_dir()
    if path is None:
        return None
    if path in _checked_dirs:
        return None if _checked_dirs[path] else path
    why = None
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
        if not stat.S_ISDIR(st.st_mode):
            why = "not a directory"
        else:
            why = foreign(st)
    except OSError as e:
        why = f"unusable: {e.strerror}"
    _checked_dirs[path] = why
    if why:
        STATS["refused directory"] += 1
        warnings.warn(f"compiler cache directory {path} refused ({why}): the disk cache is off for "
                      "this process (set COMPILER_CACHE_DIR to a directory of your own, mode "
                      "0700, or to '' to turn the cache off)", RuntimeWarning, stacklevel=3)
        return None
    return path


def _reset():
    """Forget which directories were checked (tests change COMPILER_CACHE_DIR)."""
    _checked_dirs.clear()


# -- entries -----------------------------------------------------------------------------------
def _header(key: str, obj: bytes, machine: dict) -> bytes:
    head = {"format": FORMAT, "key": key, "size": len(obj),
            "sha256": hashlib.sha256(obj).hexdigest(), "machine": machine,
            "created": time.time()}
    return MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n"


def _parse(data: bytes, key: str) -> tuple[bytes | None, str | None]:
    """(object code, None) for a whole entry of `key`, else (None, why it is refused)."""
    if not data.startswith(MAGIC):
        return None, "corrupted: no header"
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return None, "truncated: header"
    try:
        head = json.loads(data[len(MAGIC):end])
    except ValueError:
        return None, "corrupted: header"
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("key") != key:
        return None, "foreign: another key or format"
    obj = data[end + 1:]
    if len(obj) != head.get("size"):
        return None, "truncated: code" if len(obj) < (head.get("size") or 0) else "corrupted: size"
    if hashlib.sha256(obj).hexdigest() != head.get("sha256"):
        return None, "corrupted: hash"
    return obj, None


def entry_path(key: str) -> str | None:
    d = cache_dir()
    return None if d is None else os.path.join(d, key + SUFFIX)


def load(key: str) -> bytes | None:
    """The object code stored under `key`, or None (missing, refused, or cache off)."""
    d = _usable_dir()
    if d is None:
        return None
    path = os.path.join(d, key + SUFFIX)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
    except FileNotFoundError:
        STATS["miss"] += 1
        return None
    except OSError as e:  # ELOOP: a symlink
        return _refuse(f"not a regular file: {e.strerror}")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return _refuse("not a regular file")
        why = foreign(st)
        if why:
            return _refuse(why)
        data = f.read()
    obj, why = _parse(data, key)
    if why:
        return _refuse(why)
    STATS["hit"] += 1
    try:
        os.utime(path)  # least recently used goes first when pruning
    except OSError:
        pass
    return obj


def _refuse(why: str):
    STATS["refused entry"] += 1
    STATS[f"refused: {why.split(':')[0]}"] += 1
    return None


def store(key: str, obj: bytes, machine: dict) -> bool:
    """Write the entry atomically; False when the cache is off or the write failed (a full
    disk must not fail the compile)."""
    d = _usable_dir()
    if d is None:
        return False
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=TMP_PREFIX, suffix=SUFFIX)
    except OSError:
        STATS["store failed"] += 1
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_header(key, obj, machine))
            f.write(obj)
        os.replace(tmp, os.path.join(d, key + SUFFIX))
    except OSError:
        STATS["store failed"] += 1
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    STATS["store"] += 1
    prune(d)
    return True


def _entries(d: str):
    """(path, stat) of the entries and temporary files in `d` (nothing else is touched)."""
    out = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name.endswith(SUFFIX) and e.is_file(follow_symlinks=False):
                    try:
                        out.append((e.path, e.stat(follow_symlinks=False)))
                    except OSError:
                        pass
    except OSError:
        pass
    return out


def max_bytes() -> int:
    try:
        return int(os.environ.get("COMPILER_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES))
    except ValueError:
        return DEFAULT_MAX_BYTES


def prune(d: str | None = None, limit: int | None = None) -> int:
    """Remove stale temporary files, then least recently used entries until the rest fit in
    `limit` bytes. Returns how many files were removed."""
    d = d or _usable_dir()
    if d is None:
        return 0
    limit = max_bytes() if limit is None else limit
    now, removed, entries = time.time(), 0, []
    for path, st in _entries(d):
        if os.path.basename(path).startswith(TMP_PREFIX):
            if now - st.st_mtime > STALE_TMP_SECONDS and _unlink(path):
                removed += 1
        else:
            entries.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        if _unlink(path):
            removed += 1
            total -= size
    return removed


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def clear() -> int:
    """Remove every entry (and temporary file) of the cache directory; returns the count."""
    d = _usable_dir()
    return 0 if d is None else sum(_unlink(p) for p, _ in _entries(d))


def info() -> dict:
    """The directory, whether it is used (and why not), its entries and their bytes."""
    path = cache_dir()
    d = _usable_dir()
    entries = [] if d is None else [
        st for p, st in _entries(d) if not os.path.basename(p).startswith(TMP_PREFIX)]
    status = "off (COMPILER_CACHE_DIR is empty)" if path is None else \
        "in use" if d is not None else f"refused: {_checked_dirs.get(path)}"
    return {"directory": path, "status": status, "entries": len(entries),
            "bytes": sum(st.st_size for st in entries), "max_bytes": max_bytes()}
