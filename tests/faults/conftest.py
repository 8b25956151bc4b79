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
(L2 0.01 instead of 1: ``probe_ref``) and score (bootstrap 7: ``score_ref``); a ``csv:`` dataset of 24
tiny PNGs with one broken image (``csv_baseline``, extracted with --no-perturb). Kill points are
"after the command wrote K files" (polled mtimes, no sleeps). Killed and concurrent commands run
as processes of their own (``crs``/``start``: ``python -m crs.cli``, HF_HUB_OFFLINE=1, PYTHONPATH
inherited, forked from tests/forkrun.py's warm server, which saves ~7 s of imports per command;
CRS_TESTS_EXEC=1 starts fresh interpreters instead); the other commands run in this process
through typer's CliRunner (``crs_here``) to save ~2 s of imports and ~4 s of probe compilation per
call; CRS_FAULTS_SUBPROCESS=1 runs those in subprocesses too. A refusal's repair is each
backquoted `crs ...` command of its message, run in order with the case's own options for that
stage replaced by those the message gives (so a message need not repeat --size or --severities,
but its --encoder, --dataset, --store are used; placeholders such as ENCODER or ... are dropped);
`crs store verify ...` runs as `crs store verify STORE --repair`.

Cases, and how they end on main at 7bd4569 (before the issue-15 fixes are merged): 42 cases,
8 or 9 end as the rule asks (a or b), 34 or 33 fail; "a"/"b" = the outcome seen, otherwise what happened.

| module       | case                                                   | on main                       |
|--------------|--------------------------------------------------------|-------------------------------|
| test_damage  | embeddings chunk deleted, then probe                   | FAIL exit 0, CRS inputs moved |
| test_damage  | embeddings chunk truncated                             | FAIL exit 1 Zstd error        |
| test_damage  | embeddings chunk altered (4 bytes flipped)             | FAIL exit 0, other records    |
| test_damage  | embeddings zarr.json truncated                         | FAIL exit 1 JSONDecodeError   |
| test_damage  | embeddings zarr.json deleted                           | FAIL exit 1 KeyError 'x'      |
| test_damage  | embeddings zarr.json altered (shape 90 -> 64)          | FAIL exit 1 IndexError        |
| test_damage  | label chunk deleted, then probe                        | FAIL exit 0, NaN records      |
| test_damage  | label chunk altered                                    | FAIL exit 1 Zstd error        |
| test_damage  | split chunk truncated                                  | FAIL exit 1 Zstd error        |
| test_damage  | image_id chunk altered                                 | FAIL exit 0, other subsets    |
| test_damage  | dataset group zarr.json truncated                      | FAIL exit 1 JSONDecodeError   |
| test_damage  | predictions chunk deleted, then score                  | FAIL exit 0, other AUROC      |
| test_damage  | predictions chunk altered, then score                  | FAIL exit 0, other metrics    |
| test_damage  | predictions zarr.json truncated, then score            | FAIL exit 2 naming no array   |
| test_inputs  | failures chunk deleted, then extract                   | FAIL exit 0, file reads blank |
| test_inputs  | failures chunk altered, then extract                   | FAIL exit 1 UnicodeDecodeError|
| test_kills   | extract, new store, SIGKILL after 6 / 60 writes        | a, a                          |
| test_kills   | extract, new store, SIGTERM after 25 writes            | FAIL exit -15, no message     |
| test_kills   | csv extract SIGKILL once the broken image's chunk is   | FAIL failures table lost      |
|              | committed, then resumed                                |                               |
| test_kills   | probe with another L2, SIGKILL after 1 write           | a                             |
| test_kills   | probe with another L2, SIGKILL after 20 writes         | FAIL score exit 0 on a mix    |
| test_kills   | probe with another L2, SIGTERM after 8 writes          | FAIL exit -15                 |
| test_kills   | score with another bootstrap, SIGKILL after 1 / 8      | FAIL, FAIL: .tmp left behind  |
| test_kills   | score with another bootstrap, SIGTERM after 4          | FAIL exit -15                 |
| test_kills   | report SIGKILL after 2 writes                          | FAIL or a, by where the kill  |
|              |                                                        | lands: a .tmp figure is left  |
| test_kills   | report SIGTERM after 2 writes                          | FAIL exit -15                 |
| test_writers | two extracts into one new store                        | a (both exit 0)               |
| test_writers | two probes of the same pair                            | a here; the race the issue    |
|              |                                                        | saw ("Directory not empty")   |
|              |                                                        | needs the writes to overlap   |
| test_writers | two probes of different pairs                          | a                             |
| test_inputs  | csv label NaN / NA / whitespace-padded                 | FAIL x3 exit 0, a new class   |
| test_inputs  | csv label empty                                        | b (refused, line named)       |
| test_inputs  | csv blank id                                           | FAIL exit 0, other ids        |
| test_inputs  | csv duplicate id                                       | b (refused, line named)       |
| test_inputs  | csv path outside the image root                        | FAIL exit 0, accepted         |
| test_inputs  | datasets check: one class / a split without a class    | FAIL x2 exit 0                |
| test_inputs  | an image that is a FIFO                                | FAIL hangs (stopped at 30 s)  |
| test_inputs  | a 2000 x 1 PNG (bound 1.5 GiB; this extract without    | FAIL peak 2.7-2.9 GiB         |
|              | it peaks at 0.8 GiB)                                   |                               |

After the issue-15 work (main of 2026-11-30, logged with CRS_FAULTS_LOG=FILE): all 42 end as the rule
asks. Every kill (extract x3 + csv, probe x3, score x3, report x2; SIGKILL and SIGTERM) ends in (a):
resumed, the outputs equal the uninterrupted run's. Every damaged store file (14 in test_damage, the
failures table x2) ends in (b): exit 2 naming the array and chunk or file, and the named repair
(`crs store verify --repair`, then `crs extract` / `crs probe`) restores equality. The bad CSVs are
refused naming their line (a padded label is read as meant, with a warning), `datasets check` refuses
the one-class and missing-class CSVs, the FIFO is refused without waiting, the 2000 x 1 PNG decodes
within the bound, and the two-writer cases either both succeed or one is refused naming the holder.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faultlib import baseline, csv_baseline, probe_ref, score_ref  # noqa: E402,F401  (fixtures)
