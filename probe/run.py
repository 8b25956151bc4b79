"""``crs probe``: read embeddings from the store, fit every probe at once, write results.

For one (encoder, dataset): fit all seeds x fractions x L2 in one compiled program,
pick L2 per (seed, fraction) by validation loss, evaluate the chosen probes on the
clean test split, every perturbed condition in the store and the shift target, write
the test probabilities into the store and one run-record Parquet file. The steps:
reading the inputs (``crs.probe.inputs``, standardised by ``crs.probe.standardise``),
fitting (a head of ``crs.probe.heads``), choosing and evaluating (``crs.probe.evaluate``),
and writing one generation (``crs.probe.commit``).

Everything is computed before anything is written. One run per (encoder, dataset) at a
time (``crs.store.locks.probe_lock``).

The heads are records of ``crs.probe.heads``: ``head="mlp"`` fits one-hidden-layer MLP
probes instead (``crs.probe.mlp``; the L2 grid is their weight-decay grid) and writes
everything under the name ``ENCODER+mlp`` (``head_name``), so scoring ranks the MLP head
as one more model beside the linear one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from crs.foundations.config import DEFAULT_FRACTIONS
from crs.foundations.errors import BadInput
from crs.probe import subsets
from crs.probe.commit import (
    PROVENANCE_KEY,
    SELECTION_DIR,
    SUBSETS_DIR,
    Outputs,
    commit,
    made_by,
    records_path,
    run_provenance,
    subsets_path,
)
from crs.probe.evaluate import (
    Selection,
    check_finite,
    evaluate,
    predictions,
    record_columns,
    select,
    selection_frame,
    set_metrics,
    tie_share,
)
from crs.probe.heads import REGISTRY, get
from crs.probe.inputs import (
    EvalSet,
    Split,
    embedding_width,
    eval_sets,
    float_targets,
    load_split,
    pairs_in_store,
    training_rows,
    training_set,
)
from crs.probe.options import DEFAULT_SEEDS, SELECT_BY, ProbeOptions
from crs.probe.problem import TrainingSet
from crs.probe.standardise import feature_scales, live_features
from crs.store import Store
from crs.store.locks import probe_lock

__all__ = [  # the run and, re-exported, the names other layers and the tests use of its steps
    "CACHE_ENV", "DEFAULT_SEEDS", "HEADS", "PROVENANCE_KEY", "SELECTION_DIR", "SELECT_BY", "SUBSETS_DIR", "EvalSet",
    "Outputs", "ProbeOptions", "ProbeSummary", "Selection", "Split", "TrainingSet", "check_finite", "commit",
    "compile_cache", "embedding_width", "eval_sets", "evaluate", "feature_scales", "float_targets", "head_name",
    "live_features", "load_split", "pairs_in_store", "planned_loops", "predictions", "probe", "records_path", "select",
    "selection_frame", "set_metrics", "small_pair", "subsets_path", "tie_share", "training_rows", "training_set",
]

HEADS = tuple(REGISTRY)  # the registered heads' names


def head_name(encoder: str, head: str) -> str:
    """The name a head's results go under: the encoder's own for the linear probe, ``ENCODER+mlp``
    for the MLP. Encoder keys never hold '+' (``crs.store.keys.store_key`` escapes it), so
    the name cannot be taken by a real encoder."""
    return get(head).result_name(encoder)


CACHE_ENV = "CRS_JAX_CACHE"  # folder for compiled probe programs; "off" disables the cache


def compile_cache() -> str | None:
    """Keep compiled probe programs on disk (JAX's persistent compilation cache), every one however
    quickly it compiles, so a second ``crs probe`` on data of the same shapes (another encoder of
    the same width, a re-run) does not compile again: on small data the many small programs
    (staging, prediction, metrics) cost as much to compile as the solver loops. The folder:
    $CRS_JAX_CACHE, else $XDG_CACHE_HOME/crs-bench/jax (default ~/.cache/crs-bench/jax); left
    alone when JAX's own cache folder is already set."""
    import jax  # jax: crs plan imports crs.probe.run without it

    where = os.environ.get(CACHE_ENV)
    if where == "off" or jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir or None
    where = where or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                  "crs-bench", "jax")
    try:
        os.makedirs(where, exist_ok=True)
    except OSError:  # a read-only home: compile every time, as without the cache
        return None
    jax.config.update("jax_compilation_cache_dir", where)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    return where


@dataclass
class ProbeSummary:
    encoder: str
    dataset: str
    probes: int
    conditions: int
    not_converged: int
    max_iterations: int
    seconds: float
    records: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


DEFAULT_OPTIONS = ProbeOptions()


def probe(store: Store, encoder: str, dataset: str, options: ProbeOptions = DEFAULT_OPTIONS, *, results: Path,
          progress=None, task=None) -> ProbeSummary:
    """Fit, select, evaluate and record every probe of one (encoder, dataset).

    Every head reads ``encoder``'s embeddings; its results are written under
    ``head_name(encoder, options.head)``.

    ``progress`` (a ``crs.foundations.progress.Progress``, where given) advances ``task`` by one as each
    solver loop finishes (``planned_loops`` of them for this pair: set the task's total from
    it, and the progress shows the time left); without ``task``, the pair gets a task of
    its own."""
    compile_cache()
    t0 = time.perf_counter()
    if options.select_by not in SELECT_BY:
        raise BadInput(f"select_by must be one of {', '.join(SELECT_BY)}, not {options.select_by!r}")
    spec = get(options.head)
    head_options = spec.checked({"max_iter": options.max_iter, "tol": options.tol, "gap": options.gap,
                                 "hidden": options.hidden, "mlp_settings": options.mlp_settings})
    model = spec.result_name(encoder)
    seeds, select_by = options.seeds, options.select_by
    # nested subsets: smallest first
    grid, fractions = tuple(sorted(set(options.l2))), tuple(sorted(set(options.fractions)))
    options = replace(options, l2=grid, fractions=fractions)
    with probe_lock(store, results, model, dataset):
        table = store.dataset(dataset)
        split = load_split(store, encoder, dataset)
        data, drawn = training_set(split, table, seeds, fractions, grid, dataset)
        fitted = spec.fit(data, **head_options, on_loop=_loop_reporter(progress, task, model, dataset, spec, data))
        sel = select(fitted, split, table.task, select_by)
        evals = eval_sets(store, encoder, dataset, split)
        attrs = {"seeds": list(seeds), "fractions": list(fractions), "classes": table.classes,
                 "axes": "seed, fraction, image, class", "features_left_out": split.left_out,
                 "provenance": made_by(store, results, options)}
        meta = record_columns(model, dataset, table, fractions, data, split, fitted, sel)
        predictions, records = evaluate(table, model, split, fitted, sel, evals, meta)
        check_finite(predictions, records, model, dataset)
        outputs = Outputs(predictions, (attrs, spec.attrs(encoder, head_options)),
                          selection_frame(model, dataset, seeds, fractions, grid, sel, fitted, select_by), drawn,
                          records, run_provenance(options, head_options))
        path = commit(store, Path(results), model, dataset, outputs)
    return ProbeSummary(
        encoder=model, dataset=dataset, probes=int(np.prod(fitted.converged.shape)), conditions=len(evals),
        not_converged=int((~meta["converged"]).sum()), max_iterations=int(meta["iterations"].max()),
        seconds=time.perf_counter() - t0, records=str(path),
    )


def planned_loops(store: Store, encoder: str, dataset: str, fractions=DEFAULT_FRACTIONS, head: str = "linear") -> int:
    """How many solver loops ``probe`` runs on one pair (what its progress counts), from the shape of
    its training set without reading the embeddings: the training rows less the failed images, and
    the embedding width (``embedding_width``). ``probe`` fits the live features only
    (``live_features``), so where dead features take the data across a schedule threshold of
    ``crs.probe.core.solver_loops`` the count is off by the loops that crossing adds or removes."""
    n = training_rows(store, dataset)
    fractions = tuple(sorted(set(fractions)))
    if n == 0:
        return 0
    sizes = tuple(subsets.sizes(list(fractions), n))
    return get(head).loops(n, embedding_width(store, encoder, dataset), sizes)


def small_pair(store: Store, encoder: str, dataset: str) -> bool:
    """Whether a pair's training set is small data: under ``crs.probe.core.ONE_BLOCK_BELOW`` values
    (rows x embedding width), where compiling and the work around the fit cost more than the solver
    loops, so pairs can be probed side by side (``crs.stages.steps.probe``) in little memory."""
    from crs.probe.core import ONE_BLOCK_BELOW  # jax: crs plan imports crs.probe.run without it

    return training_rows(store, dataset) * embedding_width(store, encoder, dataset) < ONE_BLOCK_BELOW


def _loop_reporter(progress, task, model: str, dataset: str, spec, data: TrainingSet):
    """The ``on_loop`` callback of a head's fit: advance ``task`` (or a task of the pair's own) by one."""
    if progress is None:
        return None
    if task is None:
        task = progress.add_task(f"solver loops {model} × {dataset}",
                                 total=spec.loops(data.X.shape[0], data.X.shape[1], data.sizes), unit="loops")
    return lambda: progress.advance(task)
