"""Where the outputs are: `crs probe`, `crs score` and `crs report` find the folder of `crs demo` in the
current one when the default store or results folder is absent."""

from __future__ import annotations

from pathlib import Path

from crs.commands.console import err
from crs.foundations import config as cfgmod
from crs.foundations.errors import BadInput


def _has_records(results: Path) -> bool:
    return any((results / "run_records").glob("*.parquet"))


def _is_store(path: Path) -> bool:
    return (path / "zarr.json").is_file()


def _holds_data(path: Path) -> bool:
    """A store with at least one dataset in it: an empty one (a run that failed before writing anything) does not
    hide the demo's outputs."""
    try:
        return _is_store(path) and any(p.is_dir() for p in (path / "datasets").iterdir())
    except OSError:
        return False


def demo_folders(here: Path) -> list[Path]:
    """The folders directly under ``here`` laid out as `crs demo --out` lays them out: store.zarr, results
    (with run records) and report side by side."""
    try:
        subs = sorted(p for p in here.iterdir() if p.is_dir())
    except OSError:
        return []
    return [p for p in subs if _is_store(p / "store.zarr") or _has_records(p / "results")]


def locate_outputs(given: dict, need: str, here: Path = Path(".")) -> str | None:
    """Fill in --store and --results from a `crs demo` folder in ``here`` when the command needs what the
    defaults do not hold (``need``: "store" for probe, "results" for score and report) and the user did not
    name it; a path the user named stands.

    Returns a note naming the folder used, or None where the defaults or the given paths stand. Where no
    folder qualifies the defaults stand, and the stage's own error names what is missing and where the demo
    keeps its outputs (``records.ELSEWHERE``); where several do, BadInput lists them."""
    defaults = cfgmod.Config()
    if need == "store":
        if ("store",) in given or _holds_data(Path(defaults.store)):
            return None
        found = [f for f in demo_folders(here) if _is_store(f / "store.zarr")]
    else:
        if ("results",) in given or _has_records(Path(defaults.results)):
            return None
        found = [f for f in demo_folders(here) if _has_records(f / "results")]
    if len(found) != 1:
        if len(found) > 1:
            raise BadInput(f"{defaults.store if need == 'store' else defaults.results} holds no "
                           f"{'store' if need == 'store' else 'run records'} and several folders here hold the "
                           f"outputs of `crs demo`: {', '.join(str(f) for f in found)}; pick one with "
                           "--store DIR/store.zarr --results DIR/results")
        return None
    folder = found[0]
    given.setdefault(("results",), str(folder / "results"))
    if _is_store(folder / "store.zarr"):
        given.setdefault(("store",), str(folder / "store.zarr"))
    what = f"store {defaults.store}" if need == "store" else f"results folder {defaults.results}"
    return (f"using the `crs demo` outputs in {folder} (store {given.get(('store',), defaults.store)}, results "
            f"{given[('results',)]}): the default {what} holds no {'store' if need == 'store' else 'run records'}; "
            "pass --store and --results to choose")


def print_note(text: str | None, quiet: bool) -> None:
    if text and not quiet:
        err.print(f"note: {text}", markup=False, highlight=False, soft_wrap=True)
