import json

from crs import __version__
from crs.foundations import provenance


def test_collect_is_json_and_names_version_python_and_libraries():
    block = provenance.collect({"seeds": 5})
    json.dumps(block)  # goes into zarr attrs, Parquet metadata and scores.json as it is
    assert block["crs_bench"] == __version__
    assert block["settings"] == {"seeds": 5}
    assert block["python"].count(".") == 2
    assert set(provenance.LIBRARIES) <= set(block["libraries"])
    assert block["libraries"]["numpy"] != "not installed"
    assert block["created"].endswith("+00:00")


def test_version_line_names_the_commit_of_a_checkout():
    line = provenance.version_line()
    assert line.startswith(f"crs-bench {__version__}")
    commit = provenance.git_commit()
    assert (commit is None) or (commit.split("+")[0] in line and len(commit.split("+")[0]) == 40)
