"""The commands of ``crs``, one module a job: each parses its options, calls a stage of ``crs.stages`` and
prints. ``crs.cli`` registers them on the typer app.

console (where they print), exits (exit codes), common (shared options, commands made from the settings
schema), outputs (finding the demo's folders), tables (the terminal's tables), then a module per command:
extract, probe, score (and report), run (and demo), listings (encoders, datasets), datasets (check),
perturbations, store (verify, info).

The stages, the workers (crs.extract, crs.probe, crs.scoring) and polars are imported inside the command
functions that use them, so `crs --help` and the listings start without torch, JAX or polars.
"""
