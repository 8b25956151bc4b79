"""CRS-Bench: which pretrained medical image encoder to build on.

The stages install as ``crs.extract``, ``crs.store``, ``crs.probe`` and
``crs.scoring``; this package holds the command line and the few shared types.
"""

__version__ = "0.1.0"
