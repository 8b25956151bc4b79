"""Fault injection: every case ends one of two ways, nothing else.

(a) the command exits 0 and the final outputs equal an uninterrupted run's bit for bit (store
    arrays with their attributes, run records, probe selection, subsets, scores tables and
    scores.json, report tables; no temporary file left behind), or
(b) it exits 2 with a message naming what is wrong and a `crs ...` command that repairs it;
    running that command, then the first command again, gives (a)'s outputs.

Exit 1 (a bug of ours), exit 0 with other outputs, a hang, or a refusal without a repair fail.
Nothing here is marked xfail or skip: a failing case is an open bug.

How it runs (faultlib.py): one small uninterrupted run per session (``baseline``: demo-stats and
demo-resnet on demo_derm at --size 0.1, severity 1, chunk 32, one seed, fractions 0.5 and 1, one L2,
bootstrap 5, and the report), copied per case with shutil.copytree; references for a changed probe
(L2 0.01 instead of 1: ``probe_ref``) and score (bootstrap 7: ``score_ref``); a ``csv:`` dataset of 24
tiny PNGs with one broken image (``csv_baseline``, extracted with --no-perturb). Kill points are
"after the command wrote K files" (polled mtimes, no sleeps). Killed and concurrent commands run
as processes of their own (``crs``/``start``: ``python -m crs.cli``, HF_HUB_OFFLINE=1, PYTHONPATH
inherited, forked from tests/forkrun.py's warm server, so that no command pays for its imports;
CRS_TESTS_EXEC=1 starts fresh interpreters instead); the other commands run in this process
through typer's CliRunner (``crs_here``), which saves each call its imports and the probe's
compilation; CRS_FAULTS_SUBPROCESS=1 runs those in subprocesses too. A refusal's repair is each
backquoted `crs ...` command of its message, run in order with the case's own options for that
stage replaced by those the message gives (so a message need not repeat --size or --severities,
but its --encoder, --dataset, --store are used; placeholders such as ENCODER or ... are dropped);
`crs store verify ...` runs as `crs store verify STORE --repair`. CRS_FAULTS_LOG=FILE logs each
case's outcome.

The cases and how each ends ("a" or "b" as above):

| module              | case                                                          | ends                     |
|---------------------|---------------------------------------------------------------|--------------------------|
| test_kills          | extract, new store, SIGKILL after 6 / 60 writes; SIGTERM      | a (resumed)              |
|                     | after 25 writes                                               |                          |
| test_kills          | csv extract SIGKILL once the broken image's chunk is          | a (failures table kept)  |
|                     | committed, then resumed                                       |                          |
| test_kills          | probe with another L2, SIGKILL after 1 / 20 writes; SIGTERM   | a                        |
| test_kills          | score with another bootstrap, SIGKILL after 1 / 8; SIGTERM    | a (no .tmp left)         |
| test_kills          | report, SIGKILL or SIGTERM after 2 writes                     | a                        |
| test_damage         | a store file deleted, truncated, altered, swapped for valid   | b: the array and chunk   |
|                     | bytes that were not committed, or made a symlink (embeddings, | named; `crs store verify |
|                     | labels, split, image ids, predictions, their zarr.json); run  | --repair`, then the      |
|                     | records altered; then probe or score                          | stage; or a, read right  |
| test_unnoticed      | a whole prediction array deleted, then score and verify;      | b: the array named with  |
|                     | labels, splits or ids rewritten through zarr (valid bytes),   | its repair (`crs probe`, |
|                     | then probe or score; the root zarr.json damaged, then score   | `crs extract`, `crs      |
|                     | and verify (which still checks below); a prediction folder    | store verify --repair`); |
|                     | made a symlink, or the link removed by hand                   | the root named as such   |
| test_unnoticed      | an embedding chunk re-encoded with its values kept            | kept by `--repair`, said |
| test_inputs         | failures chunk deleted or altered, then extract               | b                        |
| test_inputs         | csv label NaN / NA / empty; blank or duplicate id; path       | b (the line named)       |
|                     | outside the image root                                        |                          |
| test_inputs         | csv label padded with spaces                                  | a (read as meant, with   |
|                     |                                                               | a warning)               |
| test_inputs         | datasets check: one class / a split without a class           | b                        |
| test_inputs         | an image that is a FIFO                                       | b, without waiting       |
| test_inputs         | a 2000 x 1 PNG                                                | a, within the memory     |
|                     |                                                               | bound                    |
| test_writers        | two extracts into one new store; two probes of the same       | a, or one b naming the   |
|                     | pair; two probes of different pairs                           | lock's holder            |
| test_mixed_settings | score after a probe stopped between two pairs                 | b                        |
| test_machine        | a full disk, quota, read-only file system or refused          | b (the path named);      |
|                     | permission; an empty CSV; verify on no store; stdout closed   | the closed pipe: exit 0  |
| test_refusals       | --shift-target unknown, or with no csv: dataset               | b (the value, the valid  |
|                     |                                                               | names), no store         |
| test_refusals       | a csv: no probe can measure (each image its own class; two    | b from extract, probe,   |
|                     | training images): the reason `crs datasets check` gives       | score and run alike      |
| test_refusals       | a csv: with a csv: shift target, a chunk damaged              | b: the extract hint runs |
|                     |                                                               | as printed               |
| test_refusals       | run records of another generation or altered, a chunk         | b: the probe and verify  |
|                     | damaged, the run in a folder with spaces, run from elsewhere  | hints run as printed     |
| test_refusals       | a gated model without a token; the hub unreachable (a closed  | b at once, no store; an  |
|                     | local port); a junk --weights file; an empty default store    | old store kept as it was |
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faultlib import baseline, csv_baseline, probe_ref, score_ref  # noqa: E402,F401  (fixtures)
