"""What several test modules build the same way, built once for the whole run and shared by every worker."""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path


def once_per_run(tmp_path_factory, name: str, build: Callable[[Path], object]) -> tuple[Path, object]:
    """``(folder, build(folder))``, built once for the whole run, whatever the number of workers.

    Under pytest-xdist each worker has its own session, so a session fixture alone is built once per
    worker that runs one of its modules. The workers of one run share the parent of their base
    temporary folders (pytest-xdist's documented pattern): the first worker builds the folder under a
    file lock and pickles what ``build`` returns next to it; the others wait on the lock, then read it.
    Users only ever read or copy the folder. Without xdist the parent is shared by every run of the
    user, so the folder is made in this run's own temporary folder instead."""
    from filelock import FileLock

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        return folder, build(folder)
    root = tmp_path_factory.getbasetemp().parent
    folder, made = root / name, root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed in another worker
            folder.mkdir()
            made.write_bytes(pickle.dumps(build(folder)))
    return folder, pickle.loads(made.read_bytes())


RESNET_DERM = dict(size=0.1, chunk=16, severities=(2,))  # demo_derm at 0.1: 38 chunks of 16 over 17 arrays


def resnet_derm_store(tmp_path_factory) -> Path:
    """A store of demo-resnet on demo_derm (``RESNET_DERM``) extracted to the end in one go: what
    test_resume's and test_object_store's killed and resumed extractions must equal. Read it, never write."""
    def build(folder: Path) -> None:
        from crs.extract.run import extract
        from crs.store import Store

        run = extract(Store(str(folder / "ref.zarr")), "demo-resnet", "demo_derm", **RESNET_DERM)
        assert run.complete

    folder, _ = once_per_run(tmp_path_factory, "resnet-derm", build)
    return folder / "ref.zarr"
