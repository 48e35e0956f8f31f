#!/usr/bin/env python3
"""An independent reading of meshstr/0-draft: the worked examples, and a check of weft's outputs.

No public meshstr implementation exists to interoperate with, so this file is the second reading.
It was written from the spec text (shared/specs/004_38a2d0b232bbbb97.txt), NIP-01, BIP-340,
RFC 5869 (HKDF), RFC 7748 (X25519) and RFC 8032 (Ed25519) only. It imports nothing of weft's and
reads none of weft's code; the only weft files it reads are the three schema data files the §10
digest is taken over. Python's standard library only.

Where the text leaves a value open, the value weft chose is written below under DECISIONS, each
naming its docs/decisions.md row: that is a reading of a decision, not of weft's code.

    python3 vectors/meshstr/independent.py > vectors/meshstr/examples.json
        the artefacts the spec prints (§2.2 descriptor, §6.2 receipt body, §3.1 handover body,
        §5 delivery hops, §3.3 endpoints digest, §6.4's 960 000), placeholders filled, replayed
        against weft by proto/tests/meshstr_examples.rs;

    python3 vectors/meshstr/independent.py check FILE
        recomputes every value in FILE, which weft wrote (receipt chains, handover chains, hop
        paths, descriptors, window evaluations and AIMD updates, transport ladders, replication
        winners and order, grant envelopes, reports), prints one `ok:` line per section and a
        `FAIL:` line per disagreement, and exits 1 if there was any
        (proto/tests/meshstr_examples.rs `meshstr_independent_reading_agrees_with_weft`).
"""

import hashlib
import hmac
import json
import os
import sys
from fractions import Fraction as F

# --- BIP-340, from the BIP's specification section -------------------------------------------

P = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEFFFFFC2F
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
G = (
    0x79BE667EF9DCBBAC55A06295CE870B07029BFCDB2DCE28D959F2815B16F81798,
    0x483ADA7726A3C4655DA4FBFC0E1108A8FD17B448A68554199C47D08FFB10D4B8,
)


def sha256(b):
    return hashlib.sha256(b).digest()


def tagged_hash(tag, msg):
    t = sha256(tag.encode())
    return sha256(t + t + msg)


def point_add(p1, p2):
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    if p1[0] == p2[0] and p1[1] != p2[1]:
        return None
    if p1 == p2:
        lam = (3 * p1[0] * p1[0] * pow(2 * p1[1], P - 2, P)) % P
    else:
        lam = ((p2[1] - p1[1]) * pow(p2[0] - p1[0], P - 2, P)) % P
    x3 = (lam * lam - p1[0] - p2[0]) % P
    return (x3, (lam * (p1[0] - x3) - p1[1]) % P)


def _jdouble(a):
    # Jacobian doubling on y^2 = x^3 + 7 (a = 0): the BIP's point_add without an inversion per step.
    x, y, z = a
    if y == 0:
        return None
    s = 4 * x * y * y % P
    m = 3 * x * x % P
    x3 = (m * m - 2 * s) % P
    return (x3, (m * (s - x3) - 8 * pow(y, 4, P)) % P, 2 * y * z % P)


def _jadd(a, b):
    if a is None:
        return b
    if b is None:
        return a
    x1, y1, z1 = a
    x2, y2, z2 = b
    u1, u2 = x1 * z2 * z2 % P, x2 * z1 * z1 % P
    s1, s2 = y1 * pow(z2, 3, P) % P, y2 * pow(z1, 3, P) % P
    if u1 == u2:
        return _jdouble(a) if s1 == s2 else None
    h, r = (u2 - u1) % P, (s2 - s1) % P
    h2 = h * h % P
    h3 = h2 * h % P
    x3 = (r * r - h3 - 2 * u1 * h2) % P
    return (x3, (r * (u1 * h2 - x3) - s1 * h3) % P, h * z1 * z2 % P)


def point_mul(p, n):
    """n·p, double-and-add as the BIP's reference does, in Jacobian coordinates."""
    r, q = None, (p[0], p[1], 1)
    for i in range(256):
        if (n >> i) & 1:
            r = _jadd(r, q)
        q = _jdouble(q)
    if r is None:
        return None
    zi = pow(r[2], P - 2, P)
    return (r[0] * zi * zi % P, r[1] * pow(zi, 3, P) % P)


def bytes_from_int(x):
    return x.to_bytes(32, "big")


def int_from_bytes(b):
    return int.from_bytes(b, "big")


def lift_x(x):
    if x >= P:
        return None
    y_sq = (pow(x, 3, P) + 7) % P
    y = pow(y_sq, (P + 1) // 4, P)
    if pow(y, 2, P) != y_sq:
        return None
    return (x, y if y & 1 == 0 else P - y)


def pubkey(seckey):
    return bytes_from_int(point_mul(G, int_from_bytes(seckey))[0])


def schnorr_sign(msg, seckey, aux):
    d0 = int_from_bytes(seckey)
    assert 1 <= d0 <= N - 1
    pt = point_mul(G, d0)
    d = d0 if pt[1] % 2 == 0 else N - d0
    t = bytes(a ^ b for a, b in zip(bytes_from_int(d), tagged_hash("BIP0340/aux", aux)))
    k0 = int_from_bytes(tagged_hash("BIP0340/nonce", t + bytes_from_int(pt[0]) + msg)) % N
    assert k0 != 0
    r = point_mul(G, k0)
    k = k0 if r[1] % 2 == 0 else N - k0
    e = int_from_bytes(
        tagged_hash("BIP0340/challenge", bytes_from_int(r[0]) + bytes_from_int(pt[0]) + msg)
    ) % N
    sig = bytes_from_int(r[0]) + bytes_from_int((k + e * d) % N)
    assert schnorr_verify(msg, bytes_from_int(pt[0]), sig)
    return sig


def schnorr_verify(msg, pub, sig):
    pt = lift_x(int_from_bytes(pub))
    r, s = int_from_bytes(sig[:32]), int_from_bytes(sig[32:])
    if pt is None or r >= P or s >= N:
        return False
    e = int_from_bytes(tagged_hash("BIP0340/challenge", sig[:32] + pub + msg)) % N
    rr = point_add(point_mul(G, s), point_mul(pt, N - e))
    return rr is not None and rr[1] % 2 == 0 and rr[0] == r



def ecdh_x(seckey, pub):
    """secp256k1 ECDH as NIP-44 uses it: the x-coordinate of seckey · lift_x(pub)."""
    pt = lift_x(int_from_bytes(pub))
    if pt is None:
        raise ValueError("not a point")
    return bytes_from_int(point_mul(pt, int_from_bytes(seckey))[0])


# --- RFC 5869 HKDF-SHA256 ----------------------------------------------------------------------


def hkdf(salt, ikm, info, length):
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, t, i = b"", b"", 1
    while len(out) < length:
        t = hmac.new(prk, t + info + bytes([i]), hashlib.sha256).digest()
        out += t
        i += 1
    return out[:length]


# --- RFC 7748 X25519 and RFC 8032 Ed25519 public keys (the descriptor's other two keys) -------

P25519 = 2**255 - 19


def x25519_public(k):
    k = bytearray(k)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    n = int.from_bytes(k, "little")
    x1, x2, z2, x3, z3, swap = 9, 1, 0, 9, 1, 0
    a24 = 121665
    for t in reversed(range(255)):
        bit = (n >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = (x2 + z2) % P25519, (x2 - z2) % P25519
        aa, bb = a * a % P25519, b * b % P25519
        e = (aa - bb) % P25519
        c, d = (x3 + z3) % P25519, (x3 - z3) % P25519
        da, cb = d * a % P25519, c * b % P25519
        x3 = (da + cb) ** 2 % P25519
        z3 = x1 * (da - cb) ** 2 % P25519
        x2 = aa * bb % P25519
        z2 = e * (aa + a24 * e) % P25519
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, P25519 - 2, P25519) % P25519).to_bytes(32, "little")


ED_D = -121665 * pow(121666, P25519 - 2, P25519) % P25519


def ed_add(p, q):
    x1, y1 = p
    x2, y2 = q
    t = ED_D * x1 * x2 * y1 * y2 % P25519
    x3 = (x1 * y2 + x2 * y1) * pow(1 + t, P25519 - 2, P25519) % P25519
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, P25519 - 2, P25519) % P25519
    return (x3, y3)


def ed25519_public(seed):
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    by = 4 * pow(5, P25519 - 2, P25519) % P25519
    bx2 = (by * by - 1) * pow(ED_D * by * by + 1, P25519 - 2, P25519) % P25519
    bx = pow(bx2, (P25519 + 3) // 8, P25519)
    if (bx * bx - bx2) % P25519:
        bx = bx * pow(2, (P25519 - 1) // 4, P25519) % P25519
    if bx & 1:
        bx = P25519 - bx
    r, q = (0, 1), (bx, by)
    while a:
        if a & 1:
            r = ed_add(r, q)
        q = ed_add(q, q)
        a >>= 1
    return (r[1] | ((r[0] & 1) << 255)).to_bytes(32, "little")


# --- meshstr, from the spec text -------------------------------------------------------------

TIERS = ["probation", "member", "trusted", "anchor"]
# §6.6 tier ceilings, exactly as the table prints them.
CEILING = {
    "conn_rate": [4, 12, 48, 192],
    "req": [60, 600, 2400, 9600],
    "events_in": [300, 3000, 12000, 48000],
    "bytes_in": [3355443, 33554432, 134217728, 536870912],
    "bytes_out": [26843545, 268435456, 1073741824, 4294967296],
    "blob_bytes": [1677721, 16777216, 67108864, 268435456],
    "sync_ranges": [100, 400, 1600, 6400],
    "errors": [4, 40, 160, 640],
}
LIMITS = list(CEILING)
COUNTERS = ["conn_open", "req", "events_in", "bytes_in", "bytes_out", "blob_bytes", "errors", "dups_sent", "sync_ranges"]
# §6.2: "conn_rate is priced against conn_open"; every other limit against the counter of its name.
COUNTER_OF = {l: ("conn_open" if l == "conn_rate" else l) for l in LIMITS}
# §6.3: "the structural limits (conn_rate, req, sync_ranges, errors) at the ceiling".
STRUCTURAL = {"conn_rate", "req", "sync_ranges", "errors"}
SEVERITIES = ["S0", "S1", "S2", "S3", "S4"]
PIURI = "https://meshstr.org/"  # the §2.2 example's spelling of a protocol identifier
DAY = 24 * 3600

# --- DECISIONS: values the text leaves open, as docs/decisions.md records them ---------------
OPENING_FRACTION = F(1, 4)  # "meshstr §6.3 (`opening_limit_fraction`)"


def divergence_floor(limit):  # "meshstr §6.3 (`floor_ℓ`)": the probation ceiling
    return CEILING[limit][0]


def tier_base(tier, limit):  # "meshstr §6.3 (`tier_base_ℓ`)": the ceiling at the peer's tier
    return CEILING[limit][TIERS.index(tier)]


# "meshstr §6.3, §6.5 (arithmetic)": every scaled limit rounds down once.
# "meshstr §6.3 (S1, S2)": a remedy never raises a limit.
# "meshstr §6.3 (`decay_idle_windows`)": an unused limit never grows; a window measuring nothing
# at all moves nothing until the sixth in a row (every case here starts a fresh streak).
DESCRIPTOR_POW_BITS = 20  # "meshstr §3 (NIP-13 on the descriptor)", the example's nonce target
BLINDING = {  # "meshstr §6.1, §8.1, §9.1 (`blinding.grant`, `blinding.job`, ...)"
    30801: (b"meshstr/blinding/grant/1", b"meshstr grant d"),
    30811: (b"meshstr/blinding/job/1", b"meshstr job d"),
}
COMMITMENT_SCHEME = "sha256-blinded/1"
MULTIKEY = {"agreement": "fec01", "transport": "fed01"}  # "meshstr §2.1 (node key multikey)"


def canonical(v):
    """§6.2: JSON, UTF-8, object keys sorted ascending by code point, no whitespace."""
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def without_sig(o):
    return {k: v for k, v in o.items() if k != "sig"}


def did(pub):
    return "did:nostr:" + pub.hex()


def did_key(d):
    if not isinstance(d, str) or not d.startswith("did:nostr:") or len(d) != 74:
        return None
    try:
        return bytes.fromhex(d[10:])
    except ValueError:
        return None


def key(label):
    return sha256(("meshstr independent fixture " + label).encode())


def nip01_serialization(ev):
    return json.dumps(
        [0, ev["pubkey"], ev["created_at"], ev["kind"], ev["tags"], ev["content"]],
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def nip01_id(ev):
    return sha256(nip01_serialization(ev))


def event_ok(ev):
    """NIP-01: the id is the serialisation's SHA-256, the sig BIP-340 by pubkey over the id."""
    return nip01_id(ev).hex() == ev["id"] and schnorr_verify(
        bytes.fromhex(ev["id"]), bytes.fromhex(ev["pubkey"]), bytes.fromhex(ev["sig"])
    )


def tags_named(ev, name):
    return [t for t in ev["tags"] if t and t[0] == name]


def tag(ev, name):
    t = tags_named(ev, name)
    return t[0][1] if t and len(t[0]) > 1 else None


def leading_zero_bits(h):
    n = 0
    for b in h:
        if b == 0:
            n += 8
            continue
        n += 8 - b.bit_length()
        break
    return n


def protocol_digest():
    """§10: SHA-256 over kinds.json, messages.json and constants.json, each canonical, in order."""
    here = os.path.dirname(os.path.abspath(__file__))
    schema = os.path.join(here, "..", "..", "proto", "src", "meshstr", "schema")
    cat = b""
    for f in ("kinds.json", "messages.json", "constants.json"):
        with open(os.path.join(schema, f), encoding="utf-8") as fh:
            cat += canonical(json.load(fh))
    return sha256(cat)


def endpoints_digest(pairs):
    """§3.3: SHA-256 over the canonical JSON of the sorted [scheme, address] pairs."""
    return sha256(canonical(sorted({(s, a) for s, a in pairs})))


def hop_message(event_id, prev_hop, at):
    """§5: SHA256("meshstr/hop/1" || "|" || event_id || "|" || prev_hop || "|" || at)."""
    return sha256(("meshstr/hop/1" + "|" + event_id + "|" + prev_hop + "|" + str(at)).encode())


# --- the checks of check mode: each returns this reading's verdict ----------------------------


def receipts_accepted(subject, receipts):
    """§6.2: how many receipts from the first an issuer accepts, in order, into one window's chain."""
    prev_link, prev = bytes(32), None
    for i, r in enumerate(receipts):
        link = sha256(canonical(without_sig(r)))
        ok = (
            isinstance(r.get("sig"), str)
            and len(r["sig"]) == 128
            and schnorr_verify(link, subject, bytes.fromhex(r["sig"]))
            and r["seq"] == (0 if prev is None else prev["seq"] + 1)
            and r["prev"] == prev_link.hex()
            and (prev is None or (r["window"] == prev["window"] and r["grant"] == prev["grant"]))
            # "Counters are cumulative within the window and strictly monotonic."
            and (prev is None or all(r["counters"][c] >= prev["counters"][c] for c in COUNTERS))
        )
        if not ok:
            return i
        prev_link, prev = link, r
    return len(receipts)


def handover_verdict(links):
    """§3.1, §3.2: a chain checked whole; returns (tag, holder) or None."""
    if not 1 <= len(links) <= 8:
        return None
    seen = set()
    for i, l in enumerate(links):
        if set(l) != {"from", "to", "shard", "claim", "filter", "since", "until", "fingerprint", "count", "at", "sig"}:
            return None
        signer, to = did_key(l["from"]), did_key(l["to"])
        if signer is None or to is None:
            return None
        if not schnorr_verify(sha256(canonical(without_sig(l))), signer, bytes.fromhex(l["sig"])):
            return None
        if l["until"] > l["at"]:
            return None
        if i + 1 < len(links) and links[i + 1]["from"] != l["to"]:
            return None
        set_of = lambda x: (x["shard"], x["filter"], x["since"], x["until"], x["fingerprint"], x["count"])
        if set_of(l) != set_of(links[0]):
            return None
        if signer in seen:
            return None
        seen.add(signer)
    if did_key(links[-1]["to"]) in seen:
        return None
    return sha256(canonical(without_sig(links[-1]))).hex(), links[-1]["to"]


def hops_verdict(event_id, path):
    """§5: at most three hops, each signed over its own message."""
    if len(path) > 3:
        return None
    prev = ""
    msgs = []
    for h in path:
        k = did_key(h["node"])
        msg = hop_message(event_id, prev, h["at"])
        if k is None or not schnorr_verify(msg, k, bytes.fromhex(h["sig"])):
            return None
        msgs.append(msg.hex())
        prev = h["node"]
    return msgs


def descriptor_verdict(ev, now, digest, min_pow_bits):
    """§2.2, §9.1 kind 11801: required tags, binding protocol declarations, lifetime, keys, work."""
    if not event_ok(ev) or ev["kind"] != 11801:
        return False
    for t in ("class", "protocol", "c", "expiration"):
        if not tags_named(ev, t):
            return False
    cls = tag(ev, "class")
    if cls not in ("leaf", "edge", "anchor"):
        return False
    p = tags_named(ev, "protocol")[0]
    if len(p) < 3 or p[1] != "meshstr/0-draft" or p[2] != digest.hex():
        return False  # "Two nodes declaring different digests MUST decline to peer."
    exp = int(tag(ev, "expiration"))
    if exp <= now:
        return False
    if exp - ev["created_at"] > (DAY if cls == "leaf" else 30 * DAY):
        return False
    protocols = {t[1][len(PIURI):] for t in tags_named(ev, "c") if t[1].startswith(PIURI)}
    if not {"peering/1.0", "budget/1.0"} <= protocols:
        return False
    for t in tags_named(ev, "key"):
        mk = t[2]
        if not mk.startswith(MULTIKEY.get(t[1], "?")) or len(mk) != len(MULTIKEY[t[1]]) + 64:
            return False
    nonce = tags_named(ev, "nonce")
    if not nonce or int(nonce[0][2]) < min_pow_bits:
        return False
    return leading_zero_bits(bytes.fromhex(ev["id"])) >= min_pow_bits


def klass(overrun, divergence):
    """§6.5 class(overrun, divergence); None overrun is unbounded (traffic against a zero limit)."""
    ge = lambda t: overrun is None or overrun >= t
    by = 3 if ge(4) else 2 if ge(1) else 1 if ge(F(1, 10)) else 0
    return max(by, 2) if divergence > F(1, 10) else by


def overrun(measured, limit):
    if limit == 0:
        return None if measured > 0 else F(0)
    return max(F(0), F(measured, limit) - 1)


def evaluate(limits, measured, claimed):
    """§6.2, §6.3, §6.5: per-limit class, dup_ratio, active silence, the window's severity."""
    claim = claimed or {c: 0 for c in COUNTERS}
    per = {}
    for l in LIMITS:
        m, c = measured[COUNTER_OF[l]], claim[COUNTER_OF[l]]
        div = F(abs(m - c), max(m, divergence_floor(l)))
        per[l] = klass(overrun(m, limits[l]), div)
    sev = max(per.values())
    dup = None
    if measured["events_in"] >= divergence_floor("events_in"):
        dup = klass(F(measured["dups_sent"], measured["events_in"]) / F(15, 100) - 1, F(0))
        sev = max(sev, dup)
    silence = claimed is None and any(measured[c] for c in COUNTERS)
    if silence:
        sev = max(sev, 2)  # active silence: S2, a floor and not a ceiling
    return sev, per, dup, silence


def opening(tier, limit):
    c = tier_base(tier, limit)
    return c if limit in STRUCTURAL else int(c * OPENING_FRACTION)


def update(tier, limits, sev, measured):
    """§6.3's AIMD update from a fresh streak; returns (tier, limits)."""
    lim = dict(limits)
    if sev == 0 and any(measured[c] for c in COUNTERS):
        for l in LIMITS:
            used = measured[COUNTER_OF[l]]
            strain = min(F(1), F(used, lim[l])) if lim[l] else (F(1) if used else F(0))
            if used == 0:
                if lim[l] > opening(tier, l):
                    lim[l] = max(opening(tier, l), int(lim[l] * F(9, 10)))  # decay by disuse
            else:
                lim[l] = lim[l] + int(tier_base(tier, l) * max(F(2, 100), F(1, 10) * strain))
    elif sev == 1:
        for l in LIMITS:
            lim[l] = min(lim[l], max(CEILING[l][0], int(lim[l] * F(1, 2))))
    elif sev == 2:
        for l in LIMITS:
            lim[l] = min(lim[l], max(CEILING[l][0], int(lim[l] * F(1, 4))))
        tier = "probation"
    elif sev == 3:
        lim = {l: 0 for l in LIMITS}
        tier = "probation"
    # then, always: the ceiling of the tier the branch returns
    return tier, {l: min(lim[l], tier_base(tier, l)) for l in LIMITS}


def ladder(ours, theirs):
    """§4.1: schemes both declare, by the sum of the two preferences, then name bytewise."""
    lo = lambda eps, s: min(p for x, p in eps if x == s)
    shared = {s for s, _ in ours} & {s for s, _ in theirs}
    rungs = [(lo(ours, s) + lo(theirs, s), s.encode(), s) for s in shared]
    return [[s, total] for total, _, s in sorted(rungs)]


def grant_verdict(g):
    """§6.1, §9.1: the subject derives d from the ECDH x-coordinate, and checks the commitment."""
    ev = g["event"]
    if not event_ok(ev) or ev["kind"] not in BLINDING:
        return None
    salt, info = BLINDING[ev["kind"]]
    d = hkdf(salt, ecdh_x(bytes.fromhex(g["subject_secret"]), bytes.fromhex(ev["pubkey"])), info, 32)
    commit = sha256(bytes.fromhex(g["blinding"]) + canonical(g["body"]))
    return {
        "d_matches": tag(ev, "d") == d.hex(),
        "commit_matches": tag(ev, "commit") == commit.hex() and tag(ev, "scheme") == COMMITMENT_SCHEME,
    }


def report_admitted(ev, now):
    """§7.1: a reader's check, resolving nothing."""
    if not event_ok(ev) or ev["kind"] != 30802:
        return False
    if tag(ev, "outcome") not in ("S1", "S2", "S3", "S4"):
        return False  # adverse only
    exp = tag(ev, "expiration")
    if exp is None or int(exp) <= now or tag(ev, "windows") is None:
        return False
    subject = bytes.fromhex(tag(ev, "d"))
    try:
        content = json.loads(ev["content"])
        inline = content["evidence"]
    except (ValueError, KeyError, TypeError):
        return False
    grant_id = tag(ev, "grant")
    g = inline.get(grant_id) if grant_id else None
    # "A report without a grant is discarded unread": carried, that id, signed, 30801, by the reporter.
    if not (isinstance(g, dict) and g.get("id") == grant_id and g.get("kind") == 30801
            and g.get("pubkey") == ev["pubkey"] and event_ok(g)):
        return False
    cited = [t[1] for t in tags_named(ev, "evidence")]
    if not cited:
        return False
    for k in inline:
        if k != grant_id and k not in cited:
            return False
    for c in cited:
        a = inline.get(c)
        if a is None:
            continue  # a bare reference to a public event
        if "kind" in a and "pubkey" in a:  # a Nostr event: keyed by its id, by the subject
            if not (a["id"] == c and a["pubkey"] == subject.hex() and event_ok(a)):
                return False
        elif "counters" in a:  # a receipt: keyed as it is cited, signed by the subject
            link = sha256(canonical(without_sig(a)))
            if not (link.hex() == c and schnorr_verify(link, subject, bytes.fromhex(a["sig"]))):
                return False
        else:
            return False
    return True


class Checker:
    def __init__(self):
        self.failures = 0

    def section(self, name, cases, one):
        bad = 0
        for i, case in enumerate(cases):
            why = one(case)
            if why:
                bad += 1
                print(f"FAIL: {name} #{i}: {why}")
        self.failures += bad
        if bad == 0:
            print(f"ok: {name}: {len(cases)} agree")


def check(path):
    with open(path, encoding="utf-8") as fh:
        w = json.load(fh)
    digest = protocol_digest()
    c = Checker()

    def receipts(case):
        mine = receipts_accepted(bytes.fromhex(case["subject"]), case["receipts"])
        links = [sha256(canonical(without_sig(r))).hex() for r in case["receipts"]]
        if mine != case["weft_accepted"]:
            return f"this reading accepts {mine}, weft {case['weft_accepted']}"
        if links != case["weft_links"]:
            return "chain links differ"
        return None

    def handovers(case):
        mine = handover_verdict(case["links"])
        theirs = case["weft"]
        if (mine is None) != (theirs is None):
            return f"this reading says {mine}, weft {theirs}"
        if mine and list(mine) != [theirs["tag"], theirs["holder"]]:
            return f"tag or holder differ: {mine} vs {theirs}"
        return None

    def hops(case):
        mine = hops_verdict(case["event_id"], case["path"])
        if (mine is None) != (not case["weft_ok"]):
            return f"this reading says {'valid' if mine else 'invalid'}, weft {case['weft_ok']}"
        if mine and mine != case["weft_msgs"]:
            return "hop messages differ"
        return None

    def descriptors(case):
        mine = descriptor_verdict(case["event"], case["now"], digest, case["min_pow_bits"])
        if mine != case["weft_ok"]:
            return f"this reading says {mine}, weft {case['weft_ok']}"
        pairs = [(t[1], t[2]) for t in tags_named(case["event"], "endpoint")]
        if endpoints_digest(pairs).hex() != case["weft_endpoints_digest"]:
            return "endpoints digest differs"
        return None

    def windows(case):
        sev, per, dup, silence = evaluate(case["limits"], case["measured"], case["claimed"])
        weft = case["weft"]
        mine = {
            "severity": SEVERITIES[sev],
            "per_limit": {l: SEVERITIES[s] for l, s in per.items()},
            "dup_ratio": None if dup is None else SEVERITIES[dup],
            "active_silence": silence,
        }
        for k, v in mine.items():
            if weft[k] != v:
                return f"{k}: this reading {v}, weft {weft[k]}"
        tier, lim = update(case["tier"], case["limits"], sev, case["measured"])
        if weft["tier"] != tier or weft["limits"] != lim:
            return f"after the update: this reading {tier} {lim}, weft {weft['tier']} {weft['limits']}"
        return None

    def ladders(case):
        mine = ladder(case["ours"], case["theirs"])
        return None if mine == case["weft"] else f"this reading {mine}, weft {case['weft']}"

    def replication(case):
        a, b = case["a"], case["b"]
        # "later created_at, and on a tie the lexicographically lower id"
        mine = a["created_at"] > b["created_at"] or (a["created_at"] == b["created_at"] and a["id"] < b["id"])
        return None if mine == case["weft_a_wins"] else f"this reading says a wins: {mine}"

    def order(case):
        mine = [e["id"] for e in sorted(case["events"], key=lambda e: (e["created_at"], e["id"]))]
        return None if mine == case["weft"] else "enumeration order differs"

    def grants(case):
        mine = grant_verdict(case)
        if mine is None:
            return "the envelope event does not verify"
        if mine != case["weft"]:
            return f"this reading {mine}, weft {case['weft']}"
        return None

    def reports(case):
        mine = report_admitted(case["event"], case["now"])
        return None if mine == case["weft_admitted"] else f"this reading admits: {mine}"

    c.section("receipt chains (§6.2)", w["receipts"], receipts)
    c.section("handover chains (§3.1, §3.2)", w["handovers"], handovers)
    c.section("hop paths (§5)", w["hops"], hops)
    c.section("descriptors and endpoints digests (§2.2, §3.3)", w["descriptors"], descriptors)
    c.section("window evaluations and AIMD updates (§6.3, §6.5)", w["windows"], windows)
    c.section("transport ladders (§4.1)", w["ladders"], ladders)
    c.section("replaceable winners (§5)", w["winners"], replication)
    c.section("enumeration order (§5)", w["orders"], order)
    c.section("grant and job receipt envelopes (§6.1, §8.1)", w["grants"], grants)
    c.section("reports (§7.1)", w["reports"], reports)
    if c.failures:
        print(f"{c.failures} disagreement(s)")
        sys.exit(1)


def main():
    subject, issuer, replica, forwarder = (key(x) for x in ("subject", "issuer", "replica", "forwarder"))
    aux = bytes(32)
    out = {
        "source": "meshstr/0-draft (shared/specs/004_38a2d0b232bbbb97.txt), its printed examples "
        "computed by vectors/meshstr/independent.py, written from the spec text, NIP-01 and BIP-340 "
        "only (not from weft's code); secret keys are SHA-256 of 'meshstr independent fixture "
        "<name>', BIP-340 aux is 32 zero bytes",
        "keys": {n: k.hex() for n, k in (("subject", subject), ("issuer", issuer), ("replica", replica), ("forwarder", forwarder))},
    }

    # §6.2 receipt body, as printed, placeholders filled.
    body = {
        "grant": sha256(b"a grant event id").hex(),
        "window": 496389,
        "seq": 7,
        "prev": sha256(b"receipt seq 6").hex(),
        "counters": {
            "conn_open": 2, "req": 141, "events_in": 802,
            "bytes_in": 2216041, "bytes_out": 19883, "blob_bytes": 0,
            "errors": 1, "dups_sent": 44, "sync_ranges": 61,
        },
        "forwarded_for": [did(pubkey(forwarder))],
        "at": 1787003600,
    }
    link = sha256(canonical(body))
    body["sig"] = schnorr_sign(link, subject, aux).hex()
    out["receipt"] = {
        "subject": pubkey(subject).hex(),
        "body": body,
        "canonical_without_sig": canonical(without_sig(body)).decode(),
        "link": link.hex(),
        "window_secs": 3600,
        "window_of_at": body["at"] // 3600,
    }

    # §3.1 handover body, as printed, placeholders filled: issuer hands to replica.
    h = {
        "from": did(pubkey(issuer)),
        "to": did(pubkey(replica)),
        "shard": "bristol-2026H2",
        "claim": "30803:" + pubkey(issuer).hex() + ":bristol-2026H2",
        "filter": "{\"#t\":[\"bristol\"],\"kinds\":[1]}",
        "since": 1751328000,
        "until": 1767225600,
        "fingerprint": sha256(b"a negentropy fingerprint")[:16].hex(),
        "count": 5,
        "at": 1787100000,
    }
    name = sha256(canonical(h))
    h["sig"] = schnorr_sign(name, issuer, aux).hex()
    out["handover"] = {"body": h, "name": name.hex(), "canonical_without_sig": canonical(without_sig(h)).decode()}

    # §5 delivery hops: two forwarders, the second's prev_hop the first's node string.
    event_id = sha256(b"a wrapped event").hex()
    hops = []
    prev = ""
    for i, (k, at) in enumerate(((issuer, 1787000000), (forwarder, 1787000007))):
        msg = hop_message(event_id, prev, at)
        node = did(pubkey(k))
        hops.append({"node": node, "at": at, "sig": schnorr_sign(msg, k, aux).hex(), "msg": msg.hex()})
        prev = node
    out["hops"] = {"event_id": event_id, "path": hops}

    # §3.3 endpoints digest over the §2.2 example's endpoints (preference excluded, pairs sorted).
    endpoints = [["iroh", ""], ["libp2p", "/dnsaddr/relay.example.org/p2p/"], ["wss", "wss://relay.example.org"]]
    out["endpoints"] = {"pairs": endpoints, "digest": endpoints_digest(endpoints).hex()}

    # A signed meshstr event (kind 21801 heartbeat of an anchor), NIP-01 id and BIP-340 sig.
    ev = {
        "pubkey": pubkey(issuer).hex(),
        "created_at": 1787000000,
        "kind": 21801,
        "tags": [["class", "anchor"], ["endpoints", out["endpoints"]["digest"]], ["load", "0.42"]],
        "content": "",
    }
    eid = nip01_id(ev)
    ev["id"] = eid.hex()
    ev["sig"] = schnorr_sign(eid, issuer, aux).hex()
    out["event"] = ev

    # §2.2 descriptor, as printed, placeholders filled, its NIP-13 nonce mined to the example's 20.
    agreement = x25519_public(key("agreement"))
    transport = ed25519_public(key("transport"))
    dtags = [
        ["class", "edge"],
        ["protocol", "meshstr/0-draft", protocol_digest().hex()],
        ["software", "https://meshstr.org", "0.2.0"],
        ["key", "agreement", "fec01" + agreement.hex(), "1795000000"],
        ["key", "transport", "fed01" + transport.hex()],
        ["endpoint", "iroh", transport.hex(), "10"],
        ["endpoint", "libp2p", "/dnsaddr/relay.example.org/p2p/" + transport.hex(), "20"],
        ["endpoint", "wss", "wss://relay.example.org", "40"],
        ["mediator", did(pubkey(forwarder))],
        ["c", "https://meshstr.org/peering/1.0"], ["c", "https://meshstr.org/budget/1.0"],
        ["c", "https://meshstr.org/sync/1.0"],
        ["c", "relay"], ["c", "blossom"], ["c", "mediator"], ["c", "negentropy"],
        ["coverage", "30803:" + pubkey(issuer).hex() + ":bristol-2026H2"],
        ["policy", "nip-11", "https://relay.example.org/policy"],
        ["operator", did(pubkey(subject))],
        ["nonce", "", "20"],
        ["expiration", "1789600000"],
    ]
    d = {"pubkey": pubkey(issuer).hex(), "created_at": 1787100000, "kind": 11801, "tags": dtags,
         "content": "Community relay for the Bristol nostr meetup."}
    marker = "\u0000nonce\u0000"
    dtags[-2][1] = marker
    head, tail = nip01_serialization(d).split(json.dumps(marker).encode()[1:-1])
    n = 0
    while leading_zero_bits(sha256(head + str(n).encode() + tail)) < DESCRIPTOR_POW_BITS:
        n += 1
    dtags[-2][1] = str(n)
    d["id"] = nip01_id(d).hex()
    d["sig"] = schnorr_sign(bytes.fromhex(d["id"]), issuer, aux).hex()
    out["descriptor"] = {
        "event": d,
        "now": 1787100000,
        "agreement_secret": key("agreement").hex(),
        "transport_seed": key("transport").hex(),
        "endpoints_digest": endpoints_digest([(t[1], t[2]) for t in dtags if t[0] == "endpoint"]).hex(),
    }

    # §6.4's worked number: twenty anchor grants, each inside its own events_in ceiling.
    out["node_ceiling"] = {"grants": 20, "events_in_ceiling_anchor": 48000, "events_per_hour": 20 * 48000}

    # §10 digest over weft's shipped files (data, not code): canonical forms concatenated.
    out["protocol_digest"] = {"files": ["kinds.json", "messages.json", "constants.json"], "digest": protocol_digest().hex()}

    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) == 1:
        main()
    else:
        sys.exit("usage: independent.py [check FILE]")
