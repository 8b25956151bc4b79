"""The score stage: run records to metrics, CRS and the bootstrap, written to RESULTS/scores (``run``),
and ``crs run``'s step, which scores again only when the hash of the score's options record, its
definition's constants, the store's content and the run records scored, or scores.json, differ from
what ``RESULTS/run_state.json`` recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from crs.extract import encoders as encreg
from crs.foundations.config import Config, Score, options_record, record_hash
from crs.foundations.errors import BadInput
from crs.foundations.progress import NO_PROGRESS, Progress
from crs.stages.datasets import require_measurable_stored
from crs.stages.state import Stage, State, file_digest


def score_options(settings: Score, reference: str | None = None):
    """The score's options record (``crs.scoring.options.ScoreOptions``) of the ``[score]`` settings;
    ``reference``: what the stage resolved ``settings.reference`` to (default: as given)."""
    from crs.scoring.options import ScoreOptions  # numpy: crs encoders lists the registry without it

    return options_record(ScoreOptions, settings, **({} if reference is None else {"reference": reference}))


def run(results: Path, settings: Score, store: str | None = None, pairs: list[tuple[str, str]] | None = None,
          progress: Progress = NO_PROGRESS):
    """Score the run records under ``results`` (only ``pairs`` if given) and write RESULTS/scores."""
    from crs.foundations import records  # polars: crs encoders lists the registry without it
    from crs.scoring.run import METRIC_TABLE  # polars: crs encoders lists the registry without it
    from crs.scoring.run import score as score_table  # polars: crs encoders lists the registry without it

    table = records.read(results)
    if pairs is not None:  # crs run scores the (encoder, dataset) pairs its config names, not older leftovers
        import polars as pl  # polars: crs encoders lists the registry without it

        keep = pl.DataFrame({"encoder": [e for e, _ in pairs], "dataset": [d for _, d in pairs]})
        table = table.join(keep, on=["encoder", "dataset"], how="semi")
    encoders = sorted(table["encoder"].unique().to_list())
    ref, auto_note = resolve_reference(settings.reference, encoders)
    opened, note = _open_for_scoring(store)
    if opened is None and (found := records.recorded_store(results)) is not None and found != store:
        # the store the probes read, as the run records name it (CRS v2 reads its C from the stored predictions)
        reopened, _ = _open_for_scoring(found)
        if reopened is not None:
            opened, note = reopened, f"scored with the store the run records name, {found} (--store {store} holds none)"
    if opened is not None:
        for d in sorted(set(table["dataset"].unique().to_list()) & set(opened.datasets())):
            require_measurable_stored(opened, d)
    # the bootstrap is vectorised, so there is nothing to count: the bar shows the elapsed time
    task = progress.add_task(f"score ({table['encoder'].n_unique()} encoders, {settings.bootstrap:,} bootstrap "
                             "replicates)", total=None)
    # the scoring code raises BadInput for records or options that do not allow a score; any
    # other ValueError is a bug in it and must surface as one (exit 1), not as the user's fault
    site_of, known = merged(results, table["dataset"].unique().to_list()) or (None, None)
    scores = score_table(table, score_options(settings, reference=ref), store=opened, results=Path(results),
                         site_of=site_of, known_metadata=known)
    progress.update(task, visible=False)  # scoring is over: its line ends here, not after the report
    if note:
        scores.settings["warnings"].insert(0, note)
    if auto_note:  # 'auto' found no registry reference among the scored encoders: said, and recorded
        scores.settings["warnings"].insert(0, auto_note)
    scores.settings["reference_requested"] = settings.reference
    scores.write(Path(results) / "scores", metric_table=Path(results) / METRIC_TABLE)
    return scores


def merged(results: Path, datasets: list[str]) -> tuple[dict[str, str], dict] | None:
    """(dataset -> site, encoder -> {column: value}) where ``results`` was written by ``crs merge``, from its
    merge.json: the sites (each site's dataset DS is the stratum SITE.DS: ``crs.stages.merge.stratum``) and what
    the sites recorded of the encoders (revision, licence, cost; {} for a record without it); None for one site's
    own results."""
    from crs.stages.merge import MERGE_RECORD, stratum

    path = Path(results) / MERGE_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        sites = sorted(record["sites"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{path} does not read as a merge record ({exc}); merge the bundles again with `crs merge`, "
                       "or delete it to score the folder as one site's results") from exc
    owner = {d: s for s in sites for d in datasets if d.startswith(stratum(s, ""))}
    strays = sorted(set(datasets) - set(owner))
    if strays:
        raise BadInput(f"datasets {strays} under {results} belong to none of the merged sites {sites} (each is "
                       f"SITE.DATASET); score the merged folder as `crs merge` wrote it, without other run records")
    known = record.get("encoder_metadata")
    return owner, known if isinstance(known, dict) else {}


def resolve_reference(requested: str, encoders: list[str]) -> tuple[str, str | None]:
    """(the reference scoring uses, a warning or None). 'auto' is the registry's reference when it is among
    ``encoders`` (a probe head's ENCODER+HEAD counts as ENCODER); otherwise 'median', with a warning
    saying so. Any other value is used as given."""
    if requested != "auto":
        return requested, None
    base = {e.split("+", 1)[0]: e for e in reversed(encoders)}  # the first model of an encoder wins
    name, why = encreg.reference_for(list(base))
    return (base[name], None) if name is not None else ("median", why)


def _open_for_scoring(store: str | None):
    """(the store or None, a note): the run records still allow a score without the store."""
    from crs.store import Store  # zarr: crs encoders lists the registry without it
    from crs.store.errors import NoStore  # zarr: crs encoders lists the registry without it

    if store is None:
        return None, None
    try:
        return Store(str(store), mode="r"), None
    except NoStore as exc:  # a store that is there but damaged is refused (exit 2), never scored around
        return None, f"{exc}; scoring from the run records alone"


def _store_content(store_path: str, datasets: list[str]) -> list:
    """What scoring reads from the store (its identity and the datasets' tables), not its path;
    empty where the store cannot be opened (scoring then works from the run records alone)."""
    from crs.store import Store, StoreError  # zarr: crs encoders loads this layer

    try:
        store = Store(str(store_path), mode="r")
    except StoreError:
        return []
    return [store.store_id] + [(d, store.content_digest(d)) for d in datasets if store.has_dataset(d)]


def is_current(recorded, inputs: str, digest: str | None) -> bool:
    """Whether the score's state entry ``recorded`` was written for the ``inputs`` hash it has now and
    scores.json is still the file it wrote (``digest``; None when it is gone)."""
    return (isinstance(recorded, dict) and recorded.get("inputs") == inputs and digest is not None
            and recorded.get("scores_json") == digest)


def step(cfg: Config, progress: Progress, state: State, wanted):
    """``crs run``'s score stage: ``run`` on the models of the ``wanted`` pairs unless the scores there are
    current (``is_current``); (what it did, the scores, their JSON, the digest of scores.json)."""
    from crs.probe.run import head_name, records_path  # polars, zarr: crs encoders loads this layer
    from crs.scoring.versions import constants  # numpy: crs encoders loads this layer

    results = Path(cfg.results)
    sc = Stage("score", out=str(results / "scores"))
    t0 = time.perf_counter()
    s_ = cfg.score
    scored = [(head_name(e, cfg.probe.head), d) for e, d in wanted]
    # the definition's constants too: another version, or v2 with other constants, must score again
    score_hash = record_hash(score_options(s_), constants(s_.crs_version),
                             _store_content(cfg.store, sorted({d for _, d in scored})),
                             sorted((e, d, file_digest(records_path(results, e, d))) for e, d in scored))
    scores_json_path = results / "scores" / "scores.json"
    before = state.old.get("score")
    digest = file_digest(scores_json_path)
    if is_current(before, score_hash, digest):
        sc.skipped = ["scores"]
        scores_json = json.loads(scores_json_path.read_text(encoding="utf-8"))
        scores = stand_in(scores_json)
    else:
        scores = run(results, s_, store=cfg.store, pairs=scored, progress=progress)
        scores_json = scores.to_json()
        digest = file_digest(scores_json_path)
        sc.done = ["scores"]
    state.set("score", {"inputs": score_hash, "scores_json": digest})
    sc.seconds = time.perf_counter() - t0
    return sc, scores, scores_json, digest


def stand_in(scores_json: dict):
    """An object with the parts of ``Scores`` the terminal printers use, rebuilt from scores.json."""
    import polars as pl  # polars: crs encoders loads this layer

    return SimpleNamespace(settings=scores_json["settings"], rank_comparison=scores_json["rank_comparison"],
                           encoders=pl.DataFrame(scores_json["encoders"]),
                           weight_leaders=pl.DataFrame(scores_json["weight_sensitivity"]),
                           diagnostics=pl.DataFrame(scores_json["diagnostics"]),
                           to_json=lambda: scores_json)
