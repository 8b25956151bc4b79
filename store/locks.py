"""Locks in the store: several runs (and several encoders) may write into one store at once.

One lock per (dataset, encoder) guards an extraction (``extraction_lock``: refused at once
while a live run holds it); a short one per dataset guards its metadata and failures table
(``dataset_lock``: waits); one per (encoder, dataset) guards a probe's predictions
(``probe_lock``, refused at once, with a second one in the results folder for its run records).
A lock held by a process that died is taken over, and the holder it names is reported. A local
store locks files in ``.crs-locks/`` with ``filelock``'s descriptor lock (flock on POSIX,
LockFileEx on Windows); a store at an fsspec URL with a heartbeat object (``object_lock``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

import filelock

from crs.foundations.provenance import now
from crs.store.errors import StoreError
from crs.store.keys import store_key
from crs.store.zarr_store import Store


class LockHeld(StoreError):
    """Another live run holds the lock."""


EXTRACTING = "is being extracted by another run"
PROBING = "is being probed by another run"


def extraction_lock(store: Store, dataset: str, encoder: str):
    """The (dataset, encoder) lock of an extraction; refused at once if a live run holds it.
    A context manager yielding the holder it took over from (``'pid P on HOST'``) or None."""
    return hold_lock(store, f"{dataset}|{encoder}", wait=False, what=f"{dataset} × {encoder}")


@contextmanager
def probe_lock(store: Store, results, encoder: str, dataset: str):
    """The locks of one ``crs probe`` of (encoder, dataset): refused at once while a live run holds either.

    One in the store (its predictions live there, whatever the results folder) and one in the
    results folder (its run records, selection and subsets; two stores may share one results
    folder). ``encoder`` is the name the results go under (``ENCODER+mlp`` for the MLP head), so
    the heads of one encoder, and different pairs, run at once. Yields the holders taken over."""
    what = f"{encoder} × {dataset}"
    key = f"probe|{dataset}|{encoder}"
    with ExitStack() as stack:
        stale = [stack.enter_context(hold_lock(store, key, wait=False, what=what, doing=PROBING))]
        folder = Path(results) / ".crs-locks"
        folder.mkdir(parents=True, exist_ok=True)
        stale.append(stack.enter_context(file_lock(str(folder / (store_key(key) + ".lock")), wait=False, what=what,
                                                   doing=PROBING)))
        yield [s for s in stale if s]


def dataset_lock(store: Store, dataset: str):
    """The lock of a dataset's metadata and failures table; waits for its holder."""
    return hold_lock(store, f"dataset|{dataset}", wait=True, what=f"dataset {dataset}")


def _lock_dir(store: Store) -> str | None:
    """Lock files live in the store folder (local stores only; an fsspec URL gets none)."""
    path = store.path[len("file://"):] if store.path.startswith("file://") else store.path
    if "://" in path:
        return None
    d = os.path.join(path, ".crs-locks")
    os.makedirs(d, exist_ok=True)
    return d


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _held_message(what: str, holder: dict, where: str, doing: str = EXTRACTING) -> str:
    return (f"{what} {doing} (pid {holder.get('pid', '?')} on host "
            f"{holder.get('host', '?')}, since {holder.get('started', '?')}); wait for it to finish or stop "
            f"it, then run again ({where})")


def _stale(holder: dict | None) -> str | None:
    return f"pid {holder.get('pid')} on {holder.get('host')}" if holder else None


@contextmanager
def hold_lock(store: Store, key: str, *, wait: bool, what: str, doing: str = EXTRACTING):
    """An exclusive lock named ``key`` in the store: a locked file holding {pid, host, started}.

    Yields the stale holder or None (``file_lock``). An object store (an fsspec URL) has no
    file locks: it gets an ``object_lock``.
    """
    d = _lock_dir(store)
    if d is None:
        with object_lock(store, key, wait=wait, what=what, doing=doing) as stale:
            yield stale
        return
    with file_lock(os.path.join(d, store_key(key) + ".lock"), wait=wait, what=what, doing=doing) as stale:
        yield stale


@contextmanager
def file_lock(path: str, *, wait: bool, what: str, doing: str = EXTRACTING):
    """An exclusive lock on the local file ``path``, which names its holder {pid, host, started}.

    The lock is ``filelock``'s descriptor lock (flock on POSIX, LockFileEx on Windows) on a
    descriptor opened here without truncation, so a run refused at the door does not erase the
    holder it names (``filelock.FileLock`` truncates the file on open). The kernel drops the lock
    when its process dies, so a lock left by a killed run is free at once; its file still names
    the dead holder, which is reported as taken over. ``wait=False`` refuses at once if a live
    run holds it. Yields the stale holder (``'pid P on HOST'``) or None.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not filelock.lock_descriptor(fd, blocking=wait):
            raise LockHeld(_held_message(what, _read_holder(fd), f"lock file {path}", doing))
        try:
            stale = _read_holder(fd)
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now()}
            if stale and stale.get("host") == me["host"] and isinstance(stale.get("pid"), int) \
                    and stale["pid"] != me["pid"] and _pid_alive(stale["pid"]):
                # the lock is free but its recorded holder lives: a lock file copied in, or a
                # file system without locks; refuse rather than write beside a live run
                raise LockHeld(f"{what}: lock file {path} names a live process (pid {stale['pid']}); "
                               "if that is not a run of CRS-Bench, delete the lock file")
            _write_holder(fd, json.dumps(me).encode())
            try:
                yield _stale(stale)
            finally:
                _write_holder(fd, b"")  # a clean exit leaves an empty (free) lock file
        finally:
            filelock.unlock_descriptor(fd)
    finally:
        os.close(fd)


def _write_holder(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    os.fsync(fd)


def _read_holder(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 4096)
        return json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {"pid": "?", "host": "? (unreadable lock file)"}


# An object store has no flock and no atomic create-if-absent that every fsspec backend
# offers, so its lock is an object .crs-locks/KEY.json naming the holder {pid, host, started,
# heartbeat, token}, kept fresh by a heartbeat thread. A holder is dead when it is on this
# host and its pid is gone (taken over at once), or when its heartbeat is older than
# OBJECT_LOCK_STALE_S (another host's run that died: taken over after that long; clocks are
# assumed to agree to well within it). Acquiring writes our record, waits OBJECT_LOCK_SETTLE_S
# and reads it back: of two runs that both saw the lock free, the later writer wins and the
# other refuses, provided each wrote within OBJECT_LOCK_SETTLE_S of its check (S3, GCS and
# Azure Blob give read-after-write consistency). This is a guard against running the same
# (dataset, encoder) twice by mistake, not a consensus protocol; the Ray executor needs no lock
# for its chunks (each unit has one writer), only this one per (dataset, encoder) in its driver.
OBJECT_LOCK_STALE_S = 600.0
OBJECT_LOCK_HEARTBEAT_S = 30.0
OBJECT_LOCK_SETTLE_S = 0.5


def _object_holder(fs, path: str) -> dict | None:
    try:
        raw = fs.cat_file(path)
    except FileNotFoundError:
        return None
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        return {"pid": "?", "host": "? (unreadable lock object)", "heartbeat": 0.0}


def _holder_dead(holder: dict, stale_s: float) -> bool:
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        return not _pid_alive(holder["pid"])
    return time.time() - float(holder.get("heartbeat", 0.0)) > stale_s


def _acquire_object(store: Store, fs, path: str, me: dict, *, wait: bool, what: str, stale_s: float,
                    doing: str = EXTRACTING) -> dict | None:
    """Write our record once the lock object is free (or its holder dead); returns the dead holder."""
    stale = None
    while True:
        holder = _object_holder(fs, path)
        if holder is not None and holder.get("token") != me["token"] and not _holder_dead(holder, stale_s):
            if wait:
                time.sleep(OBJECT_LOCK_SETTLE_S)
                continue
            raise LockHeld(_held_message(
                what, holder, f"lock object {store.path.rstrip('/')}/.crs-locks/; a holder on another host "
                f"that died is taken over {stale_s:.0f} s after its last heartbeat", doing))
        if holder is not None and holder.get("token") != me["token"]:
            stale = holder
        fs.pipe_file(path, json.dumps({**me, "heartbeat": time.time()}).encode())
        time.sleep(OBJECT_LOCK_SETTLE_S)
        if (_object_holder(fs, path) or {}).get("token") == me["token"]:
            return stale


def _heartbeat(fs, path: str, me: dict, stop: threading.Event) -> None:
    while not stop.wait(OBJECT_LOCK_HEARTBEAT_S):
        try:
            if (_object_holder(fs, path) or {}).get("token") == me["token"]:
                fs.pipe_file(path, json.dumps({**me, "heartbeat": time.time()}).encode())
        except Exception:  # noqa: BLE001 - a missed beat only ages the lock; the next one retries
            pass


@contextmanager
def object_lock(store: Store, key: str, *, wait: bool, what: str, stale_s: float | None = None,
                doing: str = EXTRACTING):
    """The lock of ``hold_lock`` for a store at an fsspec URL (see the comment above)."""
    stale_s = OBJECT_LOCK_STALE_S if stale_s is None else stale_s
    fs, root = store.files.filesystem()
    path = f"{root}/.crs-locks/{store_key(key)}.json"
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now(), "token": uuid.uuid4().hex}
    stale = _acquire_object(store, fs, path, me, wait=wait, what=what, stale_s=stale_s, doing=doing)
    stop = threading.Event()
    thread = threading.Thread(target=_heartbeat, args=(fs, path, me, stop), name="crs-lock-heartbeat", daemon=True)
    thread.start()
    try:
        yield _stale(stale)
    finally:
        stop.set()
        thread.join()
        try:
            if (_object_holder(fs, path) or {}).get("token") == me["token"]:
                fs.rm_file(path)  # a clean exit leaves no lock object
        except FileNotFoundError:
            pass
