//! `weft meshstr`: the offline work a node operator and a reader of reports and grants do
//! (meshstr/0-draft): make keys and a descriptor (§2.1, §2.2), check a descriptor, inspect and
//! open grant envelopes (§6.1), verify a receipt chain (§6.2), evaluate a window (§6.3, §6.5),
//! verify a report (§7.1) and a hop path (§5). Every rule is `weft_proto::meshstr`'s; this module
//! reads files, calls it, and prints JSON.
//!
//! Each subcommand prints one JSON object on stdout. Exit status: 0 valid, 1 read and refused
//! (the JSON's `refused` says why), 2 could not run (a missing file, unreadable JSON, bad
//! arguments; the reason is on stderr).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use weft_proto::codec::hex;
use weft_proto::crypto::{
    CryptoProvider, Secp256k1Secret, default_provider, generate_ed25519, generate_secp256k1,
    generate_x25519,
};
use weft_proto::meshstr::events::{DescriptorSpec, NodeClass};
use weft_proto::meshstr::limits::{Counters, Limit, Limits, Tier};
use weft_proto::meshstr::{
    self as m, events, grant, handover, hop, keys, receipt, report, schema, window,
};
use weft_proto::nostr::Event;
use weft_proto::nostr::event::UnsignedEvent;

/// `weft meshstr` subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Make a node key (secp256k1, BIP-340 x-only): the secret as 64 hex digits in FILE, created
    /// owner-only (0600) and never overwritten; prints the pubkey and its did:nostr. With
    /// `--transport`, also an Ed25519 transport key's seed, and its multikey.
    Keygen {
        /// Where the node secret goes.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Where an Ed25519 transport seed goes (64 hex digits, 0600, never overwritten).
        #[arg(long, value_name = "FILE")]
        transport: Option<PathBuf>,
        /// Where an X25519 agreement secret goes (64 hex digits, 0600, never overwritten); its
        /// multikey is what `descriptor make` takes as `agreement`.
        #[arg(long, value_name = "FILE")]
        agreement: Option<PathBuf>,
    },
    /// Make or check a node descriptor (kind 11801).
    #[command(subcommand)]
    Descriptor(DescriptorCmd),
    /// Inspect or open a grant envelope (kind 30801) or a job receipt envelope (kind 30811).
    #[command(subcommand)]
    Grant(GrantCmd),
    /// Verify a window's receipt chain (`budget/1.0/receipt` bodies).
    #[command(subcommand)]
    Receipt(ReceiptCmd),
    /// Window arithmetic.
    #[command(subcommand)]
    Window(WindowCmd),
    /// Verify a conformance report (kind 30802) as a reader admits it.
    #[command(subcommand)]
    Report(ReportCmd),
    /// Verify a delivery hop path.
    #[command(subcommand)]
    Hop(HopCmd),
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
    /// Check any artefact file, recognised by its shape: a meshstr event (every tag rule, its
    /// signature; a report as a reader admits it; a coverage claim against its handover chain),
    /// a receipt body or a JSON array of one window's receipts (with --subject), a handover chain
    /// (a JSON array of links), or a hop path (a JSON array of hops, with --event-id).
    Verify(VerifyArgs),
}

/// `weft meshstr descriptor`.
#[derive(Subcommand, Debug)]
pub enum DescriptorCmd {
    /// Make a signed descriptor from a JSON description: `class` (required), and optionally
    /// `content`, `created_at`, `expiration` (default: the class's longest lifetime),
    /// `software` ([url, version]), `agreement` (X25519 multikey or 64 hex digits),
    /// `agreement_expires` (default: created_at + 90 days), `transport` (Ed25519 multikey or hex),
    /// `endpoints` ([[scheme, address, preference]]), `mediators` (did:nostr), `protocols`
    /// (default peering/1.0 and budget/1.0), `capabilities`. Prints the event; NIP-13 work is
    /// mined to `--pow` bits.
    Make {
        /// The description, as JSON.
        file: PathBuf,
        /// The node's secret key file (64 hex digits).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Leading zero bits of proof of work to mine (default: the 20 a checker asks).
        #[arg(long, default_value_t = events::DESCRIPTOR_POW_BITS)]
        pow: u32,
        /// The time to make it at, Unix seconds (default: now).
        #[arg(long)]
        now: Option<u64>,
    },
    /// Check a descriptor: signature, every tag rule, its keys, lifetime and proof of work; prints
    /// what it binds and the node profile a resolver emits for it.
    Check {
        /// The descriptor event, as JSON.
        file: PathBuf,
        /// The proof of work to ask (default 20 bits).
        #[arg(long, default_value_t = events::DESCRIPTOR_POW_BITS)]
        min_pow: u32,
        /// The time to check at, Unix seconds (default: now).
        #[arg(long)]
        now: Option<u64>,
    },
}

/// `weft meshstr grant`.
#[derive(Subcommand, Debug)]
pub enum GrantCmd {
    /// Open an envelope as its subject: check `d`, decrypt, check the commitment, and a grant's
    /// body (its members, its limits within its tier's ceiling, its window the tag's); prints it.
    Open {
        /// The subject's secret key file (64 hex digits).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// The envelope event, as JSON.
        file: PathBuf,
    },
    /// Inspect an envelope without opening it: signature, tag rules and expiry, and its public
    /// fields. With `--key`, also whether its `d` is the blinded pair of that key and `--peer`
    /// (default: the envelope's author), so either party can tell whose grant it is.
    Inspect {
        /// The envelope event, as JSON.
        file: PathBuf,
        /// A party's secret key file (64 hex digits).
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// The other party (64 hex digits or a did:nostr).
        #[arg(long, value_name = "HEX", requires = "key")]
        peer: Option<String>,
        /// The time to check expiry at, Unix seconds (default: now).
        #[arg(long)]
        now: Option<u64>,
    },
}

/// `weft meshstr receipt`.
#[derive(Subcommand, Debug)]
pub enum ReceiptCmd {
    /// Verify a receipt body or a JSON array of one window's receipts, in order, as the issuer
    /// receives them: signatures, `prev` links, `seq`, monotonic counters; prints each ack and the
    /// head.
    VerifyChain {
        /// The receipts, as JSON.
        file: PathBuf,
        /// The subject whose signature the receipts carry (64 hex digits or a did:nostr).
        #[arg(long, value_name = "HEX")]
        subject: String,
        /// The grant's window length in seconds.
        #[arg(long, default_value_t = DEFAULT_WINDOW_SECS)]
        window_secs: u64,
        /// The time to check at, Unix seconds (default: now).
        #[arg(long)]
        now: Option<u64>,
    },
}

/// `weft meshstr window`.
#[derive(Subcommand, Debug)]
pub enum WindowCmd {
    /// Evaluate one window (§6.3, §6.5): reads `{"tier", "limits"?, "measured"?, "claimed"?,
    /// "idle_windows"?, "suspended_until"?, "now"?}` (`claimed` absent: no receipt; `measured`
    /// absent: no measurement offered), prints the severity, each limit's class and the grant
    /// after the AIMD update.
    Evaluate {
        /// The window, as JSON.
        file: PathBuf,
    },
}

/// `weft meshstr report`.
#[derive(Subcommand, Debug)]
pub enum ReportCmd {
    /// Admit a report as a reader does: its tags, the carried grant by the reporter, every inline
    /// evidence entry against its digest and the subject's signature, and the bar on handover
    /// signers (with the coverage claims the reader holds).
    Verify {
        /// The report event, as JSON.
        file: PathBuf,
        /// A kind 30803 the reader holds (repeatable).
        #[arg(long, value_name = "FILE")]
        held: Vec<PathBuf>,
        /// The time to check at, Unix seconds (default: now).
        #[arg(long)]
        now: Option<u64>,
    },
}

/// `weft meshstr hop`.
#[derive(Subcommand, Debug)]
pub enum HopCmd {
    /// Verify a hop path: a JSON array of hops with `--event-id`, or `{"event", "hops"}` where the
    /// event is the wrapped Nostr event (its id and signature checked too). Prints the nodes in
    /// path order and, with `--grant-with`, the ones the receiver charges.
    Verify {
        /// The path, as JSON.
        file: PathBuf,
        /// The wrapped event's id, 64 hex digits (for a bare path).
        #[arg(long, value_name = "HEX")]
        event_id: Option<String>,
        /// A node the receiver holds a grant with (64 hex digits or a did:nostr; repeatable).
        #[arg(long, value_name = "HEX")]
        grant_with: Vec<String>,
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

/// The window a receipt chain is checked under when none is given: an hour, the §6.2 example's
/// (a receipt does not carry its window's length; docs/decisions.md).
pub const DEFAULT_WINDOW_SECS: u64 = 3600;

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

fn read_event(path: &Path) -> Result<Event, Failure> {
    Event::from_value(&read_json(path)?)
        .map_err(|e| format!("{}: not a Nostr event: {e:?}", path.display()))
}

fn read_hex32(path: &Path) -> Result<[u8; 32], Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    hex::decode_array::<32>(text.trim())
        .map_err(|_| format!("{}: not a secret of 64 hex digits", path.display()))
}

fn read_secret(path: &Path) -> Result<Secp256k1Secret, Failure> {
    read_hex32(path).map(Secp256k1Secret::from_bytes)
}

fn read_key(text: &str) -> Result<[u8; 32], Failure> {
    keys::did_nostr_key(text)
        .or_else(|| hex::decode_array::<32>(text).ok())
        .ok_or_else(|| format!("{text}: not a pubkey (64 hex digits) or a did:nostr"))
}

/// Writes a 32-byte secret as 64 hex digits, owner-only and never over an existing file.
fn write_secret(path: &Path, secret: &[u8; 32]) -> Result<(), Failure> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(f, "{}", hex::encode(secret))
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn run_to_verdict(p: &'static dyn CryptoProvider, cmd: Command) -> Result<Verdict, Failure> {
    match cmd {
        Command::Keygen {
            out,
            transport,
            agreement,
        } => keygen(p, &out, transport.as_deref(), agreement.as_deref()),
        Command::Descriptor(DescriptorCmd::Make {
            file,
            key,
            pow,
            now,
        }) => descriptor_make(
            p,
            &read_json(&file)?,
            &read_secret(&key)?,
            pow,
            now_secs(now),
        ),
        Command::Descriptor(DescriptorCmd::Check { file, min_pow, now }) => Ok(descriptor_check(
            p,
            &read_event(&file)?,
            min_pow,
            now_secs(now),
        )),
        Command::Grant(GrantCmd::Open { key, file }) => {
            let secret = read_secret(&key)?;
            let e = read_event(&file)?;
            if let Err(why) = e.verify(p) {
                return Ok(refused(why, json!({"kind": e.kind})));
            }
            // A grant's body is read as one (its limits within its tier's ceiling, its window
            // the tag's); a job receipt's is returned as opened.
            let opened = if e.kind == events::GRANT {
                grant::open_grant(p, &secret, &e).map(|b| b.to_value())
            } else {
                grant::open(p, &secret, &e)
            };
            Ok(match opened {
                Ok(body) => valid(json!({"valid": true, "kind": e.kind, "body": body})),
                Err(why) => refused(why, json!({"kind": e.kind})),
            })
        }
        Command::Grant(GrantCmd::Inspect {
            file,
            key,
            peer,
            now,
        }) => {
            let e = read_event(&file)?;
            let secret = key.as_deref().map(read_secret).transpose()?;
            let peer = peer.as_deref().map(read_key).transpose()?;
            Ok(grant_inspect(p, &e, secret.as_ref(), peer, now_secs(now)))
        }
        Command::Receipt(ReceiptCmd::VerifyChain {
            file,
            subject,
            window_secs,
            now,
        }) => {
            if window_secs == 0 {
                return Err("--window-secs: a window of at least one second".into());
            }
            Ok(verify_receipts(
                p,
                &read_json(&file)?,
                read_key(&subject)?,
                window_secs,
                now_secs(now),
            ))
        }
        Command::Window(WindowCmd::Evaluate { file }) => window_evaluate(&read_json(&file)?),
        Command::Report(ReportCmd::Verify { file, held, now }) => {
            let e = read_event(&file)?;
            let held = held
                .iter()
                .map(|h| read_event(h))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(report_verify(p, &e, &held, now_secs(now)))
        }
        Command::Hop(HopCmd::Verify {
            file,
            event_id,
            grant_with,
        }) => {
            let grants = grant_with
                .iter()
                .map(|g| read_key(g))
                .collect::<Result<Vec<_>, _>>()?;
            hop_verify(p, &read_json(&file)?, event_id.as_deref(), &grants)
        }
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
    }
}

fn keygen(
    p: &dyn CryptoProvider,
    out: &Path,
    transport: Option<&Path>,
    agreement: Option<&Path>,
) -> Result<Verdict, Failure> {
    let mut rng = crate::os_rng();
    let secret = generate_secp256k1(p, &mut rng);
    let pubkey = p
        .schnorr_public_key(&secret)
        .map_err(|e| format!("{e:?}"))?;
    let files: Vec<&Path> = [Some(out), transport, agreement]
        .into_iter()
        .flatten()
        .collect();
    if files
        .iter()
        .enumerate()
        .any(|(i, f)| files[..i].contains(f))
    {
        return Err("--out, --transport and --agreement: one file each".into());
    }
    // No file is written unless all can be: a node key without the keys it was asked with
    // would be half a keygen.
    if let Some(t) = [transport, agreement]
        .into_iter()
        .flatten()
        .find(|t| t.exists())
    {
        return Err(format!("{}: exists; never overwritten", t.display()));
    }
    write_secret(out, secret.expose())?;
    let mut res = json!({
        "pubkey": hex::encode(&pubkey),
        "did": keys::did_nostr(&pubkey),
        "key_file": out.display().to_string(),
    });
    if let Some(t) = transport {
        let seed = generate_ed25519(&mut rng);
        write_secret(t, seed.expose())?;
        let public = p.ed25519_public_key(&seed);
        res["transport"] = keys::multikey(keys::KeyKind::Transport, &public).into();
        res["transport_file"] = t.display().to_string().into();
    }
    if let Some(a) = agreement {
        let secret = generate_x25519(&mut rng);
        let public = p.x25519_public_key(&secret);
        // A clamped scalar times the base point is always a canonical key of large order: checked
        // all the same, so the file written is one the descriptor check takes.
        keys::check_agreement_key(&public).map_err(|e| format!("agreement key: {e:?}"))?;
        write_secret(a, secret.expose())?;
        res["agreement"] = keys::multikey(keys::KeyKind::Agreement, &public).into();
        res["agreement_file"] = a.display().to_string().into();
    }
    Ok(valid(res))
}

/// The members a descriptor description may have; any other is refused, so a misspelt one is
/// not silently left out of what is signed.
const DESCRIPTION_MEMBERS: [&str; 12] = [
    "class",
    "content",
    "created_at",
    "expiration",
    "software",
    "agreement",
    "agreement_expires",
    "transport",
    "endpoints",
    "mediators",
    "protocols",
    "capabilities",
];

/// A key given as its multikey or as 64 hex digits.
fn multikey_or_hex(kind: keys::KeyKind, v: &Value, name: &str) -> Result<[u8; 32], Failure> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("`{name}`: a multikey or 64 hex digits"))?;
    keys::parse_multikey(kind, s)
        .or_else(|| hex::decode_array::<32>(s).ok())
        .ok_or_else(|| format!("`{name}`: not a {kind:?} multikey or 64 hex digits"))
}

fn strings(v: Option<&Value>, name: &str) -> Result<Vec<String>, Failure> {
    let Some(v) = v else { return Ok(Vec::new()) };
    v.as_array()
        .and_then(|a| {
            a.iter()
                .map(|x| x.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| format!("`{name}`: an array of strings"))
}

fn descriptor_make(
    p: &dyn CryptoProvider,
    d: &Value,
    secret: &Secp256k1Secret,
    pow: u32,
    now: u64,
) -> Result<Verdict, Failure> {
    let o = d.as_object().ok_or("the description: a JSON object")?;
    if let Some(k) = o
        .keys()
        .find(|k| !DESCRIPTION_MEMBERS.contains(&k.as_str()))
    {
        return Err(format!("`{k}`: not a member of a descriptor description"));
    }
    if pow > 32 {
        return Err("--pow: at most 32 bits".into());
    }
    let u = |name: &str| -> Result<Option<u64>, Failure> {
        o.get(name)
            .map(|v| v.as_u64().ok_or_else(|| format!("`{name}`: an integer")))
            .transpose()
    };
    let class = o
        .get("class")
        .and_then(Value::as_str)
        .and_then(NodeClass::parse)
        .ok_or("`class`: leaf, edge or anchor")?;
    let created_at = u("created_at")?.unwrap_or(now);
    let expiration = u("expiration")?
        .unwrap_or_else(|| created_at.saturating_add(class.max_descriptor_lifetime_secs()));
    let agreement = match o.get("agreement") {
        None => None,
        Some(v) => {
            let k = multikey_or_hex(keys::KeyKind::Agreement, v, "agreement")?;
            if let Err(why) = keys::check_agreement_key(&k) {
                return Ok(refused(
                    why,
                    json!({"artefact": "descriptor", "member": "agreement"}),
                ));
            }
            let expires = u("agreement_expires")?
                .unwrap_or_else(|| created_at.saturating_add(keys::AGREEMENT_ROTATION_SECS));
            Some((k, Some(expires)))
        }
    };
    let transport = o
        .get("transport")
        .map(|v| multikey_or_hex(keys::KeyKind::Transport, v, "transport"))
        .transpose()?;
    let software = match o.get("software") {
        None => None,
        Some(v) => match strings(Some(v), "software")?.as_slice() {
            [url, version] => Some((url.clone(), version.clone())),
            _ => return Err("`software`: [url, version]".into()),
        },
    };
    let mut endpoints = Vec::new();
    for e in o
        .get("endpoints")
        .map(|v| v.as_array().ok_or("`endpoints`: an array"))
        .transpose()?
        .into_iter()
        .flatten()
    {
        let bad = || "`endpoints`: each [scheme, address, preference]".to_string();
        let a = e.as_array().filter(|a| a.len() == 3).ok_or_else(bad)?;
        let (Some(s), Some(addr), Some(pref)) = (a[0].as_str(), a[1].as_str(), a[2].as_u64())
        else {
            return Err(bad());
        };
        let pref = u32::try_from(pref).map_err(|_| bad())?;
        endpoints.push((s.to_string(), addr.to_string(), pref));
    }
    let mediators = strings(o.get("mediators"), "mediators")?
        .iter()
        .map(|m| read_key(m))
        .collect::<Result<Vec<_>, _>>()?;
    let protocols = match o.get("protocols") {
        None => events::REQUIRED_PROTOCOLS.map(String::from).to_vec(),
        v => strings(v, "protocols")?,
    };
    let spec = DescriptorSpec {
        class: Some(class),
        digest: schema::digest(p),
        software,
        agreement,
        transport,
        endpoints,
        mediators,
        protocols,
        capabilities: strings(o.get("capabilities"), "capabilities")?,
        expiration,
    };
    let content = match o.get("content") {
        None => String::new(),
        Some(c) => c.as_str().ok_or("`content`: a string")?.to_string(),
    };
    let unsigned = UnsignedEvent {
        created_at,
        kind: events::DESCRIPTOR,
        tags: spec.tags(),
        content,
    };
    let pubkey = p.schnorr_public_key(secret).map_err(|e| format!("{e:?}"))?;
    let (mined, _) = events::mine(p, &pubkey, unsigned, pow, 0..u64::MAX)
        .ok_or("no nonce reached the work asked")?;
    let e = mined
        .sign(p, secret, &mut crate::os_rng())
        .map_err(|e| format!("{e:?}"))?;
    // The maker checks what it made with the checker's own rule, so what it prints is what any
    // reader accepts at `now` (or it says why not: an expiration past the class's lifetime, a
    // protocol list without peering/1.0 and budget/1.0).
    if let Err(why) = events::descriptor(&e, now, pow) {
        return Ok(refused(
            why,
            json!({"artefact": "descriptor", "event": e.to_value()}),
        ));
    }
    Ok(valid(e.to_value()))
}

fn descriptor_check(p: &dyn CryptoProvider, e: &Event, min_pow: u32, now: u64) -> Verdict {
    let base = json!({"artefact": "descriptor", "id": e.id_hex()});
    if let Err(why) = e.verify(p) {
        return refused(why, base);
    }
    let d = match events::descriptor(e, now, min_pow) {
        Ok(d) => d,
        Err(why) => return refused(why, base),
    };
    let ours = schema::digest(p);
    valid(json!({
        "valid": true,
        "artefact": "descriptor",
        "id": e.id_hex(),
        "did": keys::did_nostr(&d.node),
        "class": d.class.as_str(),
        "protocol": d.protocol,
        "digest": hex::encode(&d.digest),
        "same_schema_as_weft": d.protocol == events::PROTOCOL_NAME && d.digest == ours,
        "agreement": d.agreement.iter().map(|(k, exp)| json!({
            "key": keys::multikey(keys::KeyKind::Agreement, k),
            "expires": exp,
        })).collect::<Vec<_>>(),
        "transport": d.transport.map(|k| keys::multikey(keys::KeyKind::Transport, &k)),
        "endpoints": d.endpoints.iter().map(|(s, a, pref)| json!([s, a, pref])).collect::<Vec<_>>(),
        "protocols": d.protocols,
        "capabilities": d.capabilities,
        "mediators": d.mediators.iter().map(keys::did_nostr).collect::<Vec<_>>(),
        "expiration": d.expiration,
        "pow_bits": events::pow_bits(&e.id),
        "profile": d.profile(),
    }))
}

fn grant_inspect(
    p: &dyn CryptoProvider,
    e: &Event,
    secret: Option<&Secp256k1Secret>,
    peer: Option<[u8; 32]>,
    now: u64,
) -> Verdict {
    let mut out = json!({"artefact": "envelope", "kind": e.kind, "id": e.id_hex()});
    if e.kind != events::GRANT && e.kind != events::JOB_RECEIPT {
        return refused(events::Refusal::WrongKind, out);
    }
    if let Err(why) = events::check(p, e, now) {
        return refused(why, out);
    }
    let tag = |n: &str| e.tag_value(n).map(String::from);
    out["valid"] = true.into();
    out["author"] = keys::did_nostr(&e.pubkey).into();
    out["d"] = tag("d").into();
    out["commit"] = tag("commit").into();
    out["scheme"] = tag("scheme").into();
    out["scheme_known"] = (e.tag_value("scheme") == Some(grant::COMMITMENT_SCHEME)).into();
    out["expiration"] = tag("expiration").into();
    if e.kind == events::GRANT {
        out["window"] = tag("window").into();
        out["epoch"] = tag("epoch").into();
    }
    out["ciphertext_bytes"] = e.content.len().into();
    if let Some(secret) = secret {
        let peer = peer.unwrap_or(e.pubkey);
        let which = if e.kind == events::GRANT {
            grant::Blinding::Grant
        } else {
            grant::Blinding::Job
        };
        let d = match grant::blinded_d(p, secret, &peer, which) {
            Ok(d) => d,
            Err(why) => return refused(why, out),
        };
        let ours = e.tag_value("d") == Some(hex::encode(&d).as_str());
        out["peer"] = keys::did_nostr(&peer).into();
        out["pair_matches"] = ours.into();
        if !ours {
            return refused(grant::GrantError::NotOurs, out);
        }
    }
    valid(out)
}

fn report_verify(p: &dyn CryptoProvider, e: &Event, held: &[Event], now: u64) -> Verdict {
    let mut out = json!({"artefact": "report", "kind": e.kind, "id": e.id_hex()});
    match report::admit_holding(p, e, held, now) {
        Ok(a) => {
            out["valid"] = true.into();
            out["admitted"] = true.into();
            out["outcome"] = a.outcome.as_str().into();
            out["reporter"] = keys::did_nostr(&a.reporter).into();
            out["subject"] = keys::did_nostr(&a.subject).into();
            out["grant"] = hex::encode(&a.grant).into();
            out["evidence_checked"] = a.checked.into();
            out["bare_references"] = a
                .bare
                .iter()
                .map(|b| hex::encode(b))
                .collect::<Vec<_>>()
                .into();
            valid(out)
        }
        Err(why) => refused(why, out),
    }
}

fn hop_verify(
    p: &dyn CryptoProvider,
    v: &Value,
    event_id: Option<&str>,
    grants: &[[u8; 32]],
) -> Result<Verdict, Failure> {
    let base = json!({"artefact": "hops"});
    let (id, hops) = match v {
        Value::Array(_) => {
            let id = event_id
                .and_then(|h| hex::decode_array::<32>(h).ok())
                .ok_or("a bare hop path needs --event-id (64 hex digits)")?;
            (id, v)
        }
        Value::Object(o) => {
            let hops = o
                .get("hops")
                .ok_or("`hops`: the path, a JSON array of hops")?;
            let Some(ev) = o.get("event") else {
                return Err("`event`: the wrapped Nostr event".into());
            };
            let e = match Event::from_value(ev) {
                Ok(e) => e,
                Err(why) => return Ok(refused(why, base)),
            };
            if let Err(why) = e.verify(p) {
                return Ok(refused(why, base));
            }
            if event_id.is_some_and(|h| h != e.id_hex()) {
                return Ok(refused("--event-id is not the wrapped event's id", base));
            }
            (e.id, hops)
        }
        _ => return Err("a hop path: an array of hops, or {\"event\", \"hops\"}".into()),
    };
    let path = match hop::path_from_value(hops) {
        Ok(path) => path,
        Err(why) => return Ok(refused(why, base)),
    };
    Ok(match hop::verify_path(p, &id, &path) {
        Ok(k) => {
            let charged = hop::charged(&k, |n| grants.contains(n));
            valid(json!({
                "valid": true,
                "artefact": "hops",
                "event_id": hex::encode(&id),
                "nodes": k.iter().map(keys::did_nostr).collect::<Vec<_>>(),
                "charged": charged.iter().map(keys::did_nostr).collect::<Vec<_>>(),
            }))
        }
        Err(why) => refused(why, base),
    })
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
    let e = read_event(&path)?;
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
        return Ok(verify_receipts(p, &v, subject, DEFAULT_WINDOW_SECS, now));
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
            return hop_verify(p, &v, a.event_id.as_deref(), &[]);
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
    if kind == events::REPORT {
        return report_verify(p, e, &[], now);
    }
    let mut out = base;
    out["valid"] = true.into();
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

fn verify_receipts(
    p: &dyn CryptoProvider,
    v: &Value,
    subject: [u8; 32],
    window_secs: u64,
    now: u64,
) -> Verdict {
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
    let mut chain = receipt::Chain::new(&first.grant, subject, window_secs);
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
        "acks": acks,
        "head": chain.head().map(|h| hex::encode(&h.link)),
    }))
}

/// The members a window description may have.
const WINDOW_MEMBERS: [&str; 7] = [
    "tier",
    "limits",
    "measured",
    "claimed",
    "idle_windows",
    "suspended_until",
    "now",
];

fn window_evaluate(v: &Value) -> Result<Verdict, Failure> {
    let o = v.as_object().ok_or("the window: a JSON object")?;
    if let Some(k) = o.keys().find(|k| !WINDOW_MEMBERS.contains(&k.as_str())) {
        return Err(format!("`{k}`: not a member of a window"));
    }
    let tier = o
        .get("tier")
        .and_then(Value::as_str)
        .and_then(Tier::parse)
        .ok_or("`tier`: probation, member, trusted or anchor")?;
    let counters = |k: &str| -> Result<Option<Counters>, Failure> {
        o.get(k)
            .map(|c| Counters::from_value(c).map_err(|e| format!("`{k}`: {e:?}")))
            .transpose()
    };
    let u = |k: &str| -> Result<Option<u64>, Failure> {
        o.get(k)
            .map(|x| x.as_u64().ok_or_else(|| format!("`{k}`: an integer")))
            .transpose()
    };
    let measured = counters("measured")?;
    let claimed = counters("claimed")?;
    let mut state = window::GrantState::open(tier);
    if let Some(l) = o.get("limits") {
        let lo = l.as_object().ok_or("`limits`: an object of limit names")?;
        if let Some(k) = lo.keys().find(|k| Limit::parse(k).is_none()) {
            return Err(format!("`limits.{k}`: not a limit"));
        }
        let mut limits = Limits::ZERO;
        for limit in Limit::ALL {
            let n = lo
                .get(limit.as_str())
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("`limits.{}`: an integer", limit.as_str()))?;
            limits.set(limit, n);
        }
        state.limits = limits;
    }
    state.idle_windows = u("idle_windows")?
        .map(|n| u32::try_from(n).map_err(|_| "`idle_windows`: too large".to_string()))
        .transpose()?
        .unwrap_or(0);
    state.suspended_until = u("suspended_until")?;
    let now = u("now")?.unwrap_or(0);
    // §6.6: a grant MUST NOT carry a limit above its tier's ceiling; one that does was never a
    // grant to evaluate.
    if !state.within_ceiling() {
        return Ok(refused(
            "a limit above the tier's ceiling",
            json!({"artefact": "window", "ceilings": Limits::ceilings(tier).to_value()}),
        ));
    }
    let eval = window::evaluate(
        &state.limits,
        &measured.unwrap_or(Counters::ZERO),
        claimed.as_ref(),
    );
    let update = window::update(&state, eval.severity, measured.as_ref(), now);
    Ok(valid(json!({
        "valid": true,
        "severity": eval.severity.as_str(),
        "per_limit": Limit::ALL
            .iter()
            .zip(eval.per_limit)
            .map(|(l, s)| (l.as_str().to_string(), Value::from(s.as_str())))
            .collect::<Map<_, _>>(),
        "dup_ratio": eval.dup_ratio.map(|s| s.as_str()),
        "active_silence": eval.active_silence,
        "tier": update.state.tier.as_str(),
        "limits": update.state.limits.to_value(),
        "cause": update.cause.map(|c| c.as_str()),
        "idle_windows": update.state.idle_windows,
        "suspended_until": update.state.suspended_until,
        "revoked": update.state.revoked,
    })))
}
