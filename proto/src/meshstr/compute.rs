//! Compute artefacts (meshstr §8, §8.1, §8.2; kinds 11803, 30810, 30811).
//!
//! - A **compute offer** (kind 11803) advertises an executor and one price per runtime. The
//!   order book is segmented by the `runtime` tag (engine, version, digest of the capability
//!   profile), and quotes across runtimes are never compared: [`compare`] answers `None` for them.
//! - A **compute ask** (kind 30810) prices the work without describing it: it carries only the
//!   tags §9.1 lists ([`ASK_TAGS`], anything else is refused by
//!   [`crate::meshstr::events::validate`]). The module and input digests are sealed under the
//!   grant envelope's commitment (`commit` = SHA-256(blinding ‖ canonical `{"input", "module"}`),
//!   [`super::grant::commitment`]) and travel in `compute/1.0/accept` to the one seller that
//!   wins, who checks them against the public ask with [`check_accept`]. The ask's `d` is
//!   blinded too: derived from the same blinding ([`ask_d`]), so nobody without the accept can
//!   link two asks or read the job from either.
//! - A **job receipt** (kind 30811) is the grant envelope again under `blinding.job`
//!   ([`super::grant::seal`] with kind 30811); its body is a [`JobReceipt`].
//! - **Verification is a declared mode** ([`Mode`]): a refutation citing evidence the ask's mode
//!   does not admit is not a finding ([`refute`]).
//!
//! The spellings of `runtime`, the price, the accept body and the ask's `d` are weft's own
//! (`constants.json` and the schemas were not handed over; docs/decisions.md).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;
use serde_json::{Map, Value};

use super::events::{COMPUTE_ASK, COMPUTE_OFFER, Refusal, validate};
use super::grant::commitment;
use super::lower_hex;
use crate::codec::hex;
use crate::crypto::{CryptoProvider, hkdf_expand, hkdf_extract};
use crate::nostr::Event;
use crate::nostr::event::UnsignedEvent;

/// The tags a kind 30810 may carry (§9.1): what a seller needs to quote and nothing that
/// describes the job.
pub const ASK_TAGS: [&str; 10] = [
    "d",
    "commit",
    "executor",
    "bid",
    "deadline",
    "fuel_max",
    "verify",
    "expiration",
    "runtime",
    "input_size",
];

/// The most runtimes one offer may price (not in the text, docs/decisions.md).
pub const MAX_RUNTIMES: usize = 16;

/// Fuel a price is quoted per: millisatoshis per million units of fuel (docs/decisions.md).
pub const FUEL_UNIT: u64 = 1_000_000;

/// HKDF salt of an ask's blinded `d` (docs/decisions.md).
pub const ASK_D_SALT: &[u8] = b"meshstr/blinding/ask/1";
/// HKDF info of an ask's blinded `d` (docs/decisions.md).
pub const ASK_D_INFO: &[u8] = b"meshstr ask d";

/// A runtime: one segment of the order book (§8).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Runtime {
    /// The engine (`wasmtime`, `wasmer`, …).
    pub engine: String,
    /// Its version.
    pub version: String,
    /// SHA-256 of its capability profile.
    pub profile: [u8; 32],
}

impl Runtime {
    fn tag(&self) -> Vec<String> {
        vec![
            "runtime".into(),
            self.engine.clone(),
            self.version.clone(),
            hex::encode(&self.profile),
        ]
    }

    fn read(t: &[String]) -> Option<Self> {
        if t.len() < 4 || t[1].is_empty() || t[2].is_empty() {
            return None;
        }
        Some(Runtime {
            engine: t[1].clone(),
            version: t[2].clone(),
            profile: lower_hex::<32>(&t[3])?,
        })
    }
}

/// One price in an offer: `["runtime", engine, version, profile, msat per million fuel]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quote {
    /// The seller (the offer's author).
    pub seller: [u8; 32],
    /// The segment it is quoted in.
    pub runtime: Runtime,
    /// Millisatoshis per [`FUEL_UNIT`] of fuel.
    pub msat_per_mfuel: u64,
}

/// A checked kind 11803.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The executor advertised.
    pub executor: String,
    /// One quote per runtime.
    pub quotes: Vec<Quote>,
    /// The NIP-40 expiration.
    pub expiration: u64,
}

/// Why an offer, ask or accept was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComputeError {
    /// The event fails its kind's tag rules.
    Event(Refusal),
    /// A `runtime` tag of the wrong shape, a runtime priced twice, or more than [`MAX_RUNTIMES`].
    Runtime,
    /// The accept's module and input are not what the ask committed to.
    Commitment,
    /// The accept body is not `{"blinding", "input", "module"}` in lower-case hex.
    Shape,
}

/// Builds an unsigned kind 11803: one `runtime` tag per priced runtime.
pub fn offer(
    executor: &str,
    prices: &[(Runtime, u64)],
    created_at: u64,
    expiration: u64,
) -> UnsignedEvent {
    let mut tags: Vec<Vec<String>> = vec![vec!["executor".into(), executor.into()]];
    for (r, p) in prices {
        let mut t = r.tag();
        t.push(alloc::format!("{p}"));
        tags.push(t);
    }
    tags.push(crate::nostr::expiration::tag(expiration));
    UnsignedEvent {
        created_at,
        kind: COMPUTE_OFFER,
        tags,
        content: String::new(),
    }
}

/// Reads an offer at `now_secs` (its signature is [`Event::verify`]'s to check): every runtime
/// priced once, at most [`MAX_RUNTIMES`].
pub fn read_offer(e: &Event, now_secs: u64) -> Result<Offer, ComputeError> {
    if validate(e, now_secs).map_err(ComputeError::Event)? != COMPUTE_OFFER {
        return Err(ComputeError::Event(Refusal::WrongKind));
    }
    let mut quotes: Vec<Quote> = Vec::new();
    for t in e
        .tags
        .iter()
        .filter(|t| t.first().is_some_and(|n| n == "runtime"))
    {
        if quotes.len() == MAX_RUNTIMES || t.len() != 5 {
            return Err(ComputeError::Runtime);
        }
        let runtime = Runtime::read(t).ok_or(ComputeError::Runtime)?;
        let msat_per_mfuel = decimal(&t[4]).ok_or(ComputeError::Runtime)?;
        if quotes.iter().any(|q| q.runtime == runtime) {
            return Err(ComputeError::Runtime);
        }
        quotes.push(Quote {
            seller: e.pubkey,
            runtime,
            msat_per_mfuel,
        });
    }
    Ok(Offer {
        executor: e.tag_value("executor").unwrap_or_default().into(),
        quotes,
        expiration: e
            .tag_value("expiration")
            .and_then(decimal)
            .unwrap_or_default(),
    })
}

fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

/// Compares two quotes by price, only inside one segment: quotes across runtimes (another
/// engine, another version, another profile) are never compared (§8), so this is `None`.
pub fn compare(a: &Quote, b: &Quote) -> Option<Ordering> {
    (a.runtime == b.runtime).then(|| {
        a.msat_per_mfuel
            .cmp(&b.msat_per_mfuel)
            .then(a.seller.cmp(&b.seller))
    })
}

/// The cheapest quote in `runtime`'s segment (ties to the lower seller key), ignoring every
/// quote in another segment however cheap.
pub fn best<'a>(quotes: &'a [Quote], runtime: &Runtime) -> Option<&'a Quote> {
    quotes
        .iter()
        .filter(|q| q.runtime == *runtime)
        .min_by(|a, b| compare(a, b).unwrap_or(Ordering::Equal))
}

/// What `fuel` costs at `msat_per_mfuel`, rounded up to the millisatoshi; `None` on overflow.
pub fn price_msat(msat_per_mfuel: u64, fuel: u64) -> Option<u64> {
    let n = u128::from(msat_per_mfuel) * u128::from(fuel);
    u64::try_from(n.div_ceil(u128::from(FUEL_UNIT))).ok()
}

/// A verification mode (§8.2), named in the ask before the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// An independent re-run contradicting the seller-signed hash.
    Sample,
    /// Two executors returning different hashes for one job.
    Dual,
    /// The proof fails against the module and input commitments.
    Proof,
    /// Delivery only: the sealed commitment against the preimage.
    None,
}

impl Mode {
    /// Reads a `verify` tag value.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "sample" => Mode::Sample,
            "dual" => Mode::Dual,
            "proof" => Mode::Proof,
            "none" => Mode::None,
            _ => return None,
        })
    }

    /// The tag value.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Sample => "sample",
            Mode::Dual => "dual",
            Mode::Proof => "proof",
            Mode::None => "none",
        }
    }

    /// Whether adjudicating a dispute under this mode needs the job's plaintext (§8.2's table).
    pub const fn needs_plaintext(self) -> bool {
        matches!(self, Mode::Sample | Mode::Dual)
    }
}

/// Evidence a refutation cites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// An independent re-run's result hash against the hash the seller signed (`sample`).
    Rerun {
        /// The hash the seller signed.
        signed: [u8; 32],
        /// The hash the re-run produced.
        rerun: [u8; 32],
    },
    /// Two executors' result hashes for one job (`dual`).
    TwoExecutors {
        /// One executor's hash.
        first: [u8; 32],
        /// The other's.
        second: [u8; 32],
    },
    /// A proof against the module and input commitments (`proof`).
    Proof {
        /// The proof's bytes.
        proof: Vec<u8>,
    },
    /// The `compute/1.0/sealed` commitment and the key the seller revealed for it (`none`).
    Sealed {
        /// SHA-256 the seller signed before payment.
        commitment: [u8; 32],
        /// What it revealed.
        preimage: Vec<u8>,
    },
}

impl Evidence {
    /// The one mode that admits this evidence.
    pub const fn mode(&self) -> Mode {
        match self {
            Evidence::Rerun { .. } => Mode::Sample,
            Evidence::TwoExecutors { .. } => Mode::Dual,
            Evidence::Proof { .. } => Mode::Proof,
            Evidence::Sealed { .. } => Mode::None,
        }
    }
}

/// What a refutation comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refutation {
    /// The evidence shows the seller wrong: a finding.
    Finding,
    /// The evidence is admitted and shows nothing wrong.
    Unfounded,
    /// The declared mode does not admit this evidence: not a finding (§8.2).
    NotAdmitted,
    /// `proof` is expressible and has no verifier here (§8.2: no reference implementation).
    NoVerifier,
}

/// Weighs a refutation of a job declared under `mode`.
pub fn refute(provider: &dyn CryptoProvider, mode: Mode, evidence: &Evidence) -> Refutation {
    if evidence.mode() != mode {
        return Refutation::NotAdmitted;
    }
    let wrong = match evidence {
        Evidence::Rerun { signed, rerun } => signed != rerun,
        Evidence::TwoExecutors { first, second } => first != second,
        Evidence::Proof { .. } => return Refutation::NoVerifier,
        Evidence::Sealed {
            commitment,
            preimage,
        } => provider.sha256(&[preimage]) != *commitment,
    };
    if wrong {
        Refutation::Finding
    } else {
        Refutation::Unfounded
    }
}

/// The module and input an ask commits to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// SHA-256 of the WASI module.
    pub module: [u8; 32],
    /// SHA-256 of the input.
    pub input: [u8; 32],
}

impl Job {
    /// The committed body: `{"input": hex, "module": hex}`.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("input".into(), hex::encode(&self.input).into());
        m.insert("module".into(), hex::encode(&self.module).into());
        Value::Object(m)
    }
}

/// What a seller needs to quote, and nothing more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskSpec {
    /// The executor asked for.
    pub executor: String,
    /// The engine asked for, if any.
    pub runtime: Option<Runtime>,
    /// The fuel ceiling.
    pub fuel_max: u64,
    /// The input's length in bytes, if told.
    pub input_size: Option<u64>,
    /// Unix seconds by which the result is due.
    pub deadline: u64,
    /// The bid in millisatoshis.
    pub bid_msat: u64,
    /// The verification mode.
    pub verify: Mode,
    /// `created_at`.
    pub created_at: u64,
    /// The NIP-40 expiration.
    pub expiration: u64,
}

/// An ask's blinded `d`: HKDF-SHA256 of the blinding under [`ASK_D_SALT`] and [`ASK_D_INFO`].
pub fn ask_d(provider: &dyn CryptoProvider, blinding: &[u8; 32]) -> [u8; 32] {
    let prk = hkdf_extract(provider, ASK_D_SALT, blinding);
    let mut d = [0u8; 32];
    hkdf_expand(provider, &prk, ASK_D_INFO, &mut d);
    d
}

/// Builds an unsigned kind 30810 for `job`, blinded by `blinding` (fresh from the caller's RNG).
pub fn ask(
    provider: &dyn CryptoProvider,
    spec: &AskSpec,
    job: &Job,
    blinding: &[u8; 32],
) -> UnsignedEvent {
    let s = |x: &str| String::from(x);
    let n = |x: u64| alloc::format!("{x}");
    let mut tags: Vec<Vec<String>> = vec![
        vec![s("d"), hex::encode(&ask_d(provider, blinding))],
        vec![
            s("commit"),
            hex::encode(&commitment(provider, blinding, &job.to_value())),
        ],
        vec![s("executor"), spec.executor.clone()],
        vec![s("bid"), n(spec.bid_msat)],
        vec![s("deadline"), n(spec.deadline)],
        vec![s("fuel_max"), n(spec.fuel_max)],
        vec![s("verify"), s(spec.verify.name())],
    ];
    if let Some(r) = &spec.runtime {
        tags.push(r.tag());
    }
    if let Some(i) = spec.input_size {
        tags.push(vec![s("input_size"), n(i)]);
    }
    tags.push(crate::nostr::expiration::tag(spec.expiration));
    UnsignedEvent {
        created_at: spec.created_at,
        kind: COMPUTE_ASK,
        tags,
        content: String::new(),
    }
}

/// The `compute/1.0/accept` fields that open an ask's commitment: `{"blinding", "input",
/// "module"}` (sent encrypted to the winning seller).
pub fn accept_body(job: &Job, blinding: &[u8; 32]) -> Value {
    let mut v = job.to_value();
    if let Value::Object(m) = &mut v {
        m.insert("blinding".into(), hex::encode(blinding).into());
    }
    v
}

/// The seller's check of an accept against the public ask: the blinding gives the ask's `d`,
/// and with the module and input its `commit`. Returns the job and the ask's verification mode.
pub fn check_accept(
    provider: &dyn CryptoProvider,
    ask: &Event,
    accept: &Value,
    now_secs: u64,
) -> Result<(Job, Mode), ComputeError> {
    if validate(ask, now_secs).map_err(ComputeError::Event)? != COMPUTE_ASK {
        return Err(ComputeError::Event(Refusal::WrongKind));
    }
    let m = accept.as_object().ok_or(ComputeError::Shape)?;
    if m.len() != 3 {
        return Err(ComputeError::Shape);
    }
    let h = |k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .and_then(lower_hex::<32>)
            .ok_or(ComputeError::Shape)
    };
    let blinding = h("blinding")?;
    let job = Job {
        module: h("module")?,
        input: h("input")?,
    };
    let tag = |n: &str| ask.tag_value(n).and_then(lower_hex::<32>);
    if tag("d") != Some(ask_d(provider, &blinding))
        || tag("commit") != Some(commitment(provider, &blinding, &job.to_value()))
    {
        return Err(ComputeError::Commitment);
    }
    let mode = ask
        .tag_value("verify")
        .and_then(Mode::parse)
        .ok_or(ComputeError::Shape)?;
    Ok((job, mode))
}

/// The body a kind 30811 seals (§9.1): everything the receipt is about, inside the ciphertext.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobReceipt {
    /// The ask's `d`.
    pub ask: [u8; 32],
    /// SHA-256 of the module.
    pub module: [u8; 32],
    /// SHA-256 of the input.
    pub input: [u8; 32],
    /// SHA-256 of the result.
    pub result: [u8; 32],
    /// Fuel the run used.
    pub fuel_used: u64,
    /// What was paid, in millisatoshis.
    pub paid_msat: u64,
    /// The Lightning payment hash.
    pub payment_hash: [u8; 32],
    /// The executor that ran it.
    pub executor: String,
}

/// The members of a [`JobReceipt`] body.
const RECEIPT_MEMBERS: [&str; 8] = [
    "ask",
    "executor",
    "fuel_used",
    "input",
    "module",
    "paid_msat",
    "payment_hash",
    "result",
];

impl JobReceipt {
    /// The body as JSON.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("ask".into(), hex::encode(&self.ask).into());
        m.insert("module".into(), hex::encode(&self.module).into());
        m.insert("input".into(), hex::encode(&self.input).into());
        m.insert("result".into(), hex::encode(&self.result).into());
        m.insert("fuel_used".into(), self.fuel_used.into());
        m.insert("paid_msat".into(), self.paid_msat.into());
        m.insert(
            "payment_hash".into(),
            hex::encode(&self.payment_hash).into(),
        );
        m.insert("executor".into(), self.executor.as_str().into());
        Value::Object(m)
    }

    /// Reads a body: exactly its eight members.
    pub fn from_value(v: &Value) -> Option<Self> {
        let m = v.as_object()?;
        if m.len() != RECEIPT_MEMBERS.len() || !RECEIPT_MEMBERS.iter().all(|k| m.contains_key(*k)) {
            return None;
        }
        let h = |k: &str| lower_hex::<32>(m.get(k)?.as_str()?);
        Some(JobReceipt {
            ask: h("ask")?,
            module: h("module")?,
            input: h("input")?,
            result: h("result")?,
            fuel_used: m.get("fuel_used")?.as_u64()?,
            paid_msat: m.get("paid_msat")?.as_u64()?,
            payment_hash: h("payment_hash")?,
            executor: String::from(m.get("executor")?.as_str()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Secp256k1Secret, default_provider, generate_secp256k1};
    use crate::meshstr::events::{JOB_RECEIPT, check};
    use crate::meshstr::grant::{self, Envelope};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;
    use serde_json::json;

    const NOW: u64 = 1787000000;

    fn key(seed: u64) -> Secp256k1Secret {
        generate_secp256k1(default_provider(), &mut ChaCha20Rng::seed_from_u64(seed))
    }

    fn signed(s: &Secp256k1Secret, u: UnsignedEvent) -> Event {
        u.sign(default_provider(), s, &mut ChaCha20Rng::seed_from_u64(5))
            .unwrap()
    }

    fn rt(engine: &str, version: &str, p: u8) -> Runtime {
        Runtime {
            engine: engine.into(),
            version: version.into(),
            profile: [p; 32],
        }
    }

    fn spec() -> AskSpec {
        AskSpec {
            executor: "wasi-p1".into(),
            runtime: Some(rt("wasmtime", "27.0.0", 1)),
            fuel_max: 5_000_000,
            input_size: Some(4096),
            deadline: NOW + 600,
            bid_msat: 2000,
            verify: Mode::Dual,
            created_at: NOW,
            expiration: NOW + 3600,
        }
    }

    const JOB: Job = Job {
        module: [7; 32],
        input: [8; 32],
    };

    #[test]
    fn an_offer_prices_per_runtime_and_reads_back() {
        let s = key(1);
        let prices = [
            (rt("wasmtime", "27.0.0", 1), 300),
            (rt("wasmer", "5.0", 2), 100),
        ];
        let e = signed(&s, offer("wasi-p1", &prices, NOW, NOW + 86400));
        check(default_provider(), &e, NOW).unwrap();
        let o = read_offer(&e, NOW).unwrap();
        assert_eq!(o.executor, "wasi-p1");
        assert_eq!(o.quotes.len(), 2);
        assert_eq!(o.quotes[0].runtime, prices[0].0);
        assert_eq!(o.quotes[1].msat_per_mfuel, 100);
        assert_eq!(
            read_offer(&e, NOW + 86400),
            Err(ComputeError::Event(Refusal::Expired))
        );
    }

    #[test]
    fn offers_priced_twice_or_malformed_are_refused() {
        let s = key(1);
        let r = rt("wasmtime", "27.0.0", 1);
        let twice = offer("x", &[(r.clone(), 1), (r.clone(), 2)], NOW, NOW + 60);
        assert_eq!(
            read_offer(&signed(&s, twice), NOW),
            Err(ComputeError::Runtime)
        );
        let many: Vec<_> = (0..=MAX_RUNTIMES as u8)
            .map(|i| (rt("e", "1", i), 1))
            .collect();
        assert_eq!(
            read_offer(&signed(&s, offer("x", &many, NOW, NOW + 60)), NOW),
            Err(ComputeError::Runtime)
        );
        for bad in [
            vec!["runtime", "wasmtime", "27", "AB"],
            vec!["runtime", "", "27", &"00".repeat(32)],
            vec!["runtime", "wasmtime", "27", &"00".repeat(32), "01"],
            vec!["runtime", "wasmtime", "27", &"00".repeat(32), "-1"],
        ] {
            let mut u = offer("x", &[], NOW, NOW + 60);
            u.tags.push(bad.iter().map(|x| String::from(*x)).collect());
            assert_eq!(
                read_offer(&signed(&s, u), NOW),
                Err(ComputeError::Runtime),
                "{bad:?}"
            );
        }
        let mut no_exec = offer("x", &[], NOW, NOW + 60);
        no_exec.tags.remove(0);
        assert_eq!(
            read_offer(&signed(&s, no_exec), NOW),
            Err(ComputeError::Event(Refusal::MissingTag("executor")))
        );
    }

    #[test]
    fn quotes_across_engines_are_never_compared() {
        let a = Quote {
            seller: [1; 32],
            runtime: rt("wasmtime", "27.0.0", 1),
            msat_per_mfuel: 500,
        };
        let cheap_elsewhere = Quote {
            seller: [2; 32],
            runtime: rt("wasmer", "27.0.0", 1),
            msat_per_mfuel: 1,
        };
        let other_version = Quote {
            runtime: rt("wasmtime", "26.0.0", 1),
            ..cheap_elsewhere.clone()
        };
        let other_profile = Quote {
            runtime: rt("wasmtime", "27.0.0", 9),
            ..cheap_elsewhere.clone()
        };
        for q in [&cheap_elsewhere, &other_version, &other_profile] {
            assert_eq!(compare(&a, q), None);
        }
        let same = Quote {
            seller: [0; 32],
            msat_per_mfuel: 500,
            ..a.clone()
        };
        assert_eq!(
            compare(&a, &same),
            Some(Ordering::Greater),
            "tie to the lower seller"
        );
        let book = [
            a.clone(),
            cheap_elsewhere,
            other_version,
            other_profile,
            same.clone(),
        ];
        assert_eq!(best(&book, &a.runtime), Some(&same));
        assert_eq!(best(&book, &rt("none", "0", 0)), None);
    }

    #[test]
    fn prices_round_up_and_never_overflow() {
        assert_eq!(price_msat(300, 5_000_000), Some(1500));
        assert_eq!(price_msat(1, 1), Some(1));
        assert_eq!(price_msat(0, u64::MAX), Some(0));
        assert_eq!(price_msat(u64::MAX, u64::MAX), None);
    }

    #[test]
    fn an_ask_carries_no_job_and_the_accept_opens_its_commitment() {
        let p = default_provider();
        let s = key(2);
        let blinding = [42; 32];
        let e = signed(&s, ask(p, &spec(), &JOB, &blinding));
        check(p, &e, NOW).unwrap();
        let text = e.to_json();
        for secret in [
            hex::encode(&JOB.module),
            hex::encode(&JOB.input),
            hex::encode(&blinding),
        ] {
            assert!(!text.contains(&secret), "the ask shows {secret}");
        }
        assert!(e.tags.iter().all(|t| ASK_TAGS.contains(&t[0].as_str())));
        let body = accept_body(&JOB, &blinding);
        assert_eq!(check_accept(p, &e, &body, NOW), Ok((JOB, Mode::Dual)));
        // A swapped module, input or blinding does not open it.
        for (k, v) in [
            ("module", [9; 32]),
            ("input", [9; 32]),
            ("blinding", [9; 32]),
        ] {
            let mut b = body.clone();
            b[k] = hex::encode(&v).into();
            assert_eq!(
                check_accept(p, &e, &b, NOW),
                Err(ComputeError::Commitment),
                "{k}"
            );
        }
        let mut extra = body.clone();
        extra["result"] = json!("00");
        assert_eq!(check_accept(p, &e, &extra, NOW), Err(ComputeError::Shape));
        // Two asks for one job under fresh blindings share neither d nor commit.
        let other = ask(p, &spec(), &JOB, &[43; 32]);
        let u = ask(p, &spec(), &JOB, &blinding);
        assert_ne!(other.tags[0], u.tags[0]);
        assert_ne!(other.tags[1], u.tags[1]);
    }

    #[test]
    fn an_ask_that_describes_the_job_is_refused() {
        let p = default_provider();
        let s = key(2);
        let mut u = ask(p, &spec(), &JOB, &[1; 32]);
        u.tags.push(vec!["module".into(), hex::encode(&JOB.module)]);
        assert_eq!(
            check(p, &signed(&s, u), NOW),
            Err(Refusal::BadTag("not an ask tag"))
        );
        let mut u = ask(p, &spec(), &JOB, &[1; 32]);
        u.content = "the job".into();
        assert_eq!(check(p, &signed(&s, u), NOW), Err(Refusal::BadContent));
        let mut u = ask(p, &spec(), &JOB, &[1; 32]);
        u.tags[1][1] = "not hex".into();
        assert_eq!(
            check(p, &signed(&s, u), NOW),
            Err(Refusal::BadTag("commit"))
        );
        let mut u = ask(p, &spec(), &JOB, &[1; 32]);
        u.tags[6][1] = "tee".into();
        assert_eq!(
            check(p, &signed(&s, u), NOW),
            Err(Refusal::BadTag("verify"))
        );
    }

    #[test]
    fn only_the_declared_mode_admits_its_evidence() {
        let p = default_provider();
        let evidence = [
            Evidence::Rerun {
                signed: [1; 32],
                rerun: [2; 32],
            },
            Evidence::TwoExecutors {
                first: [1; 32],
                second: [2; 32],
            },
            Evidence::Proof { proof: vec![0] },
            Evidence::Sealed {
                commitment: [0; 32],
                preimage: b"key".to_vec(),
            },
        ];
        let modes = [Mode::Sample, Mode::Dual, Mode::Proof, Mode::None];
        for (i, m) in modes.iter().enumerate() {
            for (j, ev) in evidence.iter().enumerate() {
                let r = refute(p, *m, ev);
                if i == j {
                    assert_ne!(r, Refutation::NotAdmitted, "{m:?}");
                } else {
                    assert_eq!(r, Refutation::NotAdmitted, "{m:?} admitted {ev:?}");
                }
            }
        }
        assert_eq!(refute(p, Mode::Sample, &evidence[0]), Refutation::Finding);
        assert_eq!(refute(p, Mode::Dual, &evidence[1]), Refutation::Finding);
        assert_eq!(refute(p, Mode::Proof, &evidence[2]), Refutation::NoVerifier);
        assert_eq!(refute(p, Mode::None, &evidence[3]), Refutation::Finding);
        let agree = Evidence::TwoExecutors {
            first: [3; 32],
            second: [3; 32],
        };
        assert_eq!(refute(p, Mode::Dual, &agree), Refutation::Unfounded);
        let same_rerun = Evidence::Rerun {
            signed: [3; 32],
            rerun: [3; 32],
        };
        assert_eq!(refute(p, Mode::Sample, &same_rerun), Refutation::Unfounded);
        let good = Evidence::Sealed {
            commitment: p.sha256(&[b"key"]),
            preimage: b"key".to_vec(),
        };
        assert_eq!(refute(p, Mode::None, &good), Refutation::Unfounded);
        assert!(Mode::Sample.needs_plaintext() && Mode::Dual.needs_plaintext());
        assert!(!Mode::Proof.needs_plaintext() && !Mode::None.needs_plaintext());
        for m in modes {
            assert_eq!(Mode::parse(m.name()), Some(m));
        }
    }

    #[test]
    fn a_job_receipt_is_sealed_to_the_buyer_and_public_only_as_a_commitment() {
        let p = default_provider();
        let (seller, buyer) = (key(3), key(4));
        let buyer_pk = p.schnorr_public_key(&buyer).unwrap();
        let body = JobReceipt {
            ask: ask_d(p, &[42; 32]),
            module: JOB.module,
            input: JOB.input,
            result: [5; 32],
            fuel_used: 4_000_000,
            paid_msat: 1200,
            payment_hash: [6; 32],
            executor: "wasi-p1".into(),
        };
        let env = Envelope {
            kind: JOB_RECEIPT,
            window_secs: 0,
            epoch: 0,
            created_at: NOW,
            expiration: NOW + 86400,
        };
        let u = grant::seal(
            p,
            &seller,
            &buyer_pk,
            &env,
            &body.to_value(),
            &[1; 32],
            &[2; 32],
        )
        .unwrap();
        let e = signed(&seller, u);
        assert_eq!(check(p, &e, NOW), Ok(JOB_RECEIPT));
        let text = e.to_json();
        assert!(!text.contains(&hex::encode(&body.result)) && !text.contains("wasi-p1"));
        let opened = grant::open(p, &buyer, &e).unwrap();
        assert_eq!(JobReceipt::from_value(&opened), Some(body.clone()));
        assert_eq!(grant::open(p, &key(9), &e), Err(grant::GrantError::NotOurs));
        let mut v = body.to_value();
        v["extra"] = json!(1);
        assert_eq!(JobReceipt::from_value(&v), None);
        v.as_object_mut().unwrap().remove("extra");
        v.as_object_mut().unwrap().remove("paid_msat");
        assert_eq!(JobReceipt::from_value(&v), None);
    }
}
