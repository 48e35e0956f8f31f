//! `weft meshstr`: the offline checks a node operator and a reader of reports and grants need
//! (meshstr/0-draft). Every rule is `weft_proto::meshstr`'s; this module reads files, calls it,
//! and prints JSON.
//!
//! Each subcommand prints one JSON object on stdout. Exit status: 0 valid, 1 read and refused
//! (the JSON says why), 2 could not run (a missing file, unreadable JSON, bad arguments).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use weft_proto::codec::hex;
use weft_proto::crypto::{CryptoProvider, Secp256k1Secret, default_provider, generate_secp256k1};
use weft_proto::meshstr::limits::{Counters, Limits, Tier};
use weft_proto::meshstr::{
    self as m, events, grant, handover, hop, keys, receipt, report, schema, window,
};
use weft_proto::nostr::Event;

/// `weft meshstr` subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Make a node key (secp256k1, BIP-340 x-only): the secret as 64 hex digits in FILE, created
    /// owner-only (0600) and never overwritten; prints the pubkey and its did:nostr.
    Keygen {
        /// Where the secret goes.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Print the did:nostr document of a key: the minimal document, or the node profile
    /// (§2.3) when a live descriptor (kind 11801, a JSON event file) is given.
    Did(DidArgs),
    /// Print the protocol digest of weft's shipped kinds/messages/constants (§10), or with a
    /// FILE the SHA-256 of its canonical form, with and without `sig` (the name a receipt,
    /// handover or evidence entry is cited by).
    Digest {
        /// A JSON file.
        file: Option<PathBuf>,
    },
    /// Check an artefact file: a meshstr event (every tag rule, its signature; a report as a
    /// reader admits it; a coverage claim against its handover chain), a receipt body or a JSON
    /// array of one window's receipts (with --subject), a handover chain (a JSON array of links),
    /// or a hop path (a JSON array of hops, with --event-id).
    Verify(VerifyArgs),
    /// Open a grant or job receipt envelope (kind 30801 or 30811) as its subject: check `d`,
    /// decrypt, check the commitment; prints the body.
    GrantOpen {
        /// The subject's secret key file (64 hex digits).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The envelope event, as JSON.
        file: PathBuf,
    },
    /// Evaluate one window (§6.3, §6.5): reads `{"tier", "limits"?, "measured", "claimed"?}`
    /// (`claimed` absent: no receipt), prints the severity, each limit's class and the grant
    /// after the AIMD update.
    WindowEvaluate {
        /// The window, as JSON.
        file: PathBuf,
    },
}

/// `weft meshstr did`.
#[derive(Args, Debug)]
pub struct DidArgs {
    /// The node's pubkey, 64 hex digits (or a did:nostr).
    #[arg(long, value_name = "HEX", required_unless_present = "key")]
    pubkey: Option<String>,
    /// A secret key file instead of --pubkey.
    #[arg(long, value_name = "FILE", conflicts_with = "pubkey")]
    key: Option<PathBuf>,
    /// The node's live descriptor (kind 11801), as a JSON event.
    #[arg(long, value_name = "FILE")]
    descriptor: Option<PathBuf>,
    /// The time to check the descriptor at, Unix seconds (default: now).
    #[arg(long)]
    now: Option<u64>,
}

/// `weft meshstr verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The artefact, as JSON.
    file: PathBuf,
    /// The subject whose signature a receipt carries (64 hex digits or a did:nostr).
    #[arg(long, value_name = "HEX")]
    subject: Option<String>,
    /// The event a hop path carries, 64 hex digits.
    #[arg(long, value_name = "HEX")]
    event_id: Option<String>,
    /// The time to check expirations at, Unix seconds (default: now).
    #[arg(long)]
    now: Option<u64>,
}

/// Why a subcommand did not run to a verdict.
type Failure = String;

/// What a subcommand concluded: its JSON and whether the artefact was valid.
struct Verdict {
    ok: bool,
    out: Value,
}

fn valid(out: Value) -> Verdict {
    Verdict { ok: true, out }
}

fn refused(why: impl core::fmt::Debug, mut out: Value) -> Verdict {
    out["valid"] = false.into();
    out["refused"] = format!("{why:?}").into();
    Verdict { ok: false, out }
}

/// Runs one subcommand, printing its JSON; the exit status says valid (0), refused (1) or could
/// not run (2).
pub fn run(cmd: Command) -> ExitCode {
    let provider = default_provider();
    match run_to_verdict(provider, cmd) {
        Ok(v) => {
            println!("{}", v.out);
            ExitCode::from(if v.ok { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("weft meshstr: {e}");
            ExitCode::from(2)
        }
    }
}

fn now_secs(given: Option<u64>) -> u64 {
    given.unwrap_or_else(|| crate::now().as_millis() / 1000)
}

fn read_json(path: &Path) -> Result<Value, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))
}

fn read_secret(path: &Path) -> Result<Secp256k1Secret, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    hex::decode_array::<32>(text.trim())
        .map(Secp256k1Secret::from_bytes)
        .map_err(|_| format!("{}: not a secret of 64 hex digits", path.display()))
}

fn read_key(text: &str) -> Result<[u8; 32], Failure> {
    keys::did_nostr_key(text)
        .or_else(|| hex::decode_array::<32>(text).ok())
        .ok_or_else(|| format!("{text}: not a pubkey (64 hex digits) or a did:nostr"))
}

fn run_to_verdict(p: &'static dyn CryptoProvider, cmd: Command) -> Result<Verdict, Failure> {
    match cmd {
        Command::Keygen { out } => keygen(p, &out),
        Command::Did(a) => did(p, a),
        Command::Digest { file } => Ok(valid(match file {
            None => {
                let (name, digest) = schema::declared(p);
                json!({"protocol": name, "digest": digest, "version": format!("{name}@{digest}")})
            }
            Some(f) => {
                let v = read_json(&f)?;
                json!({
                    "sha256": hex::encode(&m::digest(p, &v)),
                    "sha256_without_sig": hex::encode(&m::digest_without_sig(p, &v)),
                    "canonical": m::canonical(&v),
                })
            }
        })),
        Command::Verify(a) => verify(p, a),
        Command::GrantOpen { key, file } => {
            let secret = read_secret(&key)?;
            let e = Event::from_value(&read_json(&file)?)
                .map_err(|e| format!("{}: not a Nostr event: {e:?}", file.display()))?;
            if let Err(why) = e.verify(p) {
                return Ok(refused(why, json!({"kind": e.kind})));
            }
            Ok(match grant::open(p, &secret, &e) {
                Ok(body) => valid(json!({"valid": true, "kind": e.kind, "body": body})),
                Err(why) => refused(why, json!({"kind": e.kind})),
            })
        }
        Command::WindowEvaluate { file } => window_evaluate(&read_json(&file)?),
    }
}

fn keygen(p: &dyn CryptoProvider, out: &Path) -> Result<Verdict, Failure> {
    let secret = generate_secp256k1(p, &mut crate::os_rng());
    let pubkey = p
        .schnorr_public_key(&secret)
        .map_err(|e| format!("{e:?}"))?;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    writeln!(f, "{}", hex::encode(secret.expose()))
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(valid(json!({
        "pubkey": hex::encode(&pubkey),
        "did": keys::did_nostr(&pubkey),
        "key_file": out.display().to_string(),
    })))
}

fn did(p: &dyn CryptoProvider, a: DidArgs) -> Result<Verdict, Failure> {
    let key = match (&a.pubkey, &a.key) {
        (Some(k), _) => read_key(k)?,
        (None, Some(f)) => p
            .schnorr_public_key(&read_secret(f)?)
            .map_err(|e| format!("{e:?}"))?,
        (None, None) => return Err("--pubkey or --key".into()),
    };
    let Some(path) = a.descriptor else {
        return Ok(valid(keys::minimal_document(&key)));
    };
    let e = Event::from_value(&read_json(&path)?)
        .map_err(|e| format!("{}: not a Nostr event: {e:?}", path.display()))?;
    if e.pubkey != key {
        return Ok(refused("the descriptor is another key's", json!({})));
    }
    if let Err(why) = e.verify(p) {
        return Ok(refused(why, json!({})));
    }
    match events::descriptor(&e, now_secs(a.now), events::DESCRIPTOR_POW_BITS) {
        Ok(d) => Ok(valid(d.profile())),
        Err(why) => Ok(refused(why, json!({}))),
    }
}

fn verify(p: &dyn CryptoProvider, a: VerifyArgs) -> Result<Verdict, Failure> {
    let v = read_json(&a.file)?;
    let now = now_secs(a.now);
    if v.get("kind").is_some() && v.get("sig").is_some() {
        let e = Event::from_value(&v)
            .map_err(|e| format!("{}: not a Nostr event: {e:?}", a.file.display()))?;
        return Ok(verify_event(p, &e, now));
    }
    if v.get("counters").is_some()
        || v.as_array()
            .is_some_and(|a| a.first().is_some_and(|r| r.get("counters").is_some()))
    {
        let subject = read_key(a.subject.as_deref().ok_or("a receipt needs --subject")?)?;
        return Ok(verify_receipts(p, &v, subject, now));
    }
    if let Some(items) = v.as_array() {
        if items
            .first()
            .is_some_and(|x| x.get("fingerprint").is_some())
        {
            let links: Option<Vec<handover::Link>> =
                items.iter().map(handover::Link::from_value).collect();
            let Some(links) = links else {
                return Ok(refused(
                    "a link is not a handover link",
                    json!({"artefact": "handover"}),
                ));
            };
            return Ok(match handover::check_chain(p, &links) {
                Ok(c) => valid(json!({
                    "valid": true,
                    "artefact": "handover",
                    "links": links.len(),
                    "holder": keys::did_nostr(&c.holder),
                    "barred": c.signers.iter().map(keys::did_nostr).collect::<Vec<_>>(),
                    "tag": hex::encode(&c.tag),
                })),
                Err(why) => refused(why, json!({"artefact": "handover"})),
            });
        }
        if items.first().is_some_and(|x| x.get("node").is_some()) {
            let id = a
                .event_id
                .as_deref()
                .and_then(|h| hex::decode_array::<32>(h).ok())
                .ok_or("a hop path needs --event-id (64 hex digits)")?;
            let path = match hop::path_from_value(&v) {
                Ok(path) => path,
                Err(why) => return Ok(refused(why, json!({"artefact": "hops"}))),
            };
            return Ok(match hop::verify_path(p, &id, &path) {
                Ok(k) => valid(json!({
                    "valid": true,
                    "artefact": "hops",
                    "nodes": k.iter().map(keys::did_nostr).collect::<Vec<_>>(),
                })),
                Err(why) => refused(why, json!({"artefact": "hops"})),
            });
        }
    }
    Err(format!(
        "{}: not an artefact this reads (an event, a receipt, a handover chain, a hop path)",
        a.file.display()
    ))
}

fn verify_event(p: &dyn CryptoProvider, e: &Event, now: u64) -> Verdict {
    let base = json!({"artefact": "event", "kind": e.kind, "id": e.id_hex()});
    let kind = match events::check(p, e, now) {
        Ok(k) => k,
        Err(why) => return refused(why, base),
    };
    let mut out = base;
    out["valid"] = true.into();
    if kind == events::REPORT {
        match report::admit(p, e, now) {
            Ok(a) => {
                out["admitted"] = true.into();
                out["outcome"] = a.outcome.as_str().into();
                out["reporter"] = keys::did_nostr(&a.reporter).into();
                out["subject"] = keys::did_nostr(&a.subject).into();
                out["evidence_checked"] = a.checked.into();
                out["bare_references"] = a.bare.len().into();
            }
            Err(why) => return refused(why, out),
        }
    }
    if kind == events::COVERAGE && e.tag("handover").is_some() {
        match handover::check_claim(p, e, now) {
            Ok(c) => {
                out["barred"] = c
                    .signers
                    .iter()
                    .map(keys::did_nostr)
                    .collect::<Vec<_>>()
                    .into();
            }
            Err(why) => return refused(why, out),
        }
    }
    valid(out)
}

fn verify_receipts(p: &dyn CryptoProvider, v: &Value, subject: [u8; 32], now: u64) -> Verdict {
    let items: Vec<&Value> = match v.as_array() {
        Some(a) => a.iter().collect(),
        None => vec![v],
    };
    let mut parsed = Vec::with_capacity(items.len());
    for (i, r) in items.iter().enumerate() {
        match receipt::Receipt::from_value(r) {
            Ok(r) => parsed.push(r),
            Err(why) => return refused(why, json!({"artefact": "receipt", "at": i})),
        }
    }
    let Some(first) = parsed.first() else {
        return refused("no receipts", json!({"artefact": "receipt"}));
    };
    // The window's length is not in a receipt; the chain rules do not depend on it beyond the
    // close's grace, so the check takes an hour (the example's window) and no close.
    let mut chain = receipt::Chain::new(&first.grant, subject, 3600);
    let mut acks = Vec::new();
    for (i, r) in parsed.iter().enumerate() {
        let ack = chain.receive(p, r, false, now);
        let ok = ack.status == receipt::AckStatus::Accepted;
        acks.push(ack.to_value());
        if !ok {
            return refused(
                ack.reason,
                json!({"artefact": "receipt", "at": i, "acks": acks}),
            );
        }
    }
    valid(json!({
        "valid": true,
        "artefact": "receipt",
        "receipts": parsed.len(),
        "head": chain.head().map(|h| hex::encode(&h.link)),
    }))
}

fn window_evaluate(v: &Value) -> Result<Verdict, Failure> {
    let tier = v
        .get("tier")
        .and_then(Value::as_str)
        .and_then(Tier::parse)
        .ok_or("`tier`: probation, member, trusted or anchor")?;
    let counters = |k: &str| -> Result<Option<Counters>, Failure> {
        v.get(k)
            .map(|c| Counters::from_value(c).map_err(|e| format!("`{k}`: {e:?}")))
            .transpose()
    };
    let measured = counters("measured")?;
    let claimed = counters("claimed")?;
    let mut state = window::GrantState::open(tier);
    if let Some(l) = v.get("limits") {
        let o = l.as_object().ok_or("`limits`: an object of limit names")?;
        let mut limits = Limits::ZERO;
        for limit in weft_proto::meshstr::limits::Limit::ALL {
            let n = o
                .get(limit.as_str())
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("`limits.{}`: an integer", limit.as_str()))?;
            limits.set(limit, n);
        }
        state.limits = limits;
    }
    let eval = window::evaluate(
        &state.limits,
        &measured.unwrap_or(Counters::ZERO),
        claimed.as_ref(),
    );
    let update = window::update(&state, eval.severity, measured.as_ref(), 0);
    Ok(valid(json!({
        "severity": eval.severity.as_str(),
        "per_limit": weft_proto::meshstr::limits::Limit::ALL
            .iter()
            .zip(eval.per_limit)
            .map(|(l, s)| (l.as_str().to_string(), Value::from(s.as_str())))
            .collect::<serde_json::Map<_, _>>(),
        "dup_ratio": eval.dup_ratio.map(|s| s.as_str()),
        "active_silence": eval.active_silence,
        "tier": update.state.tier.as_str(),
        "limits": update.state.limits.to_value(),
        "cause": update.cause.map(|c| c.as_str()),
        "suspended": update.state.suspended_until.is_some(),
        "revoked": update.state.revoked,
    })))
}
