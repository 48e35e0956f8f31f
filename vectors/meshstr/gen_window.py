#!/usr/bin/env python3
"""Generates vectors/meshstr/window.json: meshstr §6.3–§6.6 computed apart from weft's Rust, with
exact fractions, so the Rust code is checked against a second reading of the text.

Run from the repository root: python3 vectors/meshstr/gen_window.py > vectors/meshstr/window.json
Values the text leaves open follow docs/decisions.md (opening fraction 1/4, divergence floor =
probation ceiling, tier_base = the tier's ceiling, decay_idle_windows 6, S3 resumes at probation's
opening limits, a remedy never raises a limit, an unused limit never grows).
"""
import json
from fractions import Fraction as F

TIERS = ["probation", "member", "trusted", "anchor"]
LIMITS = ["conn_rate", "req", "events_in", "bytes_in", "bytes_out", "blob_bytes", "sync_ranges", "errors"]
COUNTERS = ["conn_open", "req", "events_in", "bytes_in", "bytes_out", "blob_bytes", "errors", "dups_sent", "sync_ranges"]
STRUCTURAL = {"conn_rate", "req", "sync_ranges", "errors"}
CEIL = {
    "conn_rate": [4, 12, 48, 192],
    "req": [60, 600, 2400, 9600],
    "events_in": [300, 3000, 12000, 48000],
    "bytes_in": [3355443, 33554432, 134217728, 536870912],
    "bytes_out": [26843545, 268435456, 1073741824, 4294967296],
    "blob_bytes": [1677721, 16777216, 67108864, 268435456],
    "sync_ranges": [100, 400, 1600, 6400],
    "errors": [4, 40, 160, 640],
}
WEIGHT = {"probation": "0.0", "member": "0.25", "trusted": "0.6", "anchor": "1.0"}
SEV = ["S0", "S1", "S2", "S3", "S4"]


def ceil(t, l):
    return CEIL[l][TIERS.index(t)]


def counter_of(l):
    return "conn_open" if l == "conn_rate" else l


def opening(t, l):
    c = ceil(t, l)
    return c if l in STRUCTURAL else (c * 1) // 4


def floor_of(l):
    return ceil("probation", l)


def overrun(m, lim):
    if lim == 0:
        return None if m > 0 else F(0)  # None: unbounded
    return max(F(0), F(m, lim) - 1)


def ge(o, t):
    return o is None or o >= t


def klass(o, div_over):
    by = "S3" if ge(o, 4) else "S2" if ge(o, 1) else "S1" if ge(o, F(1, 10)) else "S0"
    if div_over:
        return SEV[max(SEV.index(by), 2)]
    return by


def divergence(m, c, floor):
    d = max(m, floor)
    if d == 0:
        return None if m != c else F(0)
    return F(abs(m - c), d)


def div_over(d):
    return d is None or d > F(1, 10)


def evaluate(limits, measured, claimed):
    claim = claimed or {c: 0 for c in COUNTERS}
    sev = 0
    per = []
    for l in LIMITS:
        m = measured[counter_of(l)]
        s = klass(overrun(m, limits[l]), div_over(divergence(m, claim[counter_of(l)], floor_of(l))))
        per.append(s)
        sev = max(sev, SEV.index(s))
    dup = None
    ev = measured["events_in"]
    if ev >= floor_of("events_in"):
        ratio = F(measured["dups_sent"], ev) / F(15, 100)
        dup = klass(max(F(0), ratio - 1), False)
        sev = max(sev, SEV.index(dup))
    silence = claimed is None and any(measured[c] for c in COUNTERS)
    if silence:
        sev = max(sev, 2)
    return {"severity": SEV[sev], "per_limit": per, "dup_ratio": dup, "active_silence": silence}


def update(st, sev, measured, now):
    s = json.loads(json.dumps(st))
    if s["revoked"]:
        return s, None
    if s["suspended_until"] is not None and s["suspended_until"] <= now:
        s["suspended_until"] = None
        s["tier"] = "probation"
        s["limits"] = {l: opening("probation", l) for l in LIMITS}
    cause = None
    t = s["tier"]
    lim = s["limits"]
    if sev == "S0" and s["suspended_until"] is not None:
        pass
    elif sev == "S0" and measured is None:
        s["idle_windows"] = 0
        for l in LIMITS:
            lim[l] = lim[l] + (ceil(t, l) * 2) // 100
    elif sev == "S0" and not any(measured[c] for c in COUNTERS):
        s["idle_windows"] += 1
        if s["idle_windows"] >= 6:
            for l in LIMITS:
                if lim[l] > opening(t, l):
                    lim[l] = max(opening(t, l), (lim[l] * 9) // 10)
                    cause = "disuse"
    elif sev == "S0":
        s["idle_windows"] = 0
        for l in LIMITS:
            used = measured[counter_of(l)]
            if used == 0:
                if lim[l] > opening(t, l):
                    lim[l] = max(opening(t, l), (lim[l] * 9) // 10)
                    cause = "disuse"
            else:
                base = ceil(t, l)
                strain = F(1) if lim[l] == 0 else min(F(1), F(used, lim[l]))
                step = max(F(2, 100), F(1, 10) * strain) * base
                # Each product is rounded down on its own: floor(base*2/100) vs floor(base*strain/10).
                lim[l] = lim[l] + max((base * 2) // 100, int(F(1, 10) * strain * base))
                del step
    elif sev == "S1":
        s["idle_windows"] = 0
        for l in LIMITS:
            lim[l] = min(lim[l], max(ceil("probation", l), lim[l] // 2))
        cause = "remedy"
    elif sev == "S2":
        s["idle_windows"] = 0
        for l in LIMITS:
            lim[l] = min(lim[l], max(ceil("probation", l), lim[l] // 4))
        s["tier"] = "probation"
        cause = "remedy"
    elif sev == "S3":
        s["idle_windows"] = 0
        s["limits"] = {l: 0 for l in LIMITS}
        s["tier"] = "probation"
        s["suspended_until"] = now + 86400
        cause = "remedy"
    elif sev == "S4":
        s["limits"] = {l: 0 for l in LIMITS}
        s["tier"] = "probation"
        s["suspended_until"] = None
        s["revoked"] = True
    if not s["revoked"]:
        for l in LIMITS:
            s["limits"][l] = min(s["limits"][l], ceil(s["tier"], l))
    return s, cause


def counters(**kw):
    c = {k: 0 for k in COUNTERS}
    c.update(kw)
    return c


def state(tier, limits=None, **kw):
    s = {"tier": tier, "limits": limits or {l: opening(tier, l) for l in LIMITS},
         "suspended_until": None, "idle_windows": 0, "revoked": False}
    s.update(kw)
    return s


def main():
    out = {
        "source": "meshstr/0-draft §6.2–§6.6 (shared/specs/004_38a2d0b232bbbb97.txt), the table and worked "
                  "numbers as printed; the class, evaluate and update cases generated by gen_window.py "
                  "with exact fractions, apart from weft's Rust",
        "ceilings": CEIL,
        "tier_weights": WEIGHT,
        "dup_ratio_ceiling": "0.15",
        "worked": [
            {"note": "twenty anchor grants each inside its own limit is 960,000 events an hour (§6.4)",
             "grants": 20, "tier": "anchor", "limit": "events_in", "per_grant": ceil("anchor", "events_in"),
             "aggregate": 20 * ceil("anchor", "events_in"), "expected": 960000,
             "declared_total": 1000000, "pressure_milli": 960, "rung": "amend_down"},
        ],
        "receipt_window": {"note": "the §6.2 receipt example: at 1787003600 is in window 496389 of an hour",
                           "at": 1787003600, "window_secs": 3600, "window": 496389},
        "schedule": [
            {"note": "a schedule ratio 1.1 is 110% of the limit, an overrun threshold of 0.1 (§6.5)",
             "ratio": "1.1", "overrun_threshold": "0.1"},
        ],
        "class": [],
        "evaluate": [],
        "update": [],
    }
    for (m, lim, c, fl, branch) in [
        (0, 100, 0, 100, "S0 nothing"),
        (109, 100, 109, 100, "S0 just under 0.1"),
        (110, 100, 110, 100, "S1 at overrun 0.1"),
        (199, 100, 199, 100, "S1 under 1.0"),
        (200, 100, 200, 100, "S2 at overrun 1.0"),
        (499, 100, 499, 100, "S2 under 4.0"),
        (500, 100, 500, 100, "S3 at overrun 4.0"),
        (1, 0, 1, 100, "S3 any traffic against a zero limit"),
        (0, 0, 0, 100, "S0 nothing against a zero limit"),
        (100, 100, 90, 100, "S0 divergence exactly 0.1 is not above it"),
        (100, 100, 89, 100, "S2 divergence above 0.1 floors at S2"),
        (150, 100, 100, 100, "S2 overrun S1 plus divergence: worse(S1, S2)"),
        (600, 100, 0, 100, "S3 divergence never lowers S3"),
        (40, 100, 0, 300, "S2 under the floor: 40/300 is above 0.1"),
        (20, 100, 5, 300, "S0 under the floor: 15/300 is 0.05"),
    ]:
        o = overrun(m, lim)
        d = divergence(m, c, fl)
        out["class"].append({"branch": branch, "measured": m, "limit": lim, "claimed": c, "floor": fl,
                             "severity": klass(o, div_over(d))})
    member = {l: opening("member", l) for l in LIMITS}
    cases = [
        ("clean: measured equals the claim", member, counters(req=10, events_in=20), counters(req=10, events_in=20)),
        ("S1 on events_in", member, counters(events_in=member["events_in"] * 11 // 10), "same"),
        ("S2 overrun on req", member, counters(req=member["req"] * 2), "same"),
        ("S3 overrun on bytes_in", member, counters(bytes_in=member["bytes_in"] * 5), "same"),
        ("S2 misreport: events_in claimed low", member, counters(events_in=1000), counters(events_in=800)),
        ("active silence: traffic and no receipt", member, counters(req=1), None),
        ("active silence takes the worse: S3 overrun and no receipt", member, counters(req=member["req"] * 5), None),
        ("no traffic and no receipt is clean", member, counters(), None),
        ("dup_ratio S1 at 0.165", member, counters(events_in=700, dups_sent=116), "same"),
        ("dup_ratio S0 under 0.165", member, counters(events_in=700, dups_sent=115), "same"),
        ("dup_ratio S3 at 0.75", member, counters(events_in=700, dups_sent=525), "same"),
        ("dup_ratio not evaluated under the events_in floor", member, counters(events_in=299, dups_sent=299), "same"),
    ]
    for note, lims, meas, claim in cases:
        if claim == "same":
            claim = meas
        e = evaluate(lims, meas, claim)
        out["evaluate"].append({"note": note, "limits": lims, "measured": meas, "claimed": claim, **e})
    anchor_full = {l: ceil("anchor", l) for l in LIMITS}
    member_full = {l: ceil("member", l) for l in LIMITS}
    low = dict(member)
    low["req"] = 10
    ucases = [
        ("clean, full strain: +10% of the tier base", state("member"), "S0", {c: (member[c] if c in member else 0) for c in COUNTERS} | {"conn_open": member["conn_rate"]}, 0),
        ("clean, small strain: the 2% floor step", state("member"), "S0", counters(conn_open=1, req=1, events_in=1, bytes_in=1, bytes_out=1, blob_bytes=1, errors=1, sync_ranges=1), 0),
        ("clean, half strain on events_in", state("member"), "S0", counters(events_in=member["events_in"] // 2, req=1), 0),
        ("clean, no measurement: the floor step, no decay", state("member", member_full), "S0", None, 0),
        ("clean, an unused limit above opening decays by disuse", state("member", member_full), "S0", counters(req=5), 0),
        ("clean, an unused limit at opening stays", state("member"), "S0", counters(req=5), 0),
        ("idle window below decay_idle_windows: nothing moves", state("trusted", {l: ceil("trusted", l) for l in LIMITS}, idle_windows=4), "S0", counters(), 0),
        ("idle window reaching decay_idle_windows: the whole grant decays", state("trusted", {l: ceil("trusted", l) for l in LIMITS}, idle_windows=5), "S0", counters(), 0),
        ("clean growth clamped at the ceiling", state("anchor", anchor_full), "S0", counters(**{counter_of(l): anchor_full[l] for l in LIMITS}), 0),
        ("S1 halves", state("anchor", anchor_full), "S1", None, 0),
        ("S1 floors at the probation ceiling", state("member"), "S1", None, 0),
        ("S1 never raises a limit set below probation", state("member", low), "S1", None, 0),
        ("S2 makes a stranger: the probation ceiling decides", state("anchor", anchor_full), "S2", None, 0),
        ("S3 zero for 24h", state("trusted"), "S3", None, 1787000400),
        ("S3 still suspended: a clean window moves nothing", state("probation", {l: 0 for l in LIMITS}, suspended_until=1787086800), "S0", counters(req=1), 1787040000),
        ("S3 over: resume at probation's opening limits, then the clean step", state("probation", {l: 0 for l in LIMITS}, suspended_until=1787086800), "S0", None, 1787086800),
        ("S4 revoked", state("trusted"), "S4", None, 0),
        ("revoked stays revoked", state("probation", {l: 0 for l in LIMITS}, revoked=True), "S0", counters(req=1), 0),
    ]
    for note, st, sev, meas, now in ucases:
        after, cause = update(st, sev, meas, now)
        out["update"].append({"note": note, "before": st, "severity": sev, "measured": meas, "now": now,
                              "after": after, "cause": cause})
    print(json.dumps(out, indent=1))


main()
