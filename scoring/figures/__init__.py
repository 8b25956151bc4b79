"""The report's figures: polars tables from ``crs score`` -> matplotlib Figures.

Every function takes the score tables and returns a ``matplotlib.figure.Figure`` (built
without pyplot, so nothing global is kept), or raises ``Absent`` saying which input is
missing, so the page can say so in that section. Every axes gets an x and a y label;
colours come from the Okabe-Ito palette (distinguishable with the common forms of colour
blindness), with markers cycling too once there are more than eight encoders.
matplotlib is imported here only, and this package only by ``report``: ``style`` holds what every
figure shares, ``ranking``, ``calibration`` and ``robustness`` the figures of each part of the page.
"""

import matplotlib

matplotlib.use("Agg")  # before any figure module: no display, nothing global

from crs.scoring.figures.calibration import (  # noqa: E402
    ece_before_after,
    reliability_bins,
    reliability_diagrams,
)
from crs.scoring.figures.ranking import (  # noqa: E402
    COSTS,
    cost_front,
    cost_quality,
    pareto,
    profiles,
    rank_distribution,
    rank_slope,
    reference_profile,
    weight_map,
)
from crs.scoring.figures.robustness import (  # noqa: E402
    FAMILY_GROUPS,
    family_group,
    label_efficiency,
    robustness,
    robustness_grid,
    shift_gap,
)
from crs.scoring.figures.style import (  # noqa: E402
    AXIS_SHORT,
    DPI,
    MARKERS,
    PALETTE,
    REFERENCE_EDGE,
    REFERENCE_TAG,
    SCALAR_CMAP,
    Absent,
    keep_apart,
    overlapping_texts,
    styles,
    text_boxes,
)

__all__ = [
    "AXIS_SHORT", "COSTS", "DPI", "FAMILY_GROUPS", "MARKERS", "PALETTE", "REFERENCE_EDGE",
    "REFERENCE_TAG", "SCALAR_CMAP", "Absent", "cost_front", "keep_apart", "overlapping_texts", "text_boxes",
    "cost_quality", "ece_before_after", "family_group",
    "label_efficiency", "pareto", "profiles", "rank_distribution", "rank_slope", "reference_profile",
    "reliability_bins", "reliability_diagrams", "robustness", "robustness_grid", "shift_gap", "styles",
    "weight_map",
]
