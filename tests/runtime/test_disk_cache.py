"""The cpu backend's disk cache (runtime/cpu/disk_cache.py): a second process links the stored
object code and runs no LLVM; an entry that is truncated, corrupted, another key's, another
user's or writable by others is never loaded (the program is compiled afresh and gives its own
answer); the key follows the options and the machine; processes filling the cache at once are
safe. "LLVM ran" is counted by the backend's own hook (`jit.STATS["llvm"]`), and the
subprocess that must hit also has its LLVM entry point replaced by one that raises."""
import ctypes
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import warnings
from collections import OrderedDict

import numpy as np
import pytest

import compiler as cc
from runtime.cpu import disk_cache, jit
from tests.backends import AVAILABLE

pytestmark = pytest.mark.skipif("cpu" not in AVAILABLE, reason="the cpu backend can't run here")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory and a fresh in-memory cache (so each compile reaches the disk)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(d))
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    disk_cache._reset()
    yield d
    disk_cache._reset()


def _module(k: int) -> str:
    """A one-function module, run(x) = x * k + 1: its answer says which code ran."""
    return (f"define i64 @run(i64 %x) {{\n  %y = mul i64 %x, {k}\n  %z = add i64 %y, 1\n"
            f"  ret i64 %z\n}}\n")


def _compile_and_call(ir: str, x: int = 5, opt: int = 3) -> int:
    jit._cache.clear()  # the fixture's private in-memory cache: go to the disk every time
    compiled = jit.compile_ir(ir, ["run"], opt=opt)
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compiled.address("run"))(x)


def _counts():
    return {k: jit.STATS[k] for k in ("llvm", "hit", "miss", "store", "refused entry")}


def _delta(before):
    now = _counts()
    return {k: now[k] - before[k] for k in now}


def _entries(cache_dir):
    return [p for p in cache_dir.iterdir() if p.suffix == ".o"]


def _entry(cache_dir):
    (entry,) = _entries(cache_dir)
    return entry


def test_in_process_miss_then_hit_and_the_entry_is_private(cache):
    before = _counts()
    assert _compile_and_call(_module(7)) == 36
    assert _delta(before) == {"llvm": 1, "hit": 0, "miss": 1, "store": 1, "refused entry": 0}
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    entry = _entry(cache)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    before = _counts()
    assert _compile_and_call(_module(7)) == 36
    assert _delta(before) == {"llvm": 0, "hit": 1, "miss": 0, "store": 0, "refused entry": 0}
    # the hit's optimised IR is still there for whoever asks (optimised again on demand)
    assert "mul i64" in jit._cache[next(iter(jit._cache))].optimized_ir


@pytest.mark.parametrize("damage", ["flip a byte of the code", "truncate the code",
                                    "truncate the header", "drop the magic", "append bytes"])
def test_a_damaged_entry_is_compiled_again_and_replaced(cache, damage):
    _compile_and_call(_module(11))
    entry = _entry(cache)
    data = bytearray(entry.read_bytes())
    if damage == "flip a byte of the code":
        data[-20] ^= 0x40
    elif damage == "truncate the code":
        data = data[:len(data) - 100]
    elif damage == "truncate the header":
        data = data[:len(disk_cache.MAGIC) + 10]
    elif damage == "drop the magic":
        data = data[len(disk_cache.MAGIC):]
    else:
        data += b"\0" * 16
    entry.write_bytes(bytes(data))
    before = _counts()
    assert _compile_and_call(_module(11)) == 56
    assert _delta(before) == {"llvm": 1, "hit": 0, "miss": 0, "store": 1, "refused entry": 1}
    before = _counts()  # the fresh entry replaced the damaged one
    assert _compile_and_call(_module(11)) == 56
    assert _delta(before)["hit"] == 1 and _delta(before)["llvm"] == 0


def test_another_programs_entry_under_this_key_is_never_loaded(cache):
    # The entry of run(x) = 3x + 1 copied to the name of run(x) = 4x + 1's key: it is whole
    # and its hash matches, but its header names another key, so it is refused.
    _compile_and_call(_module(3))
    three = _entry(cache)
    key4 = disk_cache.entry_key(_module(4), ["run"], 3, jit.machine_description())
    (cache / (key4 + ".o")).write_bytes(three.read_bytes())
    before = _counts()
    assert _compile_and_call(_module(4)) == 21   # 4 * 5 + 1: its own code, not 3x + 1's
    assert _delta(before)["refused entry"] == 1 and _delta(before)["llvm"] == 1
    assert jit.STATS["refused: foreign"] >= 1


def test_an_entry_others_can_write_is_refused(cache):
    _compile_and_call(_module(5))
    os.chmod(_entry(cache), 0o666)
    before = _counts()
    assert _compile_and_call(_module(5)) == 26
    assert _delta(before) == {"llvm": 1, "hit": 0, "miss": 0, "store": 1, "refused entry": 1}
    assert stat.S_IMODE(_entry(cache).stat().st_mode) == 0o600  # replaced by a private one


def test_an_entry_another_user_owns_is_refused(cache, monkeypatch):
    _compile_and_call(_module(6))
    # Simulated: the files stay ours, this process now runs as another uid (the directory was
    # accepted before, as it would be after another user had planted the entry).
    uid = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    before = _counts()
    assert _compile_and_call(_module(6)) == 31
    assert _delta(before)["refused entry"] == 1 and _delta(before)["llvm"] == 1
    assert jit.STATS["refused: another owner"] >= 1


def test_a_symlinked_entry_is_refused(cache, tmp_path):
    _compile_and_call(_module(8))
    entry = _entry(cache)
    target = tmp_path / "elsewhere.o"
    entry.rename(target)
    entry.symlink_to(target)
    before = _counts()
    with pytest.warns(RuntimeWarning, match="is not a regular file .a symbolic link."):
        assert _compile_and_call(_module(8)) == 41
    assert _delta(before)["refused entry"] == 1 and _delta(before)["llvm"] == 1


@pytest.mark.parametrize("why", ["writable by others", "owned by another user"])
def test_a_directory_others_can_write_or_own_turns_the_cache_off(tmp_path, monkeypatch, why):
    d = tmp_path / "shared"
    d.mkdir()
    if why == "writable by others":
        os.chmod(d, 0o777)
    else:
        uid = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: uid + 1)
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(d))
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    disk_cache._reset()
    try:
        before = _counts()
        with pytest.warns(RuntimeWarning, match=f"{d} refused .*the disk cache is off"):
            assert _compile_and_call(_module(9)) == 46
        assert _compile_and_call(_module(9)) == 46  # warned once; still compiled each time
        assert _delta(before) == {"llvm": 2, "hit": 0, "miss": 0, "store": 0,
                                  "refused entry": 0}
        assert list(d.iterdir()) == []
        assert disk_cache.info()["status"].startswith("refused: ")
    finally:
        disk_cache._reset()


def test_empty_cache_dir_turns_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILER_CACHE_DIR", "")
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    disk_cache._reset()
    before = _counts()
    assert _compile_and_call(_module(10)) == 51
    assert _compile_and_call(_module(10)) == 51
    assert _delta(before) == {"llvm": 2, "hit": 0, "miss": 0, "store": 0, "refused entry": 0}
    assert disk_cache.cache_dir() is None and disk_cache.info()["status"].startswith("off")


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("COMPILER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.cache_dir() == str(tmp_path / "inplace-compiler" / "cpu")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid per the spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path))
    assert disk_cache.cache_dir() == str(tmp_path / ".cache" / "inplace-compiler" / "cpu")


def test_the_key_follows_the_options_and_the_machine(cache, monkeypatch):
    before = _counts()
    _compile_and_call(_module(12), opt=3)
    _compile_and_call(_module(12), opt=0)   # another optimisation level: another entry
    assert _delta(before) == {"llvm": 2, "hit": 0, "miss": 2, "store": 2, "refused entry": 0}
    assert len(_entries(cache)) == 2
    # another host CPU (or llvmlite version): a miss, never the other machine's code
    machine = dict(jit.machine_description(), cpu="some-other-cpu")
    monkeypatch.setitem(jit._state, "machine", machine)
    before = _counts()
    _compile_and_call(_module(12), opt=3)
    assert _delta(before)["miss"] == 1 and _delta(before)["llvm"] == 1
    base = jit.machine_description()
    keys = {disk_cache.entry_key(_module(12), ["run"], 3, dict(base, **change))
            for change in ({}, {"features": "+avx2"}, {"llvmlite": "0.0.1"}, {"llvm": [1]})}
    assert len(keys) == 4


def test_sanitize_changes_the_code_and_so_the_key(cache):
    def f(x):  # the matmuls keep values in arena buffers that die (fusion can't take them)
        return ((x @ x).exp() @ x).sum()
    x = np.linspace(-1, 1, 16).reshape(4, 4)
    before = _counts()
    plain = cc.compile(f, backend="cpu", sanitize=False)
    sanitized = cc.compile(f, backend="cpu", sanitize=True)
    assert plain.lower(x).source != sanitized.lower(x).source
    plain, sanitized = plain(x), sanitized(x)
    assert _delta(before)["store"] == 2
    np.testing.assert_array_equal(plain, sanitized)
    before = _counts()
    jit._cache.clear()
    again = cc.compile(f, backend="cpu", sanitize=True)(x)
    assert _delta(before) == {"llvm": 0, "hit": 1, "miss": 0, "store": 0, "refused entry": 0}
    np.testing.assert_array_equal(again, sanitized)


def test_prune_removes_least_recently_used_entries_and_stale_temporaries(cache):
    for k in (20, 21, 22):
        _compile_and_call(_module(k))
    entries = sorted(_entries(cache), key=lambda p: p.stat().st_mtime)
    for age, p in zip((300, 200, 100), entries):  # oldest first
        os.utime(p, (p.stat().st_atime, p.stat().st_mtime - age))
    # what a writer killed mid-write leaves: a temporary holding the start of an entry
    stale = cache / (disk_cache.TMP_PREFIX + "0123456789abcdef.o")
    stale.write_bytes(entries[0].read_bytes()[:100])
    os.utime(stale, (0, 0))
    newest_two = sum(p.stat().st_size for p in entries[1:])
    assert disk_cache.prune(str(cache), limit=newest_two) == 2  # the temporary and the oldest
    assert sorted(_entries(cache)) == sorted(entries[1:]) and not stale.exists()
    assert disk_cache.clear() == 2 and _entries(cache) == []
    assert [p.name for p in cache.iterdir()] == [disk_cache.KEY_NAME]  # the key stays



def test_stores_scan_the_directory_once_per_prune_every_yet_keep_the_limit(cache, monkeypatch):
    """A scan of the whole directory after every store made a long session quadratic: stores
    scan it every PRUNE_EVERY stores, and still whenever their bytes may pass the limit."""
    scans = []
    real = disk_cache._candidates
    monkeypatch.setattr(disk_cache, "_candidates", lambda d: scans.append(1) or real(d))
    monkeypatch.setattr(disk_cache, "PRUNE_EVERY", 8)
    for k in range(40):
        assert disk_cache.store(f"{k:064x}", b"x" * 1000, {"m": 1})
    assert len(scans) == 1 + (40 - 1) // 8  # the first store, then every 8th after it
    size = _entries(cache)[0].stat().st_size
    monkeypatch.setenv("COMPILER_CACHE_MAX_BYTES", str(45 * size))
    for k in range(40, 50):  # 50 entries against room for 45: the store that passes it prunes
        assert disk_cache.store(f"{k:064x}", b"x" * 1000, {"m": 1})
    assert len(_entries(cache)) <= 45 and f"{49:064x}.o" in {p.name for p in _entries(cache)}

# -- other processes ---------------------------------------------------------------------------
CHILD = r"""
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
import compiler as cc
import compiler.nn.functional as F
from runtime.cpu import jit
if {forbid_llvm!r}:
    def _no_llvm(*a, **k):
        raise AssertionError("LLVM ran in a process that should have hit the disk cache")
    jit._llvm_compile = _no_llvm

def mlp(x, w1, w2):
    return (F.relu(x @ w1) @ w2).tanh().sum(axis=1)

def norm(x):
    return (x - x.mean(axis=-1, keepdim=True)) * 2.0

rng = np.random.default_rng(0)
x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32, 4)))
out = [cc.compile(mlp, backend="cpu")(x, w1, w2).tolist(),
       cc.compile(norm, backend="cpu")(x).tolist()]
print(json.dumps({{"out": out, "stats": dict(jit.STATS)}}))
"""


def _child(cache_dir, forbid_llvm=False, wait=True):
    env = dict(os.environ, COMPILER_CACHE_DIR=str(cache_dir))
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(root=ROOT,
                                                                 forbid_llvm=forbid_llvm)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return _result(proc) if wait else proc


def _result(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_second_process_links_the_stored_code_and_runs_no_llvm(tmp_path):
    first = _child(tmp_path / "c")
    assert first["stats"]["llvm"] == 2 and first["stats"]["store"] == 2
    assert first["stats"].get("hit", 0) == 0
    second = _child(tmp_path / "c", forbid_llvm=True)
    assert second["stats"].get("llvm", 0) == 0 and second["stats"]["hit"] == 2
    assert second["out"] == first["out"]   # the same native code: bit-identical results
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 32), (32, 4)))
    want = np.tanh(np.maximum(x @ w1, 0) @ w2).sum(axis=1)
    np.testing.assert_allclose(second["out"][0], want, rtol=1e-5)


def test_two_processes_filling_the_cache_at_once(tmp_path):
    d = tmp_path / "c"
    procs = [_child(d, wait=False) for _ in range(2)]
    results = [_result(p) for p in procs]
    assert results[0]["out"] == results[1]["out"]
    names = sorted(p.name for p in d.iterdir() if p.name != disk_cache.KEY_NAME)
    assert len(names) == 2 and all(n.endswith(".o") and not n.startswith(".") for n in names)
    third = _child(d, forbid_llvm=True)   # whatever rename won, the entries are whole
    assert third["stats"]["hit"] == 2 and third["out"] == results[0]["out"]


WRITER = r"""
import sys
sys.path.insert(0, {root!r})
from runtime.cpu import disk_cache
payload = bytes(range(256)) * 16384       # 4 MiB: a write takes long enough to be caught
for _ in range({n}):
    assert disk_cache.store({key!r}, payload, {{"m": 1}})
"""

READER = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
from runtime.cpu import disk_cache
payload = bytes(range(256)) * 16384
seen = {{"hit": 0, "none": 0}}
deadline = time.time() + 60
while not os.path.exists(disk_cache.entry_path({key!r})) and time.time() < deadline:
    time.sleep(0.001)   # from the first rename on, every read must be the whole entry
for _ in range({n}):
    obj = disk_cache.load({key!r})
    if obj is None:
        seen["none"] += 1
    else:
        assert obj == payload
        seen["hit"] += 1
print(json.dumps(dict(seen, refused=disk_cache.STATS["refused entry"])))
"""


def test_readers_never_see_a_half_written_entry(tmp_path):
    # Two processes rewrite one entry over and over while a third reads it from the moment
    # the first rename published it: every read is the whole entry, never a partial one.
    d = tmp_path / "c"
    env = dict(os.environ, COMPILER_CACHE_DIR=str(d))
    key = "ab" * 32
    run = [sys.executable, "-c"]
    writers = [subprocess.Popen(run + [WRITER.format(root=ROOT, key=key, n=60)], env=env,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    reader = subprocess.Popen(run + [READER.format(root=ROOT, key=key, n=200)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = _result(reader)
    for w in writers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    assert seen == {"hit": 200, "none": 0, "refused": 0}
    # no temporary file left behind; the three processes created one key and all used it
    assert sorted(p.name for p in d.iterdir()) == sorted([key + ".o", disk_cache.KEY_NAME])


def test_cache_command_line(tmp_path):
    env = dict(os.environ, COMPILER_CACHE_DIR=str(tmp_path / "c"))
    _child(tmp_path / "c")

    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "compiler", "cache", *args], env=env,
                             cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout
    info = cli("info")
    assert str(tmp_path / "c") in info and "entries: 2" in info and "in use" in info
    assert "removed 2 entries" in cli("clear")
    assert "entries: 0" in cli("info")


def test_the_suite_does_not_use_the_users_cache():
    assert disk_cache.cache_dir() != os.path.join(os.path.expanduser("~"), ".cache",
                                                  "inplace-compiler", "cpu")
    assert os.path.basename(disk_cache.cache_dir()).startswith("inplace-compiler-test-cache-")


def test_no_warning_for_a_private_directory(cache):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _compile_and_call(_module(30))


# -- issue 22: the disk cache holds code that will run -----------------------------------------
FOREIGN = {  # files a build directory holds that the cache never wrote
    "main.o": b"\x7fELF main object of the user's build",
    "a" * 64 + ".o": b"\x7fELF an object that merely has an entry's name",
    disk_cache.TMP_PREFIX + "0123456789abcdef.o": b"not the start of an entry",
    "notes.txt": b"keep me",
}


def _plant_foreign(d):
    d.mkdir(mode=0o700, exist_ok=True)
    for name, data in FOREIGN.items():
        (d / name).write_bytes(data)
        os.utime(d / name, (0, 0))  # old: a stale temporary's age, the least recently used
    (d / "sub.o").mkdir()
    (d / "sub.o" / "inside").write_bytes(b"x")


def _assert_foreign_intact(d):
    for name, data in FOREIGN.items():
        assert (d / name).read_bytes() == data, name
    assert (d / "sub.o" / "inside").read_bytes() == b"x"


def test_prune_and_clear_delete_only_what_the_cache_wrote(cache):
    # COMPILER_CACHE_DIR aimed at a build directory: main.o and the rest must survive
    _plant_foreign(cache)
    for k in (40, 41):
        _compile_and_call(_module(k))
    ours = [p for p in _entries(cache) if p.name not in FOREIGN and p.is_file()]
    assert len(ours) == 2
    assert disk_cache.prune(str(cache), limit=0) == 2   # every entry, nothing else
    assert not any(p.exists() for p in ours)
    _assert_foreign_intact(cache)
    _compile_and_call(_module(42))
    assert disk_cache.info()["entries"] == 1 and disk_cache.info()["other files"] == 5
    assert disk_cache.clear() == 1
    _assert_foreign_intact(cache)
    assert disk_cache.info()["entries"] == 0


def test_cache_clear_command_leaves_a_build_directorys_files(tmp_path):
    d = tmp_path / "build"
    _plant_foreign(d)
    _child(d)
    env = dict(os.environ, COMPILER_CACHE_DIR=str(d))
    out = subprocess.run([sys.executable, "-m", "compiler", "cache", "clear"], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "removed 2 entries" in out.stdout and "5 other files left alone" in out.stdout
    _assert_foreign_intact(d)


def test_a_symlinked_cache_directory_is_refused(tmp_path, monkeypatch):
    # another user's symlink in a shared directory must not aim the cache (and clear) elsewhere
    target = tmp_path / "someone-elses-build"
    _plant_foreign(target)
    link = tmp_path / "cache"
    link.symlink_to(target)
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(link))
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    disk_cache._reset()
    try:
        before = _counts()
        with pytest.warns(RuntimeWarning, match=r"cache refused \(a symbolic link\): the disk "
                                                 r"cache is off"):
            assert _compile_and_call(_module(43)) == 216
        assert _compile_and_call(_module(43)) == 216   # warned once, compiled each time
        assert _delta(before) == {"llvm": 2, "hit": 0, "miss": 0, "store": 0, "refused entry": 0}
        assert disk_cache.clear() == 0 and disk_cache.prune(limit=0) == 0
        assert disk_cache.info()["status"] == "refused: a symbolic link"
        assert sorted(p.name for p in target.iterdir()) == sorted([*FOREIGN, "sub.o"])
        _assert_foreign_intact(target)
        out = subprocess.run([sys.executable, "-m", "compiler", "cache", "clear"],
                             env=dict(os.environ), cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 1 and "refused: a symbolic link; nothing removed" in out.stdout
        _assert_foreign_intact(target)
    finally:
        disk_cache._reset()


def test_the_cache_root_and_missing_parents_are_created_0700(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPILER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    disk_cache._reset()
    old = os.umask(0o022)   # the common umask: os.makedirs would give the parents 0755
    try:
        assert _compile_and_call(_module(44)) == 221
    finally:
        os.umask(old)
        disk_cache._reset()
    for d in ("xdg", "xdg/inplace-compiler", "xdg/inplace-compiler/cpu"):
        assert stat.S_IMODE(os.stat(tmp_path / d).st_mode) == 0o700, d
    assert len(_entries(tmp_path / "xdg" / "inplace-compiler" / "cpu")) == 1


def _within(seconds, work, unblock=None):
    """work() in a thread: a regression that blocks fails the test instead of hanging the
    suite (opening the FIFO for writing releases a reader blocked in open)."""
    out = {}
    t = threading.Thread(target=lambda: out.update(value=work()), daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        if unblock is not None:
            os.close(os.open(unblock, os.O_WRONLY | os.O_NONBLOCK))
        t.join(seconds)
        pytest.fail(f"the compile blocked for {seconds} s")
    return out["value"]


def test_a_fifo_entry_does_not_hang_and_is_recompiled(cache):
    _compile_and_call(_module(45))
    entry = _entry(cache)
    entry.unlink()
    os.mkfifo(entry)
    before = _counts()
    with pytest.warns(RuntimeWarning, match=r"is not a regular file \(a FIFO\)") as rec:
        assert _within(60, lambda: _compile_and_call(_module(45)), unblock=entry) == 226
    assert len([w for w in rec if "regular file" in str(w.message)]) == 1
    assert _delta(before) == {"llvm": 1, "hit": 0, "miss": 0, "store": 1, "refused entry": 1}
    assert stat.S_ISREG(os.lstat(entry).st_mode)   # the fresh entry replaced the FIFO
    before = _counts()
    assert _compile_and_call(_module(45)) == 226
    assert _delta(before)["hit"] == 1 and _delta(before)["llvm"] == 0


def test_a_directory_entry_is_recompiled_with_one_warning(cache):
    _compile_and_call(_module(46))
    entry = _entry(cache)
    entry.unlink()
    entry.mkdir()
    (entry / "inside").write_bytes(b"x")
    before = _counts()
    with pytest.warns(RuntimeWarning, match=r"is not a regular file \(a directory\)") as rec:
        assert _compile_and_call(_module(46)) == 231
        assert _compile_and_call(_module(46)) == 231
    assert len([w for w in rec if "regular file" in str(w.message)]) == 1
    assert _delta(before) == {"llvm": 2, "hit": 0, "miss": 0, "store": 0, "refused entry": 2}
    assert (entry / "inside").read_bytes() == b"x"   # not the cache's: left alone


def _forge(how, key, obj, machine):
    """An entry under `key` holding another program's code, made by someone who can write the
    file but does not hold this directory's MAC key."""
    if how == "MAC under another key":
        return disk_cache._entry_bytes(key, obj, machine, os.urandom(32))
    head = {"format": disk_cache.FORMAT, "key": key, "size": len(obj), "machine": machine,
            "sha256": hashlib.sha256(obj).hexdigest(), "created": 0.0}
    # the format-1 entry (item 7's attack on it), header recomputed
    return disk_cache.MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n" + obj


@pytest.mark.parametrize("how", ["plain SHA-256 in the header", "MAC under another key"])
def test_a_forged_entry_is_never_loaded(cache, how):
    # x * 100 + 1's object code placed under x * 2 + 1's key with a header to match
    jit._cache.clear()
    hundred = jit.compile_ir(_module(100), ["run"]).object_code
    machine = jit.machine_description()
    key2 = disk_cache.entry_key(_module(2), ["run"], 3, machine)
    (cache / (key2 + ".o")).write_bytes(_forge(how, key2, hundred, machine))
    before = _counts()
    assert _compile_and_call(_module(2)) == 11    # 2 * 5 + 1, not 100 * 5 + 1
    assert _delta(before) == {"llvm": 1, "hit": 0, "miss": 0, "store": 1, "refused entry": 1}
    before = _counts()  # replaced by this user's own entry
    assert _compile_and_call(_module(2)) == 11 and _delta(before)["hit"] == 1


def test_an_entry_from_another_cache_directory_is_refused(cache, tmp_path, monkeypatch):
    # the key is per directory: a copied entry, whole and of the same program, is not loaded
    _compile_and_call(_module(47))
    other = tmp_path / "other"
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(other))
    _compile_and_call(_module(48))   # creates the other directory and its own key
    assert (other / disk_cache.KEY_NAME).read_bytes() != (cache / disk_cache.KEY_NAME).read_bytes()
    entry = _entry(cache)
    (other / entry.name).write_bytes(entry.read_bytes())
    before = _counts()
    assert _compile_and_call(_module(47)) == 236
    assert _delta(before)["refused entry"] == 1 and _delta(before)["llvm"] == 1
    assert jit.STATS["refused: unauthenticated"] >= 1


def test_the_key_is_private_and_racing_creators_share_one(cache):
    _compile_and_call(_module(49))
    key = cache / disk_cache.KEY_NAME
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32
    fresh = cache.parent / "fresh"
    fresh.mkdir(mode=0o700)
    fd = os.open(fresh, os.O_RDONLY)
    try:
        start = threading.Barrier(8)
        keys = []

        def create():
            start.wait()
            keys.append(disk_cache._mac_key(fd))
        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        os.close(fd)
    assert len(keys) == 8 and len(set(keys)) == 1
    assert keys[0] == (fresh / disk_cache.KEY_NAME).read_bytes()
    assert sorted(p.name for p in fresh.iterdir()) == [disk_cache.KEY_NAME]  # no temporaries


def _another_owners_fstat(monkeypatch, name):
    """os.fstat reporting another owner for the file `name` (Linux: /proc names the fd)."""
    real = os.fstat

    def fstat(fd):
        st = real(fd)
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/" + name):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid + 1,
                                   st.st_gid, st.st_size, st.st_atime, st.st_mtime, st.st_ctime))
        return st
    monkeypatch.setattr(os, "fstat", fstat)


@pytest.mark.parametrize("damage", ["mode 0620", "mode 0602", "mode 0640", "mode 0604",
                                    "another owner", "a symlink", "31 bytes"])
def test_a_key_file_others_could_read_or_write_turns_the_cache_off(cache, monkeypatch, damage):
    if damage == "another owner" and not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to simulate another owner")
    _compile_and_call(_module(50))
    key = cache / disk_cache.KEY_NAME
    if damage.startswith("mode"):
        os.chmod(key, int(damage[5:], 8))
    elif damage == "another owner":
        _another_owners_fstat(monkeypatch, disk_cache.KEY_NAME)
    elif damage == "a symlink":
        elsewhere = cache.parent / "key-elsewhere"
        key.rename(elsewhere)
        key.symlink_to(elsewhere)
    else:
        key.write_bytes(key.read_bytes()[:31])
    disk_cache._reset()
    before = _counts()
    with pytest.warns(RuntimeWarning, match=r"cache refused \(key file .*: the disk cache is off"):
        assert _compile_and_call(_module(50)) == 251
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # warned once
        assert _compile_and_call(_module(50)) == 251
    assert _delta(before) == {"llvm": 2, "hit": 0, "miss": 0, "store": 0, "refused entry": 0}
    assert disk_cache.info()["status"].startswith("refused: key file")


@pytest.mark.parametrize("mode", [0o620, 0o602], ids=oct)   # group only, others only
def test_an_entry_group_or_others_alone_can_write_is_refused(cache, mode):
    _compile_and_call(_module(51))
    os.chmod(_entry(cache), mode)
    before = _counts()
    assert _compile_and_call(_module(51)) == 256
    assert _delta(before) == {"llvm": 1, "hit": 0, "miss": 0, "store": 1, "refused entry": 1}
    assert jit.STATS["refused: writable by others"] >= 1


@pytest.mark.parametrize("mode", [0o720, 0o702, 0o770, 0o707], ids=oct)
def test_a_directory_group_or_others_alone_can_write_turns_the_cache_off(tmp_path, monkeypatch,
                                                                         mode):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, mode)
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(d))
    monkeypatch.setattr(jit, "_cache", OrderedDict())
    disk_cache._reset()
    try:
        before = _counts()
        with pytest.warns(RuntimeWarning, match=rf"refused \(writable by others: mode 0{mode:o}\)"):
            assert _compile_and_call(_module(52)) == 261
        assert _delta(before) == {"llvm": 1, "hit": 0, "miss": 0, "store": 0, "refused entry": 0}
        assert list(d.iterdir()) == []
    finally:
        disk_cache._reset()


def test_a_key_that_cannot_be_created_turns_the_cache_off(cache, monkeypatch):
    # a read-only or full cache directory (simulated: root ignores a read-only mode)
    def refuse(dfd, suffix):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(disk_cache, "_open_tmp", refuse)
    before = _counts()
    with pytest.warns(RuntimeWarning, match=r"refused \(key file .*can't be created: "
                                             r"Permission denied\): the disk cache is off"):
        assert _compile_and_call(_module(53)) == 266
    assert _compile_and_call(_module(53)) == 266
    assert _delta(before) == {"llvm": 2, "hit": 0, "miss": 0, "store": 0, "refused entry": 0}
