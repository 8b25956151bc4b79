"""The commands that only print fixed data (every --help, `crs encoders`, `crs datasets`, `crs perturbations
--table`) import no torch and no JAX: checked in a fresh interpreter, by what is in sys.modules, not by a clock."""

import json
import subprocess
import sys

HEAVY = ("torch", "torchvision", "timm", "transformers", "jax", "jaxlib", "flax", "optax")

# In a fresh interpreter: run each command through the app, then name the heavy modules that got imported.
RUNNER = """
import json, sys
import typer
from typer.testing import CliRunner
from crs.cli import app

def commands(cmd, prefix):
    yield prefix
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from commands(sub, prefix + [name])

runs = json.loads(sys.argv[1])
runs += [c + ["--help"] for c in commands(typer.main.get_command(app), [])]
runner = CliRunner()
for args in runs:
    r = runner.invoke(app, args)
    if r.exit_code != 0:
        sys.exit(f"crs {' '.join(args)} exited {r.exit_code}: {r.output}")
heavy = json.loads(sys.argv[2])
print(json.dumps({"runs": len(runs), "imported": sorted(m for m in sys.modules if m.split(".")[0] in heavy)}))
"""


def test_listing_commands_and_every_help_import_no_torch_or_jax():
    listing = [["encoders"], ["encoders", "--json"], ["datasets"], ["datasets", "--json"],
               ["perturbations", "--table"], ["perturbations", "--table", "--json"]]
    p = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(listing), json.dumps(HEAVY)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["runs"] > len(listing) + 10  # every command's --help ran too
    assert got["imported"] == []



def test_the_encoder_and_perturbation_listings_and_every_help_import_no_array_library():
    """`crs datasets` reads its registry's tables (polars, PIL); the others print records and need none."""
    listing = [["encoders"], ["encoders", "--json"], ["perturbations", "--table"]]
    p = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(listing),
                        json.dumps(["numpy", "polars", "zarr", "PIL", "scipy", "numba"])],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["imported"] == []
