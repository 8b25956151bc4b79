"""The stage folders install as ``crs.<stage>``: every package below each folder is found, so a new
subpackage (``crs/stages``, a ``scoring/v2``) cannot be left out of a wheel. The rest of the metadata
is in pyproject.toml."""

from setuptools import find_packages, setup

# package name -> the folder that holds it (STYLE.md: the repository root shows the pipeline)
ROOTS = {"crs": "crs", "crs.extract": "extract", "crs.store": "store", "crs.probe": "probe",
         "crs.scoring": "scoring"}

setup(package_dir=ROOTS,
      packages=[f"{name}.{sub}" if sub else name for name, folder in ROOTS.items()
                for sub in ("", *find_packages(folder))])
