//! Policy (AIRC §10): the operator's ordered rules, §10.2's evaluation, and §10.3's reply window.
//!
//! - §10.1 rules: [`Rule`], parsed from the JSON objects §10.1 shows, and [`Policy`], an ordered
//!   list of them (from a JSON list, [`Policy::from_json`]) plus a default;
//! - §10.2 evaluation: [`Policy::check`], step for step, returning a [`Decision`] that says why,
//!   so that §6.4's `failed refused` ack and the audit stream (§13) can carry a reason;
//! - §10.3 reply window: [`ReplyWindow`], the table of when each pair `(from, to)` last passed,
//!   which §6.6 fills ([`ReplyWindow::note`]) for every message acked `delivered` or `queued`.
//!
//! Where it sits (§6.4): after control-traffic dispatch, so link and passport control (§6.3,
//! §11.5) never reach [`Policy::check`] — offers cross policy, as §16.5 requires, and are capped
//! and rate-limited elsewhere. Both the origin server (egress) and the destination server
//! (ingress) run their own check.
//!
//! Link decisions (§11.3) are not made here: the caller hands [`Policy::check`] a
//! [`LinkDecider`], so this module stands alone and a link table can decide by its own records.
//!
//! ## Decisions on gaps in the spec
//!
//! - **Default when unset: allow** ([`DEFAULT_ALLOW`]). §10.1 gives no default; its example
//!   closes with an explicit `*`→`*` deny, which only matters if the default is otherwise open,
//!   and a realm with no policy configured keeps delivering as before. An operator closes the
//!   realm with that final rule or [`Policy::with_default_allow`].
//! - **`if d` means "there is a decision"**: a link DENY (a revoked link, a one-way link used the
//!   wrong way) is returned as a refusal, not passed over; only NO DECISION falls through (§10.2
//!   with §11.3: "a revocation blocks").
//! - **Window edge is inclusive**: `in_reply_window(a, b, w)` holds when `b` messaged `a` at most
//!   `w` ago, so exactly `w` ago is still inside (§10.3 "within the last w seconds").
//! - **`mode: "reply"` without `window`** uses [`DEFAULT_REPLY_WINDOW`] (86 400 s, the example's
//!   value and the default ttl); §11.3 itself calls `in_reply_window(F, T)` with no window.
//!   `window` without `mode: "reply"` is refused, since it would silently do nothing.
//! - **Strict rules**: `from`, `to` and `allow` are required (a missing `allow` must not pick a
//!   side), unknown fields are refused (a misspelt `alow` would otherwise change the policy),
//!   `mode` other than `"reply"` is refused, `{"links": false}` is refused (§10.1 defines only
//!   `true`), and a `links` rule may carry only a `note`.
//! - **Window bounds**: a window is a JSON number of seconds, `0 < window ≤` [`MAX_REPLY_WINDOW`];
//!   fractions are kept to the millisecond.
//! - **Repeated `{"links": true}`** rules are accepted; the link decision is asked at most once
//!   per check, since it cannot change between them.
//! - **A pair noted "in the future"** (the clock stepped back) counts as inside any window, and
//!   noting a pair keeps the later of its two times: "the time the pair last passed".

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use serde_json::{Map, Value};

use super::address::{Address, AddressKey};
use super::pattern::{Pattern, PatternError};
use crate::core::Timestamp;
use crate::core::bounded::{ExpiringInsert, ExpiringSet};

/// What [`Policy::check`] answers when no rule decides and the operator set no default.
///
/// §10.1 leaves it open; see the [module docs](self) for why it is `true`.
pub const DEFAULT_ALLOW: bool = true;

/// The reply window of a `mode: "reply"` rule that gives no `window` (§10.1's example value).
pub const DEFAULT_REPLY_WINDOW: Duration = super::spool::DEFAULT_TTL;

/// The longest `window` a rule may give, and so how long [`ReplyWindow`] remembers a pair at most.
///
/// The spec sets no bound (§15 was lost). 90 days is the longest a passport may live (§12.3), so
/// no grant in AIRC outlasts it.
pub const MAX_REPLY_WINDOW: Duration = super::passport::book::MAX_TTL;

/// Pairs [`ReplyWindow`] remembers at most; past it the pair noted longest ago is forgotten
/// first. The spec sets no bound.
pub const MAX_REPLY_PAIRS: usize = 100_000;

/// Rules one policy may hold at most; every message walks the list, so it is bounded.
pub const MAX_RULES: usize = 1024;

/// The most bytes a rule's `note` may have: notes go into refusal reasons and audit events.
pub const MAX_NOTE_LEN: usize = 256;

/// The most bytes of an unknown field's name a [`RuleError::UnknownField`] keeps, so that an
/// error echoing hostile config stays small.
pub const MAX_ERROR_DETAIL: usize = 64;

/// The mode a rule names to apply only inside the reply window (§10.1).
pub const MODE_REPLY: &str = "reply";

/// Why one rule is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuleError {
    /// The rule is not a JSON object.
    NotAnObject,
    /// A required field is absent: `from`, `to` or `allow`.
    Missing(&'static str),
    /// A field has the wrong JSON type (`from`/`to`/`note`/`mode` strings, `allow`/`links`
    /// booleans, `window` a number).
    WrongType(&'static str),
    /// A field this version does not know (its name, cut to [`MAX_ERROR_DETAIL`] bytes).
    UnknownField(String),
    /// `from` or `to` is not an absolute pattern (§2.7).
    Pattern {
        /// `"from"` or `"to"`.
        field: &'static str,
        /// What is wrong with it.
        error: PatternError,
    },
    /// `{"links": false}`: §10.1 defines only `{"links": true}`.
    LinksNotTrue,
    /// A `links` rule with fields other than `note`.
    LinksWithMatch,
    /// `mode` is not `"reply"`.
    UnknownMode,
    /// `window` given without `mode: "reply"`, where it would do nothing.
    WindowWithoutReply,
    /// `window` is not more than zero and at most [`MAX_REPLY_WINDOW`] seconds.
    WindowOutOfRange,
    /// `note` is longer than [`MAX_NOTE_LEN`] bytes.
    NoteTooLong,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnObject => f.write_str("a rule must be a JSON object"),
            Self::Missing(field) => write!(f, "missing \"{field}\""),
            Self::WrongType(field) => match *field {
                "allow" | "links" => write!(f, "\"{field}\" must be true or false"),
                "window" => f.write_str("\"window\" must be a number of seconds"),
                _ => write!(f, "\"{field}\" must be a string"),
            },
            Self::UnknownField(name) => write!(f, "unknown field \"{name}\""),
            Self::Pattern { field, error } => write!(f, "\"{field}\": {error}"),
            Self::LinksNotTrue => f.write_str("\"links\" may only be true"),
            Self::LinksWithMatch => {
                f.write_str("a {\"links\": true} rule may carry only a \"note\"")
            }
            Self::UnknownMode => write!(f, "\"mode\" may only be \"{MODE_REPLY}\""),
            Self::WindowWithoutReply => {
                write!(f, "\"window\" needs \"mode\": \"{MODE_REPLY}\"")
            }
            Self::WindowOutOfRange => write!(
                f,
                "\"window\" must be more than 0 and at most {} seconds",
                MAX_REPLY_WINDOW.as_secs()
            ),
            Self::NoteTooLong => write!(f, "\"note\" is longer than {MAX_NOTE_LEN} bytes"),
        }
    }
}

impl core::error::Error for RuleError {}

/// Why a policy cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// The text is not JSON.
    NotJson,
    /// The JSON is not a list of rules.
    NotAList,
    /// More than [`MAX_RULES`] rules (how many were given).
    TooManyRules(usize),
    /// The rule at `index` (0-based, as in the JSON list) is malformed.
    Rule {
        /// Its position in the list.
        index: usize,
        /// What is wrong with it.
        error: RuleError,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotJson => f.write_str("policy is not valid JSON"),
            Self::NotAList => f.write_str("policy must be a JSON list of rules"),
            Self::TooManyRules(n) => write!(f, "policy has {n} rules; at most {MAX_RULES}"),
            Self::Rule { index, error } => write!(f, "policy rule [{index}]: {error}"),
        }
    }
}

impl core::error::Error for PolicyError {}

/// One rule of §10.1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `{"links": true}`: where link decisions (§11.3) are consulted.
    Links {
        /// The operator's `note`, if any.
        note: Option<String>,
    },
    /// `{"from": …, "to": …, "allow": …}`, optionally only inside the reply window.
    Match {
        /// The pattern `from` must match.
        from: Pattern,
        /// The pattern `to` must match.
        to: Pattern,
        /// What the rule decides when it applies.
        allow: bool,
        /// `Some(w)` for `mode: "reply"`: the rule applies only when `to` messaged `from` within
        /// `w` (§10.3).
        reply_window: Option<Duration>,
        /// The operator's `note`, if any.
        note: Option<String>,
    },
}

impl Rule {
    /// Parses one rule from its JSON object (§10.1); see the [module docs](self) for what is
    /// refused and why.
    pub fn from_value(value: &Value) -> Result<Self, RuleError> {
        let obj = value.as_object().ok_or(RuleError::NotAnObject)?;
        const KNOWN: [&str; 7] = ["from", "to", "allow", "note", "mode", "window", "links"];
        // serde_json's map is ordered, so the first unknown field reported is deterministic.
        if let Some(k) = obj.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(RuleError::UnknownField(cut(k, MAX_ERROR_DETAIL)));
        }
        let note = note(obj)?;
        if let Some(links) = obj.get("links") {
            match links {
                Value::Bool(true) => {}
                Value::Bool(false) => return Err(RuleError::LinksNotTrue),
                _ => return Err(RuleError::WrongType("links")),
            }
            if obj.keys().any(|k| k != "links" && k != "note") {
                return Err(RuleError::LinksWithMatch);
            }
            return Ok(Self::Links { note });
        }
        let from = pattern(obj, "from")?;
        let to = pattern(obj, "to")?;
        let allow = match obj.get("allow") {
            None => return Err(RuleError::Missing("allow")),
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(RuleError::WrongType("allow")),
        };
        let reply = match obj.get("mode") {
            None => false,
            Some(Value::String(m)) if m == MODE_REPLY => true,
            Some(Value::String(_)) => return Err(RuleError::UnknownMode),
            Some(_) => return Err(RuleError::WrongType("mode")),
        };
        let reply_window = match (reply, obj.get("window")) {
            (false, None) => None,
            (false, Some(_)) => return Err(RuleError::WindowWithoutReply),
            (true, None) => Some(DEFAULT_REPLY_WINDOW),
            (true, Some(w)) => Some(window(w)?),
        };
        Ok(Self::Match {
            from,
            to,
            allow,
            reply_window,
            note,
        })
    }

    /// Parses one rule from JSON text.
    pub fn from_json(text: &str) -> Result<Self, RuleError> {
        // Text that is not JSON cannot be an object; the caller wants a rule-level error.
        let value: Value = serde_json::from_str(text).map_err(|_| RuleError::NotAnObject)?;
        Self::from_value(&value)
    }

    /// Whether this is `{"links": true}`.
    pub fn is_links(&self) -> bool {
        matches!(self, Self::Links { .. })
    }

    /// The operator's `note`, if any.
    pub fn note(&self) -> Option<&str> {
        match self {
            Self::Links { note } | Self::Match { note, .. } => note.as_deref(),
        }
    }

    /// The reply window of a `mode: "reply"` rule.
    pub fn reply_window(&self) -> Option<Duration> {
        match self {
            Self::Match { reply_window, .. } => *reply_window,
            Self::Links { .. } => None,
        }
    }
}

fn note(obj: &Map<String, Value>) -> Result<Option<String>, RuleError> {
    match obj.get("note") {
        None => Ok(None),
        Some(Value::String(n)) if n.len() > MAX_NOTE_LEN => Err(RuleError::NoteTooLong),
        Some(Value::String(n)) => Ok(Some(n.clone())),
        Some(_) => Err(RuleError::WrongType("note")),
    }
}

fn pattern(obj: &Map<String, Value>, field: &'static str) -> Result<Pattern, RuleError> {
    match obj.get(field) {
        None => Err(RuleError::Missing(field)),
        Some(Value::String(p)) => {
            Pattern::parse(p).map_err(|error| RuleError::Pattern { field, error })
        }
        Some(_) => Err(RuleError::WrongType(field)),
    }
}

fn window(value: &Value) -> Result<Duration, RuleError> {
    let secs = value.as_f64().ok_or(RuleError::WrongType("window"))?;
    // Compared in seconds first so that a huge or negative number never reaches Duration.
    if !(secs > 0.0 && secs <= MAX_REPLY_WINDOW.as_secs_f64()) {
        return Err(RuleError::WindowOutOfRange);
    }
    let ms = Duration::from_secs_f64(secs).as_millis();
    let w = Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
    // A positive window under a millisecond would round to "never": keep it non-zero.
    Ok(w.max(Duration::from_millis(1)))
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// What a link table decided for a pair (§11.3): ALLOW or DENY, with the reason §11.3 gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkDecision {
    /// ALLOW (`true`) or DENY (`false`).
    pub allow: bool,
    /// Why, e.g. `link L7f3a9c1e revoked`; for the refused ack and the audit stream.
    pub reason: Option<String>,
}

impl LinkDecision {
    /// ALLOW, with an optional reason.
    pub fn allow(reason: Option<String>) -> Self {
        Self {
            allow: true,
            reason,
        }
    }

    /// DENY, with an optional reason.
    pub fn deny(reason: Option<String>) -> Self {
        Self {
            allow: false,
            reason,
        }
    }
}

/// §11.3's `link_decision(from, to)`: `None` is NO DECISION.
///
/// Implemented for closures `Fn(&Address, &Address) -> Option<LinkDecision>` and by [`NoLinks`].
pub trait LinkDecider {
    /// The decision of the links joining `from` and `to`, or `None` when none decides.
    fn decide(&self, from: &Address, to: &Address) -> Option<LinkDecision>;
}

impl<F> LinkDecider for F
where
    F: Fn(&Address, &Address) -> Option<LinkDecision>,
{
    fn decide(&self, from: &Address, to: &Address) -> Option<LinkDecision> {
        self(from, to)
    }
}

/// A [`LinkDecider`] with no links: always NO DECISION.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoLinks;

impl LinkDecider for NoLinks {
    fn decide(&self, _from: &Address, _to: &Address) -> Option<LinkDecision> {
        None
    }
}

/// Why [`Policy::check`] decided as it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// A link decision (§11.3).
    Link {
        /// The index of the `{"links": true}` rule that consulted it, or `None` when no rule
        /// places links and they were asked first (§10.2's first line).
        rule: Option<usize>,
        /// The link table's reason.
        reason: Option<String>,
    },
    /// A `from`/`to` rule.
    Rule {
        /// Its index in the policy (0-based, as in the JSON list).
        index: usize,
        /// Its `note`, if any.
        note: Option<String>,
    },
    /// No rule decided: the policy's default.
    Default,
}

/// The answer of [`Policy::check`]: allowed or not, and why (§6.4's `allowed, why`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the message may pass; when not, §6.4 acks `failed refused`.
    pub allowed: bool,
    /// What decided.
    pub why: Why,
}

impl Decision {
    /// A one-line reason for a `failed refused` ack's `reason` and the audit stream:
    /// `policy rule [4]`, `policy rule [0]: local fleets`, the link's own reason (or `link`), or
    /// `policy default`.
    pub fn reason(&self) -> String {
        match &self.why {
            Why::Link {
                reason: Some(r), ..
            } => r.clone(),
            Why::Link { reason: None, .. } => "link".to_owned(),
            Why::Rule {
                index,
                note: Some(n),
            } => format!("policy rule [{index}]: {n}"),
            Why::Rule { index, note: None } => format!("policy rule [{index}]"),
            Why::Default => "policy default".to_owned(),
        }
    }
}

/// A realm's policy: ordered rules plus a default (§10.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    default_allow: bool,
    /// Whether some rule is `{"links": true}`, which moves link decisions from first to there.
    links_placed: bool,
}

impl Default for Policy {
    /// No rules; the default is [`DEFAULT_ALLOW`].
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            default_allow: DEFAULT_ALLOW,
            links_placed: false,
        }
    }
}

impl Policy {
    /// A policy of `rules`, in order, and `default_allow`; at most [`MAX_RULES`] rules.
    pub fn new(rules: Vec<Rule>, default_allow: bool) -> Result<Self, PolicyError> {
        if rules.len() > MAX_RULES {
            return Err(PolicyError::TooManyRules(rules.len()));
        }
        let links_placed = rules.iter().any(Rule::is_links);
        Ok(Self {
            rules,
            default_allow,
            links_placed,
        })
    }

    /// Parses the operator's JSON list of rules (§10.1); the default is [`DEFAULT_ALLOW`].
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        let value: Value = serde_json::from_str(text).map_err(|_| PolicyError::NotJson)?;
        Self::from_value(&value)
    }

    /// [`Policy::from_json`] from a JSON value already parsed.
    pub fn from_value(value: &Value) -> Result<Self, PolicyError> {
        let list = value.as_array().ok_or(PolicyError::NotAList)?;
        if list.len() > MAX_RULES {
            return Err(PolicyError::TooManyRules(list.len()));
        }
        let rules = list
            .iter()
            .enumerate()
            .map(|(index, v)| {
                Rule::from_value(v).map_err(|error| PolicyError::Rule { index, error })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(rules, DEFAULT_ALLOW)
    }

    /// The same policy with `default_allow` as its default.
    pub fn with_default_allow(mut self, default_allow: bool) -> Self {
        self.default_allow = default_allow;
        self
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// What the policy answers when no rule decides.
    pub fn default_allow(&self) -> bool {
        self.default_allow
    }

    /// The longest reply window any rule uses (zero when none does): how far back
    /// [`ReplyWindow::prune`] must keep pairs for this policy.
    pub fn max_window(&self) -> Duration {
        self.rules
            .iter()
            .filter_map(Rule::reply_window)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// §10.2's evaluation of a message from `from` to `to` at `now`.
    ///
    /// `links` is §11.3's `link_decision`, asked at most once; `window` is the realm's reply
    /// window table (§10.3).
    pub fn check<L>(
        &self,
        now: Timestamp,
        from: &Address,
        to: &Address,
        links: &L,
        window: &ReplyWindow,
    ) -> Decision
    where
        L: LinkDecider + ?Sized,
    {
        // Asked lazily and at most once: several `links` rules would only ask the same question.
        let mut asked: Option<Option<LinkDecision>> = None;
        let mut link_decision = |rule: Option<usize>| -> Option<Decision> {
            let d = asked
                .get_or_insert_with(|| links.decide(from, to))
                .clone()?;
            Some(Decision {
                allowed: d.allow,
                why: Why::Link {
                    rule,
                    reason: d.reason,
                },
            })
        };
        // if no rule has links:true: d = link_decision(from, to); if d: return d
        if !self.links_placed
            && let Some(d) = link_decision(None)
        {
            return d;
        }
        for (index, rule) in self.rules.iter().enumerate() {
            match rule {
                // if rule.links: d = link_decision(from, to); if d: return d; continue
                Rule::Links { .. } => {
                    if let Some(d) = link_decision(Some(index)) {
                        return d;
                    }
                }
                Rule::Match {
                    from: pf,
                    to: pt,
                    allow,
                    reply_window,
                    note,
                } => {
                    // if not match(rule.from, from) or not match(rule.to, to): continue
                    if !pf.matches(from) || !pt.matches(to) {
                        continue;
                    }
                    // if rule.mode == "reply" and not in_reply_window(from, to, rule.window): continue
                    if let Some(w) = reply_window
                        && !window.in_reply_window(now, from, to, *w)
                    {
                        continue;
                    }
                    // return rule.allow
                    return Decision {
                        allowed: *allow,
                        why: Why::Rule {
                            index,
                            note: note.clone(),
                        },
                    };
                }
            }
        }
        // return default_allow
        Decision {
            allowed: self.default_allow,
            why: Why::Default,
        }
    }
}

/// How long a noted pair is kept: just past the longest window, so that a pair noted exactly
/// [`MAX_REPLY_WINDOW`] ago is still inside it (the edge is inclusive).
const RETENTION: Duration = MAX_REPLY_WINDOW.saturating_add(Duration::from_millis(1));

/// §10.3's table: when each pair `(from, to)` last passed, by address key.
///
/// At most [`MAX_REPLY_PAIRS`] pairs (or the capacity given to [`ReplyWindow::with_capacity`]).
/// When full, noting a new pair first forgets pairs older than [`MAX_REPLY_WINDOW`] (they count
/// for no window any more), then, if still full, the pair noted longest ago (ties: the one first
/// noted), which is handed back so the caller can count it: that eviction can close a window
/// early. Noting a pair again refreshes its time, so an active conversation is never the
/// one forgotten. [`ReplyWindow::prune`] forgets pairs older than the longest window anything
/// asks about.
#[derive(Clone, Debug)]
pub struct ReplyWindow {
    /// Each pair is held until `noted + RETENTION`, so the expiry order is the noted order and
    /// the noted time is `expiry - RETENTION`.
    pairs: ExpiringSet<(AddressKey, AddressKey)>,
}

impl Default for ReplyWindow {
    fn default() -> Self {
        Self::with_capacity(MAX_REPLY_PAIRS)
    }
}

impl ReplyWindow {
    /// An empty table of at most [`MAX_REPLY_PAIRS`] pairs.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table of at most `capacity` pairs.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            pairs: ExpiringSet::new(capacity),
        }
    }

    /// Notes that a message from `from` to `to` passed at `now` (§6.6: acked `delivered` or
    /// `queued`). Returns the live pair evicted to make room, if any, as `(from key, to key)`.
    pub fn note(
        &mut self,
        now: Timestamp,
        from: &Address,
        to: &Address,
    ) -> Option<(AddressKey, AddressKey)> {
        let key = (from.key().clone(), to.key().clone());
        if let Some(noted) = self.noted(&key) {
            // "The time the pair last passed": a clock stepping back must not make it older.
            if noted >= now {
                return None;
            }
            self.pairs.remove(&key);
        }
        match self.pairs.insert(now, key, now + RETENTION) {
            ExpiringInsert::Evicted(k) => Some(k),
            ExpiringInsert::Added | ExpiringInsert::Present | ExpiringInsert::AlreadyExpired => {
                None
            }
        }
    }

    /// When the pair `from` → `to` last passed, if it is remembered.
    pub fn last_passed(&self, from: &Address, to: &Address) -> Option<Timestamp> {
        self.noted(&(from.key().clone(), to.key().clone()))
    }

    /// §10.3's `in_reply_window(a, b, w)`: whether `b` messaged `a` at most `w` before `now`.
    ///
    /// `w` is capped at [`MAX_REPLY_WINDOW`], the most the table remembers.
    pub fn in_reply_window(&self, now: Timestamp, a: &Address, b: &Address, w: Duration) -> bool {
        self.last_passed(b, a)
            .is_some_and(|t| now.saturating_duration_since(t) <= w.min(MAX_REPLY_WINDOW))
    }

    /// Forgets every pair that last passed more than `max_window` before `now`; returns how many
    /// were forgotten. Pass the longest window any caller of [`Self::in_reply_window`] uses: a
    /// server's policy rules ([`Policy::max_window`]) and §11.3's one-way links alike.
    pub fn prune(&mut self, now: Timestamp, max_window: Duration) -> usize {
        let keep_from = now.saturating_sub(max_window.min(MAX_REPLY_WINDOW));
        // A pair noted at `t` expires at `t + RETENTION`; forget those with `t < keep_from`,
        // i.e. expiring at or before `keep_from + RETENTION - 1 ms`.
        let cutoff = keep_from.saturating_add(RETENTION) - Duration::from_millis(1);
        self.pairs.prune(cutoff)
    }

    /// Pairs remembered.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether no pair is remembered.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The most pairs remembered.
    pub fn capacity(&self) -> usize {
        self.pairs.capacity()
    }

    fn noted(&self, key: &(AddressKey, AddressKey)) -> Option<Timestamp> {
        self.pairs.expires_at(key).map(|exp| exp - RETENTION)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use core::cell::Cell;

    /// §10.1's example policy, verbatim.
    const EXAMPLE: &str = r#"[
        {"from": "//example.com/**", "to": "//example.com/**", "allow": true, "note": "local fleets"},
        {"links": true},
        {"from": "*", "to": "//product.example/support", "allow": true},
        {"from": "//partner.example/**", "to": "//example.com/alice/**", "allow": true, "mode": "reply", "window": 86400},
        {"from": "*", "to": "*", "allow": false}
    ]"#;

    const DAY: Duration = Duration::from_secs(86_400);

    fn a(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    fn t(secs: u64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn example() -> Policy {
        Policy::from_json(EXAMPLE).unwrap()
    }

    fn rule_err(json: &str) -> RuleError {
        Rule::from_json(json).unwrap_err()
    }

    fn by_rule(index: usize) -> Why {
        Why::Rule { index, note: None }
    }

    /// A link table that decides `decision` for every pair, counting how often it is asked.
    struct Fixed {
        decision: Option<LinkDecision>,
        asked: Cell<u32>,
    }

    impl Fixed {
        fn new(decision: Option<LinkDecision>) -> Self {
            Self {
                decision,
                asked: Cell::new(0),
            }
        }
    }

    impl LinkDecider for Fixed {
        fn decide(&self, _: &Address, _: &Address) -> Option<LinkDecision> {
            self.asked.set(self.asked.get() + 1);
            self.decision.clone()
        }
    }

    fn revoked() -> Option<LinkDecision> {
        Some(LinkDecision::deny(Some(
            "link L7f3a9c1e revoked".to_string(),
        )))
    }

    #[test]
    fn section_10_1_example_rules_parse() {
        let p = example();
        assert_eq!(p.rules().len(), 5);
        assert_eq!(p.default_allow(), DEFAULT_ALLOW);
        assert_eq!(p.rules()[0].note(), Some("local fleets"));
        assert!(p.rules()[1].is_links());
        assert_eq!(p.rules()[3].reply_window(), Some(DAY));
        assert_eq!(p.max_window(), DAY);
        match &p.rules()[2] {
            Rule::Match {
                from,
                to,
                allow,
                reply_window,
                note,
            } => {
                assert!(from.is_all());
                assert_eq!(to.to_string(), "//product.example/support");
                assert!(*allow && reply_window.is_none() && note.is_none());
            }
            r => panic!("{r:?}"),
        }
        match &p.rules()[4] {
            Rule::Match {
                from, to, allow, ..
            } => assert!(from.is_all() && to.is_all() && !*allow),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn section_10_1_patterns_are_absolute() {
        assert!(Rule::from_json(r#"{"from":"airc://H/a/*","to":"//*/b/","allow":true}"#).is_ok());
        assert_eq!(
            rule_err(r#"{"from":"alice/x","to":"*","allow":true}"#),
            RuleError::Pattern {
                field: "from",
                error: PatternError::Address(super::super::address::AddressError::MissingSlashes)
            }
        );
        assert!(matches!(
            rule_err(r#"{"from":"*","to":"//h/**/x","allow":true}"#),
            RuleError::Pattern {
                field: "to",
                error: PatternError::RestNotLast
            }
        ));
        assert!(matches!(
            rule_err(r#"{"from":"*","to":"//h/a#f","allow":true}"#),
            RuleError::Pattern {
                field: "to",
                error: PatternError::Fragment
            }
        ));
    }

    #[test]
    fn section_10_1_malformed_rules_are_refused_with_their_error() {
        let cases: &[(&str, RuleError)] = &[
            ("[]", RuleError::NotAnObject),
            ("\"*\"", RuleError::NotAnObject),
            ("{not json", RuleError::NotAnObject),
            (r#"{"to":"*","allow":true}"#, RuleError::Missing("from")),
            (r#"{"from":"*","allow":true}"#, RuleError::Missing("to")),
            (r#"{"from":"*","to":"*"}"#, RuleError::Missing("allow")),
            (
                r#"{"from":1,"to":"*","allow":true}"#,
                RuleError::WrongType("from"),
            ),
            (
                r#"{"from":"*","to":"*","allow":"yes"}"#,
                RuleError::WrongType("allow"),
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"note":5}"#,
                RuleError::WrongType("note"),
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"mode":1}"#,
                RuleError::WrongType("mode"),
            ),
            (
                r#"{"from":"*","to":"*","alow":true}"#,
                RuleError::UnknownField("alow".to_string()),
            ),
            (r#"{"links":false}"#, RuleError::LinksNotTrue),
            (r#"{"links":"true"}"#, RuleError::WrongType("links")),
            (r#"{"links":true,"from":"*"}"#, RuleError::LinksWithMatch),
            (r#"{"links":true,"allow":false}"#, RuleError::LinksWithMatch),
            (
                r#"{"from":"*","to":"*","allow":true,"mode":"ask"}"#,
                RuleError::UnknownMode,
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"window":60}"#,
                RuleError::WindowWithoutReply,
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":"60"}"#,
                RuleError::WrongType("window"),
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":0}"#,
                RuleError::WindowOutOfRange,
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":-5}"#,
                RuleError::WindowOutOfRange,
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":1e300}"#,
                RuleError::WindowOutOfRange,
            ),
            (
                r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":7776001}"#,
                RuleError::WindowOutOfRange,
            ),
        ];
        for (json, want) in cases {
            assert_eq!(&rule_err(json), want, "{json}");
            // Every error explains itself.
            assert!(!want.to_string().is_empty());
        }
        let long = alloc::format!(
            r#"{{"from":"*","to":"*","allow":true,"note":"{}"}}"#,
            "n".repeat(MAX_NOTE_LEN + 1)
        );
        assert_eq!(rule_err(&long), RuleError::NoteTooLong);
        // An unknown field's name is kept short, cut on a character boundary.
        let name = "é".repeat(100);
        let json = alloc::format!(r#"{{"{name}":1}}"#);
        match rule_err(&json) {
            RuleError::UnknownField(n) => {
                assert!(n.len() <= MAX_ERROR_DETAIL && name.starts_with(&n) && !n.is_empty());
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn section_10_1_window_is_seconds_with_reply_mode() {
        let r = Rule::from_json(
            r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":7776000}"#,
        )
        .unwrap();
        assert_eq!(r.reply_window(), Some(MAX_REPLY_WINDOW));
        let r =
            Rule::from_json(r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":1.5}"#)
                .unwrap();
        assert_eq!(r.reply_window(), Some(Duration::from_millis(1_500)));
        let r =
            Rule::from_json(r#"{"from":"*","to":"*","allow":true,"mode":"reply","window":1e-9}"#)
                .unwrap();
        assert_eq!(r.reply_window(), Some(Duration::from_millis(1)));
        // mode reply without a window: the default window.
        let r = Rule::from_json(r#"{"from":"*","to":"*","allow":true,"mode":"reply"}"#).unwrap();
        assert_eq!(r.reply_window(), Some(DEFAULT_REPLY_WINDOW));
        // A links rule may carry a note.
        let r = Rule::from_json(r#"{"links":true,"note":"standing grants"}"#).unwrap();
        assert_eq!(
            r,
            Rule::Links {
                note: Some("standing grants".to_string())
            }
        );
        assert_eq!(r.reply_window(), None);
    }

    #[test]
    fn section_10_1_policy_list_errors_name_the_rule() {
        assert_eq!(Policy::from_json("{"), Err(PolicyError::NotJson));
        assert_eq!(
            Policy::from_json(r#"{"links":true}"#),
            Err(PolicyError::NotAList)
        );
        let e = Policy::from_json(r#"[{"links":true},{"from":"*","to":"*"}]"#).unwrap_err();
        assert_eq!(
            e,
            PolicyError::Rule {
                index: 1,
                error: RuleError::Missing("allow")
            }
        );
        assert_eq!(e.to_string(), "policy rule [1]: missing \"allow\"");
        let many = alloc::format!("[{}{{}}]", "{\"links\":true},".repeat(MAX_RULES));
        assert_eq!(
            Policy::from_json(&many),
            Err(PolicyError::TooManyRules(MAX_RULES + 1))
        );
        let rules = vec![Rule::Links { note: None }; MAX_RULES + 1];
        assert_eq!(
            Policy::new(rules, false),
            Err(PolicyError::TooManyRules(MAX_RULES + 1))
        );
        assert!(Policy::new(vec![Rule::Links { note: None }; MAX_RULES], false).is_ok());
    }

    #[test]
    fn section_10_2_example_grid() {
        let p = example();
        let w = ReplyWindow::new();
        let now = t(1_790_380_000);
        let check = |from: &str, to: &str| p.check(now, &a(from), &a(to), &NoLinks, &w);
        // Local fleet, either way, by rule 0 (with its note as the reason).
        let d = check("airc://example.com/alice/x", "airc://example.com/bob/y");
        assert!(d.allowed);
        assert_eq!(
            d.why,
            Why::Rule {
                index: 0,
                note: Some("local fleets".to_string())
            }
        );
        assert_eq!(d.reason(), "policy rule [0]: local fleets");
        assert!(check("airc://example.com/bob/y", "airc://example.com/alice/x").allowed);
        // Anyone may reach product support (rule 2); only that exact endpoint.
        let d = check(
            "airc://stranger.example/eve",
            "airc://product.example/support",
        );
        assert_eq!((d.allowed, d.why), (true, by_rule(2)));
        let d = check(
            "airc://stranger.example/eve",
            "airc://product.example/support/x",
        );
        assert_eq!((d.allowed, d.why), (false, by_rule(4)));
        // The partner may not start a conversation with alice: the reply rule is passed over
        // and the final deny refuses.
        let d = check(
            "airc://partner.example/support/desk",
            "airc://example.com/alice/x",
        );
        assert_eq!((d.allowed, d.why.clone()), (false, by_rule(4)));
        assert_eq!(d.reason(), "policy rule [4]");
        // A stranger is refused by the final `*` → `*` deny.
        let d = check("airc://stranger.example/eve", "airc://example.com/alice/x");
        assert_eq!((d.allowed, d.why), (false, by_rule(4)));
        // Outbound from alice to a stranger: also the final deny (the policy is not egress-open).
        let d = check("airc://example.com/alice/x", "airc://stranger.example/eve");
        assert_eq!((d.allowed, d.why), (false, by_rule(4)));
    }

    #[test]
    fn section_10_3_partner_may_reply_within_the_window() {
        let p = example();
        let mut w = ReplyWindow::new();
        let alice = a("airc://example.com/alice/x");
        let desk = a("airc://partner.example/support/desk");
        let t0 = t(1_790_380_000);
        // Alice wrote to the partner: noted when acked delivered (§6.6).
        assert_eq!(w.note(t0, &alice, &desk), None);
        let d = p.check(t0 + Duration::from_secs(60), &desk, &alice, &NoLinks, &w);
        assert_eq!((d.allowed, d.why), (true, by_rule(3)));
        // Exactly at the window's edge: still inside.
        let d = p.check(t0 + DAY, &desk, &alice, &NoLinks, &w);
        assert_eq!((d.allowed, d.why), (true, by_rule(3)));
        // One millisecond past it: the reply rule no longer applies.
        let late = t0 + DAY + Duration::from_millis(1);
        let d = p.check(late, &desk, &alice, &NoLinks, &w);
        assert_eq!((d.allowed, d.why), (false, by_rule(4)));
        // Alice writing again reopens it.
        w.note(late, &alice, &desk);
        assert!(p.check(late, &desk, &alice, &NoLinks, &w).allowed);
    }

    #[test]
    fn section_10_3_window_is_per_pair_and_directional() {
        let p = example();
        let mut w = ReplyWindow::new();
        let alice = a("airc://example.com/alice/x");
        let desk = a("airc://partner.example/support/desk");
        let other = a("airc://partner.example/sales/bot");
        let t0 = t(1_000_000);
        // The partner writing first does not open the window for itself.
        w.note(t0, &desk, &alice);
        assert!(!p.check(t0, &desk, &alice, &NoLinks, &w).allowed);
        // Alice writing to desk lets desk answer, not another partner endpoint.
        w.note(t0, &alice, &desk);
        assert!(p.check(t0, &desk, &alice, &NoLinks, &w).allowed);
        assert!(!p.check(t0, &other, &alice, &NoLinks, &w).allowed);
        // Nor may desk use it to reach another of alice's endpoints.
        let alice_y = a("airc://example.com/alice/y");
        assert!(!p.check(t0, &desk, &alice_y, &NoLinks, &w).allowed);
        // The pure predicate: in_reply_window(a, b, w) is "b messaged a".
        assert!(w.in_reply_window(t0, &desk, &alice, DAY));
        assert!(w.in_reply_window(t0, &alice, &desk, DAY));
        assert!(!w.in_reply_window(t0, &other, &alice, DAY));
    }

    #[test]
    fn section_2_2_reply_window_compares_keys_not_fragments() {
        let p = example();
        let mut w = ReplyWindow::new();
        let t0 = t(5_000);
        w.note(
            t0,
            &a("airc://Example.COM:2472/Alice/x#incarnation-2"),
            &a("//partner.example/support/desk#a"),
        );
        let d = p.check(
            t0,
            &a("airc://partner.example/support/desk#b"),
            &a("airc://example.com/alice/x"),
            &NoLinks,
            &w,
        );
        assert_eq!((d.allowed, d.why), (true, by_rule(3)));
        assert_eq!(w.len(), 1);
        // Noting the same pair under another fragment is the same entry.
        w.note(
            t0,
            &a("//example.com/alice/x"),
            &a("//partner.example/support/desk"),
        );
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn section_10_2_links_placed_by_a_links_rule() {
        let p = example();
        let w = ReplyWindow::new();
        let now = t(10);
        let alice = a("airc://example.com/alice/x");
        let bob = a("airc://example.com/bob/y");
        let stranger = a("airc://stranger.example/eve");
        // A linked stranger passes at the links rule, before the final deny.
        let linked = Fixed::new(Some(LinkDecision::allow(None)));
        let d = p.check(now, &stranger, &alice, &linked, &w);
        assert_eq!(
            d.why,
            Why::Link {
                rule: Some(1),
                reason: None
            }
        );
        assert!(d.allowed);
        assert_eq!(d.reason(), "link");
        // A revoked link refuses a stranger at the links rule, with the link's reason.
        let r = Fixed::new(revoked());
        let d = p.check(now, &stranger, &product_support(), &r, &w);
        assert!(!d.allowed);
        assert_eq!(d.reason(), "link L7f3a9c1e revoked");
        // Rule 0 comes before the links rule: the local fleet passes despite a revoked link,
        // and the link table is not even asked.
        let r = Fixed::new(revoked());
        let d = p.check(now, &alice, &bob, &r, &w);
        assert_eq!(
            (d.allowed, d.why),
            (
                true,
                Why::Rule {
                    index: 0,
                    note: Some("local fleets".to_string())
                }
            )
        );
        assert_eq!(r.asked.get(), 0);
        // NO DECISION: continue to the next rules.
        let none = Fixed::new(None);
        let d = p.check(now, &stranger, &product_support(), &none, &w);
        assert_eq!((d.allowed, d.why), (true, by_rule(2)));
        assert_eq!(none.asked.get(), 1);
    }

    fn product_support() -> Address {
        a("airc://product.example/support")
    }

    #[test]
    fn section_10_2_links_decide_first_without_a_links_rule() {
        // The example without its links rule: links decide before rule 0.
        let p = Policy::from_json(
            r#"[
            {"from": "//example.com/**", "to": "//example.com/**", "allow": true},
            {"from": "*", "to": "*", "allow": false}
        ]"#,
        )
        .unwrap();
        let w = ReplyWindow::new();
        let alice = a("airc://example.com/alice/x");
        let bob = a("airc://example.com/bob/y");
        let r = Fixed::new(revoked());
        let d = p.check(t(0), &alice, &bob, &r, &w);
        assert_eq!(
            d,
            Decision {
                allowed: false,
                why: Why::Link {
                    rule: None,
                    reason: Some("link L7f3a9c1e revoked".to_string())
                }
            }
        );
        // ALLOW also returns at once, ahead of the final deny.
        let stranger = a("airc://stranger.example/eve");
        let d = p.check(
            t(0),
            &stranger,
            &alice,
            &Fixed::new(Some(LinkDecision::allow(None))),
            &w,
        );
        assert!(d.allowed);
        assert_eq!(
            d.why,
            Why::Link {
                rule: None,
                reason: None
            }
        );
        // NO DECISION falls through to the rules.
        let d = p.check(t(0), &alice, &bob, &NoLinks, &w);
        assert_eq!((d.allowed, d.why), (true, by_rule(0)));
    }

    #[test]
    fn section_10_2_links_rule_after_final_deny_is_never_reached() {
        let p =
            Policy::from_json(r#"[{"from":"*","to":"*","allow":false},{"links":true}]"#).unwrap();
        let linked = Fixed::new(Some(LinkDecision::allow(None)));
        let d = p.check(t(0), &a("//h/a"), &a("//h/b"), &linked, &ReplyWindow::new());
        assert_eq!((d.allowed, d.why), (false, by_rule(0)));
        assert_eq!(linked.asked.get(), 0);
    }

    #[test]
    fn section_10_2_link_decision_asked_at_most_once() {
        let p = Policy::from_json(r#"[{"links":true},{"links":true},{"links":true}]"#).unwrap();
        let none = Fixed::new(None);
        let d = p.check(t(0), &a("//h/a"), &a("//h/b"), &none, &ReplyWindow::new());
        assert_eq!(d.why, Why::Default);
        assert_eq!(none.asked.get(), 1);
        // A closure is a LinkDecider too; the second links rule repeats the first's answer.
        let closure = |_: &Address, _: &Address| Some(LinkDecision::deny(None));
        let d = p.check(
            t(0),
            &a("//h/a"),
            &a("//h/b"),
            &closure,
            &ReplyWindow::new(),
        );
        assert_eq!(
            d.why,
            Why::Link {
                rule: Some(0),
                reason: None
            }
        );
        // And through a trait object.
        let dynamic: &dyn LinkDecider = &NoLinks;
        assert_eq!(
            p.check(t(0), &a("//h/a"), &a("//h/b"), dynamic, &ReplyWindow::new())
                .why,
            Why::Default
        );
    }

    #[test]
    fn section_10_2_first_matching_rule_wins() {
        let p = Policy::from_json(
            r#"[
            {"from":"//h/a","to":"*","allow":false,"note":"a is muted"},
            {"from":"//h/**","to":"//h/**","allow":true}
        ]"#,
        )
        .unwrap();
        let w = ReplyWindow::new();
        let d = p.check(t(0), &a("//h/a"), &a("//h/b"), &NoLinks, &w);
        assert!(!d.allowed);
        assert_eq!(d.reason(), "policy rule [0]: a is muted");
        // Both patterns must match: from matches rule 0 only for //h/a.
        assert!(
            p.check(t(0), &a("//h/c"), &a("//h/b"), &NoLinks, &w)
                .allowed
        );
    }

    #[test]
    fn section_10_2_reply_rule_may_deny() {
        // `allow: false` in reply mode refuses only inside the window; outside, it is passed over.
        let p = Policy::from_json(
            r#"[{"from":"//h/a","to":"//h/b","allow":false,"mode":"reply","window":10}]"#,
        )
        .unwrap()
        .with_default_allow(true);
        let mut w = ReplyWindow::new();
        let (ha, hb) = (a("//h/a"), a("//h/b"));
        assert_eq!(p.check(t(100), &ha, &hb, &NoLinks, &w).why, Why::Default);
        w.note(t(100), &hb, &ha);
        let d = p.check(t(105), &ha, &hb, &NoLinks, &w);
        assert_eq!((d.allowed, d.why), (false, by_rule(0)));
        assert_eq!(p.check(t(111), &ha, &hb, &NoLinks, &w).why, Why::Default);
    }

    #[test]
    fn section_10_2_default_when_no_rule_matches() {
        let rules = r#"[{"from":"//example.com/**","to":"//example.com/**","allow":true}]"#;
        let w = ReplyWindow::new();
        let (stranger, alice) = (a("//stranger.example/eve"), a("//example.com/alice/x"));
        // Unset: DEFAULT_ALLOW.
        let p = Policy::from_json(rules).unwrap();
        let d = p.check(t(0), &stranger, &alice, &NoLinks, &w);
        assert_eq!(
            d,
            Decision {
                allowed: DEFAULT_ALLOW,
                why: Why::Default
            }
        );
        assert_eq!(d.reason(), "policy default");
        // Set by the operator.
        let p = p.with_default_allow(false);
        assert!(!p.default_allow());
        let d = p.check(t(0), &stranger, &alice, &NoLinks, &w);
        assert_eq!((d.allowed, d.why), (false, Why::Default));
        // An empty policy is all default.
        let empty = Policy::default();
        assert!(empty.rules().is_empty());
        assert_eq!(empty.max_window(), Duration::ZERO);
        assert_eq!(
            empty.check(t(0), &stranger, &alice, &NoLinks, &w).why,
            Why::Default
        );
        assert!(
            !Policy::new(vec![], false)
                .unwrap()
                .check(t(0), &stranger, &alice, &NoLinks, &w)
                .allowed
        );
    }

    #[test]
    fn section_10_3_reply_window_is_bounded_oldest_noted_first() {
        let mut w = ReplyWindow::with_capacity(3);
        assert_eq!(ReplyWindow::new().capacity(), MAX_REPLY_PAIRS);
        let e = |n: u32| a(&alloc::format!("//h/e{n}"));
        let key = |x: u32, y: u32| (e(x).key().clone(), e(y).key().clone());
        assert_eq!(w.note(t(1), &e(1), &e(0)), None);
        assert_eq!(w.note(t(2), &e(2), &e(0)), None);
        assert_eq!(w.note(t(3), &e(3), &e(0)), None);
        // Noting (1, 0) again refreshes it: (2, 0) is now the oldest noted.
        assert_eq!(w.note(t(4), &e(1), &e(0)), None);
        assert_eq!(w.len(), 3);
        assert_eq!(w.note(t(5), &e(4), &e(0)), Some(key(2, 0)));
        assert_eq!(w.note(t(6), &e(5), &e(0)), Some(key(3, 0)));
        assert_eq!(w.len(), 3);
        assert_eq!(w.last_passed(&e(1), &e(0)), Some(t(4)));
        assert_eq!(w.last_passed(&e(2), &e(0)), None);
        // A forgotten pair no longer opens the window.
        assert!(!w.in_reply_window(t(6), &e(0), &e(2), DAY));
        assert!(w.in_reply_window(t(6), &e(0), &e(1), DAY));
    }

    #[test]
    fn section_10_3_reply_window_forgets_the_expired_before_the_live() {
        let mut w = ReplyWindow::with_capacity(2);
        let (x, y, z) = (a("//h/x"), a("//h/y"), a("//h/z"));
        w.note(t(0), &x, &y);
        w.note(t(10), &y, &z);
        // Past MAX_REPLY_WINDOW the first pair is dead: it goes quietly, not the live one.
        let later = t(0) + MAX_REPLY_WINDOW + Duration::from_secs(1);
        assert_eq!(w.note(later, &z, &x), None);
        assert_eq!(w.last_passed(&x, &y), None);
        assert_eq!(w.last_passed(&y, &z), Some(t(10)));
        assert_eq!(w.last_passed(&z, &x), Some(later));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn section_10_3_prune_keeps_the_largest_window() {
        let p = example();
        let mut w = ReplyWindow::new();
        let (x, y, z) = (a("//h/x"), a("//h/y"), a("//h/z"));
        let t0 = t(1_000_000);
        w.note(t0, &x, &y);
        w.note(t0 + Duration::from_secs(1), &y, &z);
        // Exactly max_window later: the edge is inside, nothing goes.
        assert_eq!(w.prune(t0 + p.max_window(), p.max_window()), 0);
        assert!(w.in_reply_window(t0 + DAY, &y, &x, DAY));
        // A millisecond later the first pair is older than any rule's window.
        let now = t0 + p.max_window() + Duration::from_millis(1);
        assert_eq!(w.prune(now, p.max_window()), 1);
        assert_eq!(w.len(), 1);
        assert_eq!(w.last_passed(&x, &y), None);
        assert!(!w.is_empty());
        // A zero max window (no reply rule) forgets everything older than now.
        assert_eq!(w.prune(now, Duration::ZERO), 1);
        assert!(w.is_empty());
    }

    #[test]
    fn section_10_3_last_passed_never_goes_back() {
        let mut w = ReplyWindow::new();
        let (x, y) = (a("//h/x"), a("//h/y"));
        w.note(t(100), &x, &y);
        // The clock stepped back: the pair still last passed at 100.
        w.note(t(50), &x, &y);
        assert_eq!(w.last_passed(&x, &y), Some(t(100)));
        // Asked "before" that, it counts as inside the window.
        assert!(w.in_reply_window(t(60), &y, &x, Duration::from_secs(1)));
        // A caller's window past MAX_REPLY_WINDOW is capped at it.
        let far = t(100) + MAX_REPLY_WINDOW + Duration::from_secs(1);
        assert!(!w.in_reply_window(far, &y, &x, Duration::MAX));
    }

    #[test]
    fn section_10_3_capacity_zero_remembers_nothing() {
        let mut w = ReplyWindow::with_capacity(0);
        let (x, y) = (a("//h/x"), a("//h/y"));
        assert_eq!(
            w.note(t(1), &x, &y),
            Some((x.key().clone(), y.key().clone()))
        );
        assert!(w.is_empty());
        assert!(!w.in_reply_window(t(1), &y, &x, DAY));
    }
}
