"""What a consortium wants to see of merged results (docs/export-merge.md): each site's CRS beside the pooled one,
the pooled leader against every other encoder at each site, and how the leader and tier move when one site is left
out.

Every number here rescores the pooled bootstrap's own replicates restricted to some of its strata: a site's profile
is the CRS of its datasets alone (``crs.scoring.crs.point_estimate`` and ``bootstrap.score_replicates`` on the
replicate seed means of those datasets), so a site's interval and the pooled one come from the same draws of seeds
and images. Leave-one-site-out scores the strata of every other site the same way; its tier is
``bootstrap.summarise``'s, the simultaneous set for the best encoder the pooled score reports.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from crs.scoring import crs as core
from crs.scoring.bootstrap import CONFIDENCE, incomplete, interval, score_replicates, summarise


def _subset_score(boot, x: np.ndarray, cmp, options, keep: Sequence[int]):
    """(point CRS [encoder], replicates, summary table) of the strata ``keep`` (indices into ``cmp.datasets``)."""
    keep = list(keep)
    spread = None if boot.spread is None else boot.spread[:, :, keep]
    reps = score_replicates(boot.x[:, :, keep], cmp.reference, options.weights, options.crs_version, spread)
    point = core.point_estimate(x[:, keep], reps.noise, cmp.reference, options.weights, options.crs_version).crs
    return point, reps, summarise(reps, cmp.encoders, point, CONFIDENCE, cmp.reference)


def tier_of(summary) -> list[str] | None:
    """The encoders of the summary's tier, None where the bootstrap gave no set."""
    tier = summary["tier"].to_list()
    if any(t is None for t in tier):
        return None
    return [e for e, t in zip(summary["encoder"].to_list(), tier, strict=True) if t]


def _site_profile(site: str, datasets: list[str], scored, encoders: list[str], pooled_leader: int) -> dict:
    """One site: each encoder's CRS with its interval and rank, and CRS_e - CRS_(pooled leader) at the site with
    the percentile interval of that paired difference over the site's replicates."""
    point, reps, summary = scored
    low, high = interval(reps.crs)
    diff = reps.crs - reps.crs[:, [pooled_leader]]
    d_low, d_high = interval(diff)
    if incomplete(reps).any():  # a replicate without a CRS leaves no interval (bootstrap.summarise)
        low, high, d_low, d_high = (np.full(len(encoders), np.nan) for _ in range(4))
    d_low[pooled_leader] = d_high[pooled_leader] = 0.0
    rank = (-point).argsort(kind="stable").argsort() + 1
    rows = [{"encoder": e, "crs": point[i], "crs_low": low[i], "crs_high": high[i], "rank": int(rank[i]),
             "crs_diff": point[i] - point[pooled_leader], "crs_diff_low": d_low[i], "crs_diff_high": d_high[i]}
            for i, e in enumerate(encoders)]
    return {"site": site, "datasets": datasets, "leader": encoders[int(np.argmax(point))], "tier": tier_of(summary),
            "encoders": rows}


def consortium(boot, x: np.ndarray, cmp, options, site_of: dict[str, str], pooled_crs: np.ndarray,
               pooled_tier: list[str] | None) -> dict:
    """The ``sites`` section of a merged score's scores.json (the module's docstring says what it holds).

    ``site_of``: dataset -> its site (every dataset of ``cmp.datasets``); ``pooled_crs`` [encoder] and
    ``pooled_tier``: the pooled score's point CRS and tier."""
    encoders = list(cmp.encoders)
    leader = int(np.argmax(pooled_crs))
    sites = sorted({site_of[d] for d in cmp.datasets})
    strata = {s: [i for i, d in enumerate(cmp.datasets) if site_of[d] == s] for s in sites}
    profiles = [_site_profile(s, [cmp.datasets[i] for i in strata[s]], _subset_score(boot, x, cmp, options,
                                                                                        strata[s]),
                              encoders, leader) for s in sites]
    left_out = []
    for s in sites if len(sites) > 1 else []:
        point, _, summary = _subset_score(boot, x, cmp, options, [i for t in sites if t != s for i in strata[t]])
        lead = encoders[int(np.argmax(point))]
        left_out.append({"site": s, "leader": lead, "crs": point[encoders.index(lead)], "tier": tier_of(summary),
                         "leader_changes": lead != encoders[leader]})
    disagree = sorted({p["leader"] for p in profiles} - {encoders[leader]})
    return {"pooled_leader": encoders[leader], "pooled_tier": pooled_tier, "confidence": CONFIDENCE,
            "sites": profiles, "leave_one_site_out": left_out, "sites_disagree": bool(disagree),
            "method": "each site's CRS and the leave-one-site-out CRS rescore the pooled bootstrap's replicates "
                      "restricted to those strata (the same draws of seeds and images); crs_diff is CRS_e minus "
                      "the pooled leader's CRS at the site, its interval the percentile interval of that paired "
                      "difference"}


def with_sites(decided: dict, across: dict | None) -> dict:
    """The verdict with, for merged results, each site's leader and each leave-one-site-out leader
    (``crs.scoring.verdict.sites_sentence`` words them); unchanged for one site's own results."""
    if across is None:
        return decided
    return {**decided, "sites": {
        "pooled_leader": across["pooled_leader"], "disagree": across["sites_disagree"],
        "leaders": {p["site"]: p["leader"] for p in across["sites"]},
        "leave_one_site_out": {p["site"]: p["leader"] for p in across["leave_one_site_out"]}}}
