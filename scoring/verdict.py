"""The verdict: who leads, which encoders could be the best, why, how sure, and what would settle it.

``build`` turns the scores (the encoder table, the weight-sensitivity tables, the settings and the plans of
``settle``) into data; ``sentences`` turns that data into a few plain sentences for the terminal and the
report. The sentences never claim more than the bootstrap allows: they lead with P(rank 1), then the
simultaneous 95 % set for the best encoder (``best_set``, the table's tier column), then, for each other
member, what test images or seeds would tell it from the leader (``settle.plan``).

What decides a gap (docs/crs-v1.md section 3). CRS is not a sum over axes (balance is a
geometric mean, worst axis a minimum, dominance a count), so the gap between a member m
and the leader is attributed one axis at a time: give m the leader's q on axis a, keep
everything else, recompute every encoder's components, and see how much of the gap
closes. An axis that closes a positive part of the gap is one where m is behind; one
that widens it is one where m is ahead.

How far the weights can move. With the components fixed, CRS is linear in the weights
w = (w_dom, w_bal, w_worst): CRS_L - CRS_c = 100 w . d with d = comp_L - comp_c. The
cheapest move of weight that makes c tie the leader shifts mass from the components
where d is largest to the one where it is smallest (a greedy transport, exact for a
linear objective on the simplex); ``weight_margin`` is the smallest such move over all
challengers, as the share of the total weight moved (0.1 = a tenth of the weight).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from crs.foundations.errors import BadInput
from crs.scoring import crs as core
from crs.scoring.axes import AXES, REGISTRY

COMPONENTS = ("dominance", "balance", "worst_axis")
CONFIDENCE = 0.95
DECIDING_SHARE = 0.25  # an axis decides a gap when it closes at least this share of the gap's positive parts


def _num(value) -> float | None:
    if value is None:
        return None
    v = float(value)
    return None if math.isnan(v) else v


def _weights(settings: dict) -> np.ndarray:
    w = settings.get("weights") or {}
    if isinstance(w, dict):
        return np.asarray([float(w.get(c, 1 / 3)) for c in COMPONENTS])
    return np.asarray([float(v) for v in w])


def _version(settings: dict) -> str:
    """The CRS version the settings record; BadInput where they record none (every score records one)."""
    if "crs_version" not in settings:
        raise BadInput("the scores' settings record no CRS version (crs_version); re-run `crs score` to write them "
                       "again")
    return core.check_version(settings["crs_version"])


def _q(encoders: pl.DataFrame) -> np.ndarray | None:
    cols = [f"q_{a}" for a in AXES]
    if not set(cols) <= set(encoders.columns):
        return None
    q = encoders.select(cols).to_numpy().astype(float)  # [encoder, axis]
    return None if np.isnan(q).any() else q


def axis_effects(q: np.ndarray, leader: int, member: int, weights: Sequence[float],
                 version: str = core.LATEST) -> np.ndarray:
    """[axis]: how much of CRS_leader - CRS_member closes when the member gets the leader's q on that axis."""
    base = core.components(q, weights, version).crs
    gap = base[leader] - base[member]
    out = np.empty(q.shape[1])
    for a in range(q.shape[1]):
        moved = q.copy()
        moved[member, a] = q[leader, a]
        crs = core.components(moved, weights, version).crs
        out[a] = gap - (crs[leader] - crs[member])
    return out


def _deciding(effects: np.ndarray, q: np.ndarray, leader: int, member: int) -> list[dict]:
    """The axes that decide a member's gap, largest share first, and the axes where it is ahead."""
    behind = [a for a in np.argsort(-effects) if effects[a] > 1e-9]
    total = float(sum(effects[a] for a in behind))
    rows = []
    for a in range(len(AXES)):
        e = float(effects[a])
        deciding = e > 1e-9 and total > 0 and (e >= DECIDING_SHARE * total or a == (behind[0] if behind else -1))
        ahead = e < -1e-9
        if deciding or ahead:
            rows.append({"axis": AXES[a], "symbol": REGISTRY[AXES[a]].symbol, "effect": e,
                         "member_q": float(q[member, a]), "leader_q": float(q[leader, a]),
                         "where": "behind" if deciding else "ahead"})
    return sorted(rows, key=lambda r: -abs(r["effect"]))


def weight_move(d: np.ndarray, w: np.ndarray) -> dict | None:
    """The least weight moved (share of the total) that makes w . d <= 0, with where from and to; None if none."""
    gap = float(w @ d)
    if gap <= 0:
        return {"moved": 0.0, "from": [], "to": None, "weights": w.tolist()}
    to = int(np.argmin(d))
    new, moved, left, taken = w.astype(float).copy(), 0.0, gap, []
    for i in np.argsort(-d):
        if left <= 1e-15 or d[i] <= d[to]:
            break
        rate = d[i] - d[to]  # gap closed per unit of weight moved from i to `to`
        t = min(new[i], left / rate)
        if t <= 0:
            continue
        new[i] -= t
        new[to] += t
        moved += t
        left -= t * rate
        taken.append(COMPONENTS[i])
    if left > 1e-12:
        return None
    return {"moved": moved, "from": taken, "to": COMPONENTS[to], "weights": new.tolist()}


def _weight_margin(enc: pl.DataFrame, leader: int, w: np.ndarray) -> dict | None:
    if not set(COMPONENTS) <= set(enc.columns) or enc.height < 2:
        return None
    comp = enc.select(COMPONENTS).to_numpy().astype(float)  # [encoder, component]
    if np.isnan(comp).any():
        return None
    best = None
    for c in range(enc.height):
        if c == leader:
            continue
        move = weight_move(comp[leader] - comp[c], w)
        if move is not None and (best is None or move["moved"] < best["moved"]):
            best = {"encoder": enc["encoder"][c], **move}
    return best


def _grid_shares(weight_leaders: pl.DataFrame | None) -> list[dict]:
    if weight_leaders is None or not weight_leaders.height or "share" not in weight_leaders.columns:
        return []
    return [{"encoder": r["encoder"], "share": float(r["share"])}
            for r in weight_leaders.select("encoder", "share").iter_rows(named=True)]


def _diff(row: dict, lead: dict) -> tuple[float | None, float | None, float | None]:
    """The paired difference (member - leader) and its interval: the table's columns, else None."""
    d = _num(row.get("crs_diff"))
    if d is None and _num(row.get("crs")) is not None and _num(lead.get("crs")) is not None:
        d = _num(row["crs"]) - _num(lead["crs"])
    return d, _num(row.get("crs_diff_low")), _num(row.get("crs_diff_high"))


def _sets_known(enc: pl.DataFrame) -> bool:
    """Whether the bootstrap gave the best set: a tier column with a value in every row."""
    return enc.height > 1 and "tier" in enc.columns and enc["tier"].null_count() == 0


NO_INTERVAL = "the bootstrap gave no interval, so there is no set for the best encoder"
SET_WHY = ("a simultaneous set, allowing for every comparison and for the leader being chosen from the same data, "
           "that keeps every encoder not clearly behind the leader")
NO_PLAN = ("no plan to settle the set: it needs the bootstrap of seeds and test images together "
           "(--bootstrap-unit both)")


def build(encoders: pl.DataFrame, weight_leaders: pl.DataFrame | None = None,
          weight_grid: pl.DataFrame | None = None, settings: dict | None = None,
          settle: list[dict] | None = None) -> dict:
    """The verdict as data (JSON-able): leader, P(rank 1), the best set (the table's tier column,
    ``best_set.best_set``) and what it means, each member's gap and what decides it, the encoders outside
    the set, the plans that would settle it (``settle``: the score's ``settle.plans``, None where it made
    none), the least weight change that changes the leader, the reference."""
    settings = settings or {}
    boot = settings.get("bootstrap") or {}
    conf = float(boot.get("confidence", CONFIDENCE))
    out = {"leader": None, "p_rank1": None, "best_set": None, "members": [], "behind": [], "settle": settle or [],
           "n_seeds": len(settings.get("seeds") or []) or None, "weight_margin": None,
           "weight_shares": _grid_shares(weight_leaders), "reference": settings.get("reference"),
           "confidence": conf, "unit": boot.get("unit"), "intervals": False, "notes": []}
    if encoders is None or not encoders.height or "crs" not in encoders.columns:
        out["notes"].append("no encoder has a CRS")
        return out
    # values no probe could measure (crs.scoring.measurable) decide nothing: no leader, no tier
    out["not_measurable"] = list(settings.get("not_measurable") or [])
    if out["not_measurable"]:
        out["settle"] = []
        out["notes"].extend(f"not measurable: {u['dataset']} ({', '.join(u['axes'])}): {u['reason']}"
                            for u in out["not_measurable"])
        return out
    enc = encoders.filter(pl.col("crs").is_not_nan()).sort(["crs", "encoder"], descending=[True, False])
    if not enc.height:
        out["notes"].append("no encoder has a CRS")
        return out
    rows = enc.to_dicts()
    lead = rows[0]
    out.update(leader=lead["encoder"], p_rank1=_num(lead.get("p_rank1")), crs=_num(lead["crs"]),
               intervals=_sets_known(enc))
    q, w, version = _q(enc), _weights(settings), _version(settings)
    for i, row in enumerate(rows[1:], start=1):
        d, lo, hi = _diff(row, lead)
        inside = bool(row["tier"]) if out["intervals"] else None
        entry = {"encoder": row["encoder"], "crs": _num(row["crs"]), "crs_diff": d, "crs_diff_low": lo,
                 "crs_diff_high": hi, "in_best_set": inside, "tie_group": row.get("tie_group")}
        if inside:
            entry["deciding_axes"] = [] if q is None else _deciding(axis_effects(q, 0, i, w, version), q, 0, i)
            out["members"].append(entry)
        else:
            out["behind"].append(entry)
    if out["intervals"]:
        out["best_set"] = {"encoders": [lead["encoder"]] + [m["encoder"] for m in out["members"]],
                           "confidence": conf,
                           "meaning": f"With {percent(conf)} confidence the best encoder is one of these ({SET_WHY})."}
    if len(rows) > 1:
        out["weight_margin"] = _weight_margin(enc, 0, w)
    if not out["intervals"] and len(rows) > 1:
        out["notes"].append(NO_INTERVAL)
    if settle is None and out["members"] and out["unit"] not in (None, "both"):
        out["notes"].append(NO_PLAN)
    return out


# ------------------------------------------------------------------ words
def _f(v: float | None, spec: str = ".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def percent(p: float) -> str:
    """A share in whole per cent, never rounded to a certainty: '>99 %' and '<1 %' at the ends."""
    pct = round(100 * p)
    return ">99 %" if pct >= 100 else "<1 %" if pct <= 0 else f"{pct} %"


def _interval(m: dict) -> str:
    if m.get("crs_diff_low") is None:
        return f"difference {_f(m.get('crs_diff'), '+.1f')}"
    return (f"difference {_f(m.get('crs_diff'), '+.1f')} "
            f"[{_f(m['crs_diff_low'], '+.1f')}, {_f(m['crs_diff_high'], '+.1f')}]")


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _axes_words(axes: list[dict]) -> str:
    behind = [a for a in axes if a["where"] == "behind"]
    ahead = [a for a in axes if a["where"] == "ahead"]
    parts = []
    if behind:
        parts.append("the gap comes from " + _listed([
            f"{a['axis'].replace('_', ' ')} (q {a['member_q']:+.2f} vs {a['leader_q']:+.2f})" for a in behind]))
    if ahead:
        parts.append("it is ahead on " + _listed([a["axis"].replace("_", " ") for a in ahead]))
    return "; ".join(parts)


def settle_words(p: dict, leader: str, n_seeds: int | None) -> str:
    """One sentence of a ``settle.plan``: what would tell its encoder from the leader."""
    b, now = p["encoder"], f"at {n_seeds} seeds" if n_seeds else "at today's seeds"
    why = (f" ({percent(p['power'])} power to detect a true gap of {p['min_difference']:g} CRS points; "
           f"{percent(p['current_power'])} today).")
    if p["current_power"] >= p["power"]:
        return (f"Today's data would detect a true gap of {p['min_difference']:g} CRS points between {b} and "
                f"{leader} {percent(p['current_power'])} of the time, so a real gap is likely smaller than that.")
    if p["images"] is None and p["seeds"] is None:
        both = p.get("together") or {}
        sizes = [f"{n:,}{' test images' if not i else ''} on {d}"
                 for i, (d, n) in enumerate((both.get("images") or {}).items())]
        sizes = _listed(sizes) if sizes else ""
        grow = f": about {sizes} with {both['seeds']:,} seeds would" if sizes and both.get("seeds") else ""
        return (f"Neither more test images nor more seeds alone would settle {b} against {leader}; both must "
                f"grow{grow}" + why)
    if p["images"] is None:
        return f"No number of test images settles {b} against {leader} {now}: about {p['seeds']:,} seeds would" + why
    sizes = [f"{n:,}{' test images' if not i else ''} on {d}" for i, (d, n) in enumerate(p["images"].items())]
    sizes = _listed(sizes) if sizes else f"{p['image_factor']:.2g} times today's test images"
    seeds = f", or about {p['seeds']:,} seeds at today's test images," if p["seeds"] is not None else ""
    return f"About {sizes} {now}{seeds} would settle {b} against {leader}" + why


def scale_sentence(reference: str | None, reference_crs: float | None = None) -> str:
    """What CRS 50 means, in one sentence that agrees with the reference's own row of the table.

    The reference has q = 0 on every axis, so its balance and worst axis are 0.5 and its CRS is
    50 + 100 w_dom (dominance - 0.5): 50 only where it dominates as much as it is dominated."""
    if not reference or reference == core.MEDIAN:
        return "CRS 50 is the level of the per-axis median encoder on every axis, neither dominating nor dominated."
    if reference_crs is None or round(reference_crs, 1) == 50.0:
        return f"CRS 50 is {reference}'s level on every axis."
    why = "it is dominated more than it dominates" if reference_crs < 50 else "it dominates more than it is dominated"
    return f"CRS 50 is {reference}'s level on every axis; {reference} itself scores {_f(reference_crs)} because {why}."


def _crs_of(v: dict, encoder: str) -> float | None:
    """The CRS the verdict records for ``encoder`` (the leader, a member or one behind), else None."""
    if v.get("leader") == encoder:
        return _num(v.get("crs"))
    return next((_num(m.get("crs")) for m in [*v.get("members", []), *v.get("behind", [])]
                 if m.get("encoder") == encoder), None)


def _reference_sentence(v: dict) -> str | None:
    ref = v.get("reference")
    return scale_sentence(ref, _crs_of(v, ref) if ref else None) if ref else None


COLLAPSE_AUROC = 0.6  # below this mean AUROC on a shift target an encoder is at chance there, for the verdict


def shift_collapse(robustness: pl.DataFrame, level: float = COLLAPSE_AUROC) -> list[dict]:
    """The shift targets on which every encoder collapsed: each one's seed-mean AUROC there below ``level``
    (chance is 0.5). One entry per (dataset, target): its AUROC range over the encoders."""
    if robustness is None or not robustness.height or not {"kind", "auroc"} <= set(robustness.columns):
        return []
    shifted = robustness.filter(pl.col("kind") == "shift")
    out = []
    for (dataset, condition), g in shifted.group_by("dataset", "condition", maintain_order=True):
        auroc = g["auroc"].cast(pl.Float64).fill_nan(None)
        if auroc.null_count() == 0 and bool((auroc < level).all()):
            out.append({"dataset": dataset, "target": str(condition).removeprefix("shift:"),
                        "auroc_low": float(auroc.min()), "auroc_high": float(auroc.max()),
                        "encoders": g.height, "level": level})
    return sorted(out, key=lambda c: (c["dataset"], c["target"]))


def _collapse_sentence(v: dict) -> str | None:
    """Every encoder at chance on a shift target: a limit of the whole comparison, whatever the ranking."""
    gone = v.get("shift_collapse") or []
    if not gone:
        return None
    where = _listed([f"{c['target']} (the shift target of {c['dataset']}; AUROC {c['auroc_low']:.2f}-"
                     f"{c['auroc_high']:.2f})" for c in gone])
    return (f"Every encoder is near chance on {where}, all below {gone[0]['level']:.2f} where 0.5 is chance, so "
            "none of them can be trusted at that site, whatever its CRS.")


def _weight_sentence(v: dict) -> str | None:
    m, shares = v.get("weight_margin"), v.get("weight_shares") or []
    text = ""
    if m is None and v.get("leader") is not None and len(shares) <= 1:
        text = f"{v['leader']} leads at every weighting of the three components."
    elif m is not None:
        frm = " and ".join(c.replace("_", " ") for c in m["from"]) or "the components"
        text = (f"Moving {m['moved']:.2f} of the weight from {frm} to {str(m['to']).replace('_', ' ')} "
                f"would make {m['encoder']} level with the leader.")
    if len(shares) > 1:
        text += " Across all weightings of the components, the leader is " + ", ".join(
            f"{s['encoder']} on {100 * s['share']:.0f} %" for s in shares) + " of the grid."
    return text.strip() or None


def _set_sentences(v: dict, conf: str) -> list[str]:
    """The best set, each member's gap and plan, and the encoders outside the set."""
    leader, members = v["leader"], v.get("members", [])
    if not members:
        out = [f"With {conf} confidence {leader} is the best encoder ({SET_WHY})."]
    else:
        names = _listed([leader] + [m["encoder"] for m in members])
        out = [f"With {conf} confidence the best encoder is one of {names} ({SET_WHY})."]
    plans = {p["encoder"]: p for p in v.get("settle") or []}
    for m in members:
        words = _axes_words(m.get("deciding_axes") or [])
        out.append(f"{m['encoder']} against {leader}: {_interval(m)}" + (f"; {words}." if words else "."))
        if m["encoder"] in plans:
            out.append(settle_words(plans[m["encoder"]], leader, v.get("n_seeds")))
    behind = v.get("behind", [])
    if behind:
        out.append("Outside the set: " + ", ".join(f"{b['encoder']} ({_interval(b)})" for b in behind) + ".")
    return out


def sites_sentence(v: dict) -> str | None:
    """For merged results (``crs.scoring.sites.with_sites``): which site each leader leads at when the sites disagree,
    and which left-out site changes the leader; None when they agree and no site changes it."""
    s = v.get("sites")
    if not s:
        return None
    pooled, out = s["pooled_leader"], []
    if s["disagree"]:
        by_leader: dict[str, list[str]] = {}
        for site, lead in sorted(s["leaders"].items()):
            by_leader.setdefault(lead, []).append(site)
        own = by_leader.pop(pooled, None)
        where = "; ".join(f"{lead} leads at {_listed(sites)}" for lead, sites in sorted(by_leader.items()))
        at = f"and at {_listed(own)}" if own else "but at no site alone"
        out.append(f"The sites disagree about the leader: {pooled} leads the pooled score {at}; {where}.")
    moved = {site: lead for site, lead in sorted(s["leave_one_site_out"].items()) if lead != pooled}
    out.extend(f"Leaving out {site} makes {lead} the leader." for site, lead in moved.items())
    if s["disagree"] and s["leave_one_site_out"] and not moved:
        out.append(f"Leaving out any one site keeps {pooled} the leader.")
    return " ".join(out) or None


def sentences(v: dict) -> list[str]:
    """A few plain sentences that say no more than the numbers in ``v`` (from ``build``)."""
    if not v or v.get("leader") is None:
        return ["No verdict: " + ("; ".join(v.get("notes", [])) if v else "no scores") + "."]
    conf = percent(float(v.get("confidence") or CONFIDENCE))
    leader = v["leader"]
    p = v.get("p_rank1")
    out = [f"{leader} ranks first in {percent(p)} of the bootstrap replicates and has the highest CRS "
           f"({_f(v.get('crs'))})." if p is not None else f"{leader} has the highest CRS ({_f(v.get('crs'))})."]
    if v.get("intervals"):
        out.extend(_set_sentences(v, conf))
    elif v.get("members") or v.get("behind"):
        out.append("The bootstrap gave no intervals, so this run cannot say which encoders could be the best.")
    for s in (_collapse_sentence(v), _weight_sentence(v), _reference_sentence(v), sites_sentence(v)):
        if s:
            out.append(s)
    # what else the score says about itself (e.g. axes resting on tied AUROCs: crs.scoring.diagnostics)
    out.extend(f"Note: {n}." for n in v.get("notes", []) if n != NO_INTERVAL)
    return out
