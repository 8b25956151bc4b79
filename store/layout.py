"""The embedding store's layout: a Zarr v3 hierarchy every stage reads and writes.

Layout (schema version 1)::

    /                                 attrs: crs_store = {schema_version, created, tool_version, store_id}
    datasets/<dataset>/               attrs: task, classes, ordinal, shift_target, split_seed, ...
        image_id   [image]            str
        label      [image] int64      (multiclass)   or  [image, label] int8 in {1, 0, -1} (multilabel)
        split      [image] int8       0 train, 1 val, 2 test
        group      [image] str        patient or lesion id
                                      (each of the four: attrs commit, per chunk bytes of its stored
                                      file and CRC-32 of its values)
        failures/  image_id, file, reason [failure] str; attrs: rows, writing
        embeddings/<encoder>/<condition>/
            x      [row, feature]     float16 by default, chunked along rows
            done   [chunk] bool       one flag per chunk of x, set after that chunk is written
            commit [chunk, 2] uint64  per chunk: bytes of its stored file, CRC-32 of its values
                                      attrs: rows ('all' | 'test'), complete, chunk_bytes (the
                                      commit record's bytes, copied once complete), provenance
        predictions/<encoder>/        attrs: committed = {generation, conditions} of the last probe run
        predictions/<encoder>/<condition key>
                   [seed, fraction, image, class] float32 test probabilities of the chosen probes,
                                      one chunk up to 64 MB (``predictions.prediction_chunks``); attrs:
                                      commit (per chunk: bytes of its stored file, CRC-32 of its values)

Rows are ordered test first (then val, then train), so that chunk j of a test-only
(perturbed) array and chunk j of the clean array cover the same images, and
extraction decodes each image once for all conditions.

Writes go chunk by chunk (``resume``). ``done[j]`` is set only after chunk ``j`` of ``x`` is on
disk (Zarr's local store writes each chunk atomically), so a killed run loses at most
the chunks in flight, and a re-run finishes only what is missing. ``complete`` is set
once every flag is; readers refuse incomplete arrays and say how to resume.

Integrity (``commits``): every array is created with a checksum in each chunk (Zarr's zstd codec
with its content checksum on: zstd checks it at every decode) and with every chunk written (also
one equal to the fill value), so a truncated or altered chunk fails its checksum and a missing
chunk file is a missing file, never a silent block of zeros. Before ``done[j]`` the writer records
``commit[j]`` = (stored bytes of chunk j, CRC-32 of its values): ``pending()`` re-does done chunks
whose file is missing or of another size, ``read_embedding`` refuses them (against ``chunk_bytes``,
the record's sizes copied into the attributes once complete), ``crs store verify`` decodes each and
compares the CRC. A prediction array and each dataset array keep the same record per chunk in their
``commit`` attribute, compared in full on every read; a probe run records which prediction arrays it
wrote in ``committed``, so that one deleted since is found. A file or folder that is a symbolic link is
refused. Readers name the array, the chunk and the command that repairs it (``repair``).
"""

from __future__ import annotations

import numpy as np

SCHEMA_VERSION = 1
DEFAULT_STORE = "./crs-store.zarr"
WHEN = frozenset({"written", "created", "completed"})  # when a thing was written, not what it holds


def condition_key(condition: str) -> str:
    """Node name for a condition: ':' is not portable in file names, so 'shift:x' -> 'shift~x'."""
    return condition.replace(":", "~")


def key_condition(key: str) -> str:
    return key.replace("~", ":")


def store_order(split: np.ndarray) -> np.ndarray:
    """Permutation putting test rows first, then val, then train; stable within a split."""
    key = np.array([2, 1, 0], dtype=np.int8)[np.asarray(split)]  # train 2, val 1, test 0
    return np.argsort(key, kind="stable")


def plain_group(key: str) -> bool:
    """Whether store key ``key`` is a group this store creates without attributes (``datasets``,
    ``datasets/D/embeddings[/E]``, ``datasets/D/predictions[/E]``): its metadata can be written anew. The one
    attribute such a group may hold, the ``committed`` record of ``predictions/E``, is then lost until the next
    probe run of E writes it; the run records still name what that run wrote."""
    parts = key.strip("/").split("/")
    return parts == ["datasets"] or (len(parts) in (3, 4) and parts[0] == "datasets"
                                     and parts[2] in ("embeddings", "predictions"))
