"""The ground floor: what every stage and command shares (names, errors, the settings schema, run
records, labels, strata, files, forms, provenance, the per-image table, the progress interface). It
imports no stage and no command."""
