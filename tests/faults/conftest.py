"""Fault injection (issue 15, "How it is shown"): every case ends one of two ways, nothing else.

(a) the command exits 0 and the final outputs equal an uninterrupted run's bit for bit (store
    arrays with their attributes, run records, probe selection, subsets, scores tables and
    scores.json, report tables; no temporary file left behind), or
(b) it exits 2 with a message naming what is wrong and a `crs ...` command that repairs it;
    running that command, then the first command again, gives (a)'s outputs.

Exit 1 (a bug of ours), exit 0 with other outputs, a hang, or a refusal without a repair fail.
Nothing here is marked xfail or skip: a case that fails on main is a bug still open.

How it runs (faultlib.py): one small uninterrupted run per session (``baseline``: demo-stats and
demo-resnet on demo_derm at --size 0.1, severity 1, chunk 32, one seed, fractions 0.5 and 1, one L2,
bootstrap 5, and the report), copied per case with shutil.copytree; references for a changed probe
(L2 grid 0.1,1: ``probe_ref``) and score (bootstrap 7: ``score_ref``); a ``csv:`` dataset of 24
tiny PNGs with one broken image (``csv_baseline``, extracted with --no-perturb). Kill points are
"after the command wrote K files" (polled mtimes, no sleeps). Killed and concurrent commands run
as subprocesses (``crs``/``start``: ``sys.executable -m crs.cli``, HF_HUB_OFFLINE=1, PYTHONPATH
inherited); the other commands run in this process through typer's CliRunner (``crs_here``) to
save ~2 s of imports and ~4 s of probe compilation per call; CRS_FAULTS_SUBPROCESS=1 runs those
in subprocesses too. A refusal's repair is the backquoted `crs ...` command of its message; a
stage named without options (or with placeholders such as ENCODER or ...) is run with the case's
own options, and `crs store verify ...` as `crs store verify STORE --repair`.

Cases, and how they end on main at 7bd4569 (before the issue-15 fixes are merged):

| module       | case (parametrized)                                                | main         |
|--------------|--------------------------------------------------------------------|--------------|
| test_damage  | embeddings chunk deleted / truncated / altered, then probe         | |
| test_damage  | embeddings zarr.json truncated / deleted / altered (shape), probe  | |
| test_damage  | label chunk deleted / altered, then probe                          | |
| test_damage  | split chunk truncated, image_id chunk altered, dataset zarr.json   | |
|              | truncated, then probe                                              | |
| test_damage  | predictions chunk deleted / altered, zarr.json truncated, score    | |
| test_inputs  | failures table chunk deleted / altered, then extract               | |
| test_kills   | extract into a new store: SIGKILL after 6 and 60 writes, SIGTERM   | |
|              | after 25; then resumed                                             | |
| test_kills   | csv extract SIGKILL after the broken image's chunk; resumed        | |
| test_kills   | probe re-fitting a new L2 grid: SIGKILL after 1 and 20 writes,     | |
|              | SIGTERM after 8; score in between sees old or new whole; resumed   | |
| test_kills   | score with another bootstrap: SIGKILL after 1 and 8 writes,        | |
|              | SIGTERM after 4; report in between sees old or new whole; resumed  | |
| test_kills   | report: SIGKILL and SIGTERM after 2 writes; resumed                | |
| test_writers | two extracts into one new store                                    | |
| test_writers | two probes of the same pair / of different pairs                   | |
| test_inputs  | csv label NaN / NA / empty / whitespace-padded, blank id,          | |
|              | duplicate id, path outside the image root, then extract            | |
| test_inputs  | datasets check of a csv with one class / a split without a class   | |
| test_inputs  | an image that is a FIFO / a 2000 x 1 PNG (memory bound 1.5 GiB)    | |
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faultlib import baseline, csv_baseline, probe_ref, score_ref  # noqa: E402,F401  (fixtures)
