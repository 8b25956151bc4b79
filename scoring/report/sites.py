"""The per-site panel of a merged score's page (scores.json's ``sites``, ``crs.scoring.sites``): one narrow table a
site, so it reads on a phone, and the leave-one-site-out leaders; nothing for one site's own scores."""

from __future__ import annotations

from crs.scoring.report.markup import esc, interval, nobreak, num, td, th
from crs.scoring.verdict import percent

ANCHOR = "sites"
TITLE = "Sites"


def _site_table(profile: dict, pooled: str) -> str:
    rows = sorted(profile["encoders"], key=lambda r: (r["rank"], r["encoder"]))
    body = "".join(
        "<tr>" + td("encoder", r["encoder"] + (" (pooled leader)" if r["encoder"] == pooled else ""))
        + td("num", nobreak(f"{num(r['crs'], '.1f')} {interval(r['crs_low'], r['crs_high'])}"), r["crs"])
        + td("num", "0" if r["encoder"] == pooled else
             nobreak(f"{num(r['crs_diff'], '+.1f')} {interval(r['crs_diff_low'], r['crs_diff_high'], '+.1f')}"),
             r["crs_diff"])
        + "</tr>" for r in rows)
    tier = ", ".join(profile["tier"]) if profile.get("tier") else "n/a"
    head = "<tr>" + th("Encoder") + th("CRS", "this site's strata alone") + th(
        f"vs {pooled}", "CRS minus the pooled leader's CRS at this site, with its interval") + "</tr>"
    return (f"<h3>{esc(profile['site'])}</h3><p>Strata {esc(', '.join(profile['datasets']))}; leader "
            f"{esc(profile['leader'])}; tier {esc(tier)}.</p>"
            f"<div class='scroll'><table class='board sites'><thead>{head}</thead><tbody>{body}</tbody></table></div>")


def sites_html(sites: dict | None) -> str:
    """The panel, or '' where the scores are one site's own (no ``sites`` section)."""
    if not sites:
        return ""
    pooled, conf = sites["pooled_leader"], percent(float(sites.get("confidence") or 0.95))
    left = "".join(f"<li>Without {esc(x['site'])}: {esc(x['leader'])} leads"
                   + (" (the leader changes)" if x["leader_changes"] else "")
                   + f"; tier {esc(', '.join(x['tier']) if x.get('tier') else 'n/a')}.</li>"
                   for x in sites.get("leave_one_site_out", []))
    return "".join([
        f"<h2 id='{ANCHOR}'>{TITLE}</h2>",
        f"<p>Each site's CRS over its own strata, beside the pooled leader {esc(pooled)}; intervals are {conf} "
        "bootstrap intervals from the pooled bootstrap's replicates restricted to the site. A negative difference "
        f"means the encoder scores below {esc(pooled)} at that site.</p>",
        *[_site_table(p, pooled) for p in sites["sites"]],
        f"<h3>Leaving one site out</h3><ul>{left}</ul>" if left else "",
    ])
