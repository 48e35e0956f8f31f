//! Proving you may read a private space (Minca 04 Network §6.3), and keeping it true (letting a
//! reader go, the 10 s grace for a missing `who`, the rules while a new key is due).
//!
//! The same proof rides on a node hello over H (§6.1) and on a mesh `__auth-proof` over T
//! (§6.2), so everything here takes the label as a string and knows neither transport:
//!
//! - [`prove`] builds `read`, `readKey`, `member` and `earlier` for a label;
//! - [`verify`] runs the verifier's six numbered steps, in order, and says which step let the
//!   prover in and on which key;
//! - [`Reader`] is what a verifier remembers of each peer it let in, and [`Reader::review`]
//!   answers "keep, let go, or look again at" whenever the access history changes, a peer
//!   connects, its `who` arrives, or its grace runs out;
//! - [`TurnedAway`] remembers the sessions let go as former members while a new key is due, so
//!   they are turned away when they reconnect;
//! - [`MeshReadAccess`] hands all of it to the mesh (§6.2) as a private room's
//!   [`ReadAccess`], with the [`AccessView`] the mesh watches to look again on its own.

use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use serde_json::{Map, Value, json};

use super::auth;
use super::envelope;
use super::note::{NoteChecker, account_of};
use super::space_access::SpaceAccess;
use crate::codec::{base64url, js};
use crate::core::{BoundedSet, Timestamp};
use crate::crypto::CryptoProvider;
use crate::minca::mesh::ReadAccess;

/// Entries of `earlier` a prover sends and a verifier looks at (§6.3: "newest first, at most 4";
/// step 5: "among the first 4 of earlier").
pub const MAX_EARLIER: usize = 4;

/// The envelope label `member` is sealed under (§6.3).
pub const MEMBERSHIP_LABEL: &str = "minca/membership/v1";

/// How long a peer let in on a key that is no longer current has, from its handshake, to send
/// its `who` (§6.3: "given 10 s from its handshake").
pub const WHO_GRACE: Duration = Duration::from_secs(10);

/// Sessions a verifier remembers having let go of as former members while a new key is due.
/// The spec names no number; past it the oldest is forgotten, which only means that session is
/// checked by the steps again (and step 3 still refuses it when it sends its `member`).
pub const MAX_TURNED_AWAY: usize = 1024;

/// One entry of `earlier`: an older read key's DID and its signature over the label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Earlier {
    /// The older read key's DID.
    pub read_key: String,
    /// Its signature over the same label.
    pub read: String,
}

/// The read-proof fields of a hello or a mesh proof (§6.3). All are optional on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadProof {
    /// The newest held read key's signature over the label.
    pub read: Option<String>,
    /// That read key's DID.
    pub read_key: Option<String>,
    /// The prover's note sealed with the space key behind `read_key`, base64url.
    pub member: Option<String>,
    /// Older read keys' signatures, newest first; at most [`MAX_EARLIER`] are read.
    pub earlier: Vec<Earlier>,
}

impl ReadProof {
    /// Reads the fields from a hello or proof object. A field of the wrong type counts as absent
    /// (the steps then fail on it); only the first [`MAX_EARLIER`] entries of `earlier` are
    /// looked at, malformed ones included in that count.
    pub fn from_object(obj: &Map<String, Value>) -> Self {
        let s = |k: &str| obj.get(k).and_then(Value::as_str).map(String::from);
        let earlier = obj
            .get("earlier")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .take(MAX_EARLIER)
                    .filter_map(|e| {
                        Some(Earlier {
                            read_key: e.get("readKey")?.as_str()?.into(),
                            read: e.get("read")?.as_str()?.into(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            read: s("read"),
            read_key: s("readKey"),
            member: s("member"),
            earlier,
        }
    }

    /// Writes the fields that are present into a hello or proof object.
    pub fn write_into(&self, obj: &mut Map<String, Value>) {
        if let Some(read) = &self.read {
            obj.insert("read".into(), json!(read));
        }
        if let Some(k) = &self.read_key {
            obj.insert("readKey".into(), json!(k));
        }
        if let Some(m) = &self.member {
            obj.insert("member".into(), json!(m));
        }
        if !self.earlier.is_empty() {
            let list = self
                .earlier
                .iter()
                .map(|e| json!({"readKey": e.read_key, "read": e.read}))
                .collect();
            obj.insert("earlier".into(), Value::Array(list));
        }
    }
}

/// The bound `member` is sealed to: `{ space: spaceId }`.
fn membership_bound(space_id: &str) -> Value {
    json!({ "space": space_id })
}

/// Builds the read proof over `label` (§6.3).
///
/// `Some(empty)` in a public space. In a private space: `read` by the newest read key held,
/// `readKey` its DID, `member` (when the space key behind it and a `note` are held) the note
/// sealed under its seal key, and `earlier` by each older key held, newest first, at most
/// [`MAX_EARLIER`]. `None` when the space is private and no read key is held: such a node "MUST
/// NOT complete the handshake".
pub fn prove(
    crypto: &dyn CryptoProvider,
    rng: &mut dyn rand_core::CryptoRng,
    space: &dyn SpaceAccess,
    label: &str,
    note: Option<&str>,
) -> Option<ReadProof> {
    if !space.is_private() {
        return Some(ReadProof::default());
    }
    let mut held = space
        .held_read_keys()
        .into_iter()
        .filter_map(|k| Some((k.did, k.secret?, k.seal_key)));
    let (did, secret, seal_key) = held.next()?;
    let member = match (seal_key, note) {
        (Some(key), Some(note)) => {
            let plaintext = js::stringify(&json!(note));
            let sealed = envelope::seal(
                crypto,
                rng,
                &key,
                MEMBERSHIP_LABEL,
                &membership_bound(&space.space_id()),
                plaintext.as_bytes(),
            );
            Some(base64url::encode(&sealed))
        }
        _ => None,
    };
    let earlier = held
        .take(MAX_EARLIER)
        .filter_map(|(did, secret, _)| {
            Some(Earlier {
                read: auth::sign(crypto, &secret, label)?,
                read_key: did,
            })
        })
        .collect();
    Some(ReadProof {
        read: Some(auth::sign(crypto, &secret, label)?),
        read_key: Some(did),
        member,
        earlier,
    })
}

/// Which rule let a prover in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A public space: no read proof is asked, and nobody is let go for one.
    Public,
    /// Let in by a read proof (§6.3), on `key`: the claimed key for steps 3 and 4, the current
    /// read key for step 5.
    Read {
        /// The numbered step that accepted (3, 4 or 5).
        step: u8,
        /// The read key the prover was let in on.
        key: String,
    },
}

/// Opens `member` with the seal key behind `read_key` and returns the account of the note inside,
/// if it is valid at `now` and made out to `prover`.
fn member_account(
    crypto: &dyn CryptoProvider,
    notes: &dyn NoteChecker,
    space: &dyn SpaceAccess,
    read_key: &str,
    member: Option<&str>,
    prover: &str,
    now: Timestamp,
) -> Option<String> {
    let key = space.seal_key(read_key)?;
    let sealed = base64url::decode(member?).ok()?;
    let bound = membership_bound(&space.space_id());
    let plain = envelope::open(crypto, &key, MEMBERSHIP_LABEL, &bound, &sealed).ok()?;
    let proof: Value = serde_json::from_slice(&plain).ok()?;
    account_of(notes, &proof, prover, now)
}

/// The verifier's check of a read proof over `label` by the session `prover` (§6.3), its steps in
/// the spec's order. `None` rejects (step 6).
pub fn verify(
    crypto: &dyn CryptoProvider,
    notes: &dyn NoteChecker,
    space: &dyn SpaceAccess,
    label: &str,
    prover: &str,
    proof: &ReadProof,
    now: Timestamp,
) -> Option<Admission> {
    if !space.is_private() {
        return Some(Admission::Public);
    }
    let current = space.current_read_key();
    // 1. claimed = readKey if present, else the current read key.
    let claimed = proof.read_key.clone().or_else(|| current.clone());
    // 2. read verifies against claimed; `auth::verify` fails a claimed that is not a did:key.
    let read_holds = match (&claimed, &proof.read) {
        (Some(claimed), Some(read)) => auth::verify(crypto, claimed, label, read),
        _ => false,
    };
    if let (true, Some(claimed)) = (read_holds, claimed) {
        let member = || {
            member_account(
                crypto,
                notes,
                space,
                &claimed,
                proof.member.as_deref(),
                prover,
                now,
            )
        };
        // 3. the current key lets in, except a former member while a new key is due.
        if Some(&claimed) == current.as_ref() {
            if space.new_key_due() && member().is_some_and(|a| space.is_former_member(&a)) {
                return None;
            }
            return Some(Admission::Read {
                step: 3,
                key: claimed,
            });
        }
        // 4. an older key lets in with a note, sealed under it, of a reader now.
        if member().is_some_and(|a| space.is_reader(&a)) {
            return Some(Admission::Read {
                step: 4,
                key: claimed,
            });
        }
    }
    // 5. an entry among the first 4 of earlier proves the key the verifier calls current.
    let current = current?;
    let proven = proof
        .earlier
        .iter()
        .take(MAX_EARLIER)
        .any(|e| e.read_key == current && auth::verify(crypto, &current, label, &e.read));
    // 6. otherwise reject.
    proven.then_some(Admission::Read {
        step: 5,
        key: current,
    })
}

/// What a verifier decides about a peer it let in, on looking again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Review {
    /// Keep the peer.
    Keep,
    /// Let go of it at once and send it nothing more (`__leave` on the mesh, close on a node).
    LetGo,
    /// Its `who` is awaited: keep it for now and look again at this time.
    LookAgainAt(Timestamp),
}

/// The `who` of a peer, as far as the verifier knows.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Who {
    Awaited,
    Arrived(Option<String>),
}

/// What a verifier remembers of one peer it let in (§6.3 "Letting a reader go").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reader {
    admission: Admission,
    admitted_at: Timestamp,
    who: Who,
}

impl Reader {
    /// A peer let in at `now` by `admission`.
    pub fn new(admission: Admission, now: Timestamp) -> Self {
        Self {
            admission,
            admitted_at: now,
            who: Who::Awaited,
        }
    }

    /// How the peer was let in.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The peer's `who` arrived, showing `account` (`None`: no account, §6.4).
    pub fn who_arrived(&mut self, account: Option<String>) {
        self.who = Who::Arrived(account);
    }

    /// Whether the peer's `who` has arrived.
    pub fn who_has_arrived(&self) -> bool {
        matches!(self.who, Who::Arrived(_))
    }

    /// The account the peer's `who` proved, if any.
    pub fn account(&self) -> Option<&str> {
        match &self.who {
            Who::Arrived(a) => a.as_deref(),
            Who::Awaited => None,
        }
    }

    /// Whether the peer's `who` shows a former member (03 §9.2), whom nothing more may reach
    /// (§9.2) and whom a verifier lets go of while a new key is due.
    pub fn is_former_member(&self, space: &dyn SpaceAccess) -> bool {
        self.account().is_some_and(|a| space.is_former_member(a))
    }

    /// Looks again at this peer, as a verifier must whenever its access history changes, a peer
    /// connects, this peer's `who` arrives, or a [`Review::LookAgainAt`] comes due.
    pub fn review(&self, space: &dyn SpaceAccess, now: Timestamp) -> Review {
        let Admission::Read { key, .. } = &self.admission else {
            return Review::Keep;
        };
        if space.new_key_due() && self.is_former_member(space) {
            return Review::LetGo;
        }
        if space.current_read_key().as_ref() == Some(key) {
            return Review::Keep;
        }
        match &self.who {
            Who::Arrived(Some(account)) if space.is_reader(account) => Review::Keep,
            Who::Arrived(_) => Review::LetGo,
            Who::Awaited => {
                let deadline = self.admitted_at.saturating_add(WHO_GRACE);
                if now >= deadline {
                    Review::LetGo
                } else {
                    Review::LookAgainAt(deadline)
                }
            }
        }
    }
}

/// Sessions let go of as former members while a new key is due, turned away when they reconnect
/// for as long as the key is still due (§6.3 "While a new key is due").
#[derive(Clone, Debug)]
pub struct TurnedAway(BoundedSet<String>);

impl Default for TurnedAway {
    fn default() -> Self {
        Self(BoundedSet::new(MAX_TURNED_AWAY))
    }
}

impl TurnedAway {
    /// Remembers a session let go of as a former member.
    pub fn remember(&mut self, session: &str) {
        let _ = self.0.insert(session.into());
    }

    /// Whether `session` is to be turned away now: it was let go of as a former member and a new
    /// key is still due. Once the key changed, the steps alone decide.
    pub fn refuses(&self, space: &(impl SpaceAccess + ?Sized), session: &str) -> bool {
        space.new_key_due() && self.0.contains(&String::from(session))
    }
}

/// What of a space's access history a verifier watches to know it changed in a way that can let
/// a reader go (§6.3: "whenever its access history changes"): the current read key, and whether a
/// new key is due. Removing a member makes a new key due (03 §9.2), and a key change makes
/// another key current, so every change that can let a peer go moves one of the two.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessView {
    /// The read key the verifier calls current.
    pub current_read_key: Option<String>,
    /// Whether a new key is due (03 §9.2).
    pub new_key_due: bool,
}

impl AccessView {
    /// The view of `space` now.
    pub fn of(space: &(impl SpaceAccess + ?Sized)) -> Self {
        Self {
            current_read_key: space.current_read_key(),
            new_key_due: space.new_key_due(),
        }
    }
}

/// A private room's read access for the mesh (§6.2 asks "in a private space, the read proof
/// (§6.3) over the same T"): proofs built by [`prove`] from this holder's keys and note, checked
/// by [`verify`], readers looked at again by [`Reader::review`], and a session turned away while
/// a new key is due refused outright (the space's own list, [`SpaceAccess::turned_away`], and the
/// sessions this access let go of as former members).
///
/// The RNG seals `member` under the space key; like every machine's, it is handed in, so a seeded
/// run replays exactly.
pub struct MeshReadAccess<S, N, R> {
    crypto: &'static dyn CryptoProvider,
    space: S,
    notes: N,
    note: Option<String>,
    rng: core::cell::RefCell<R>,
    turned_away: TurnedAway,
}

impl<S, N, R> MeshReadAccess<S, N, R> {
    /// Read access over `space`, checking notes with `notes`, proving with this session's `note`
    /// (sealed as `member` when the space key is held).
    pub fn new(
        crypto: &'static dyn CryptoProvider,
        space: S,
        notes: N,
        note: Option<String>,
        rng: R,
    ) -> Self {
        Self {
            crypto,
            space,
            notes,
            note,
            rng: core::cell::RefCell::new(rng),
            turned_away: TurnedAway::default(),
        }
    }

    /// The access table, for a host that changes it (a key change, a member removed).
    pub fn space_mut(&mut self) -> &mut S {
        &mut self.space
    }
}

impl<S, N, R> ReadAccess for MeshReadAccess<S, N, R>
where
    S: SpaceAccess + Send,
    N: NoteChecker + Send,
    R: rand_core::CryptoRng + Send,
{
    fn prove(&self, label: &str) -> Option<Map<String, Value>> {
        let mut rng = self.rng.borrow_mut();
        let proof = prove(
            self.crypto,
            &mut *rng,
            &self.space,
            label,
            self.note.as_deref(),
        )?;
        let mut fields = Map::new();
        proof.write_into(&mut fields);
        Some(fields)
    }

    fn verify(
        &self,
        now: Timestamp,
        prover: &str,
        label: &str,
        proof: &Map<String, Value>,
    ) -> bool {
        self.admit(now, prover, label, proof).is_some()
    }

    fn admit(
        &self,
        now: Timestamp,
        prover: &str,
        label: &str,
        proof: &Map<String, Value>,
    ) -> Option<Admission> {
        if self.space.turned_away(prover) || self.turned_away.refuses(&self.space, prover) {
            return None;
        }
        let proof = ReadProof::from_object(proof);
        verify(
            self.crypto,
            &self.notes,
            &self.space,
            label,
            prover,
            &proof,
            now,
        )
    }

    fn review(&self, reader: &Reader, now: Timestamp) -> Review {
        reader.review(&self.space, now)
    }

    fn is_former_member(&self, account: &str) -> bool {
        self.space.is_former_member(account)
    }

    fn turn_away(&mut self, session: &str) {
        self.turned_away.remember(session);
    }

    fn view(&self) -> AccessView {
        AccessView::of(&self.space)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::did_key::DidKey;
    use crate::crypto::{P256Secret, default_provider, generate_p256};
    use crate::minca::note::Es256Notes;
    use crate::minca::note::tests::{key, whole_power};
    use crate::minca::space_access::{HeldReadKey, MemorySpace};
    use chacha20::ChaCha20Rng;
    use rand_core::SeedableRng;

    const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);
    const EXP: u64 = 1_900_000_000;
    const LABEL: &str = "minca-mesh/v1|space-1|did:key:zA|did:key:zB|nonce|sha-256 AA|sha-256 BB";

    fn read_key(seed: u64) -> HeldReadKey {
        let c = default_provider();
        let s: P256Secret = generate_p256(c, &mut ChaCha20Rng::seed_from_u64(seed));
        HeldReadKey {
            did: DidKey::P256(c.p256_public_key(&s).unwrap().0).to_did(),
            secret: Some(s),
            seal_key: Some([seed as u8; 32]),
        }
    }

    /// A person: an account root, a session, and the session's note.
    struct Person {
        account: String,
        session: String,
        note: String,
    }

    fn person(seed: u64) -> Person {
        let (root, account) = key(seed);
        let (_, session) = key(seed + 1000);
        let note = whole_power(&root, &session, EXP);
        Person {
            account,
            session,
            note,
        }
    }

    fn notes() -> Es256Notes {
        Es256Notes::new(default_provider())
    }

    fn proof_by(p: &Person, space: &MemorySpace) -> ReadProof {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        prove(default_provider(), &mut rng, space, LABEL, Some(&p.note)).unwrap()
    }

    fn check(space: &MemorySpace, p: &Person, proof: &ReadProof) -> Option<Admission> {
        verify(
            default_provider(),
            &notes(),
            space,
            LABEL,
            &p.session,
            proof,
            NOW,
        )
    }

    /// K0 then K1, with `members` readers.
    fn rotated(members: &[&Person]) -> (MemorySpace, HeldReadKey, HeldReadKey) {
        let (k0, k1) = (read_key(100), read_key(101));
        let mut s = MemorySpace::private("space-1");
        s.add_key(k0.clone());
        s.add_key(k1.clone());
        for m in members {
            s.add_reader(&m.account);
        }
        (s, k0, k1)
    }

    fn only(space_id: &str, keys: &[&HeldReadKey]) -> MemorySpace {
        let mut s = MemorySpace::private(space_id);
        for k in keys.iter().rev() {
            s.add_key((*k).clone());
        }
        s
    }

    #[test]
    fn a_public_space_asks_no_read_proof() {
        let p = person(1);
        let space = MemorySpace::public("space-1");
        assert_eq!(proof_by(&p, &space), ReadProof::default());
        assert_eq!(
            check(&space, &p, &ReadProof::default()),
            Some(Admission::Public)
        );
    }

    #[test]
    fn the_current_key_lets_you_in_by_step_3() {
        let p = person(1);
        let (space, _, k1) = rotated(&[]);
        let proof = proof_by(&p, &space);
        assert_eq!(proof.read_key.as_deref(), Some(k1.did.as_str()));
        assert_eq!(
            check(&space, &p, &proof),
            Some(Admission::Read {
                step: 3,
                key: k1.did.clone()
            })
        );
        // Step 1: without readKey, claimed is the current key.
        let bare = ReadProof {
            read_key: None,
            member: None,
            earlier: Vec::new(),
            ..proof
        };
        assert_eq!(
            check(&space, &p, &bare),
            Some(Admission::Read {
                step: 3,
                key: k1.did
            })
        );
    }

    #[test]
    fn a_read_signed_over_another_label_or_by_another_key_is_refused() {
        let p = person(1);
        let (space, _, _) = rotated(&[]);
        let mut proof = proof_by(&p, &space);
        let other = only("space-1", &[&read_key(7)]);
        proof.read = proof_by(&p, &other).read;
        proof.earlier.clear();
        assert_eq!(check(&space, &p, &proof), None);
    }

    #[test]
    fn a_claimed_key_not_starting_with_did_key_fails_step_2() {
        let p = person(1);
        let (space, _, _) = rotated(&[]);
        let mut proof = proof_by(&p, &space);
        proof.earlier.clear();
        assert!(check(&space, &p, &proof).is_some(), "the proof as made");
        // The key itself, only without its prefix: the prefix is what fails it.
        let bare = proof.read_key.as_deref().unwrap().strip_prefix("did:key:");
        proof.read_key = bare.map(String::from);
        assert_eq!(check(&space, &p, &proof), None);
        proof.read_key = Some("zDnae-not-a-did".into());
        assert_eq!(check(&space, &p, &proof), None);
    }

    #[test]
    fn member_is_the_note_sealed_under_the_seal_key_with_the_membership_label_and_space_bound() {
        let p = person(1);
        let (space, _, k1) = rotated(&[]);
        let proof = proof_by(&p, &space);
        let sealed = base64url::decode(proof.member.as_deref().unwrap()).unwrap();
        let c = default_provider();
        let plain = envelope::open(
            c,
            &k1.seal_key.unwrap(),
            MEMBERSHIP_LABEL,
            &json!({"space": "space-1"}),
            &sealed,
        )
        .unwrap();
        assert_eq!(plain, js::stringify(&json!(p.note)).into_bytes());
        let wrong_bound = json!({"space": "space-2"});
        assert!(
            envelope::open(
                c,
                &k1.seal_key.unwrap(),
                MEMBERSHIP_LABEL,
                &wrong_bound,
                &sealed
            )
            .is_err()
        );
    }

    #[test]
    fn the_current_key_lets_you_in_an_old_one_only_with_a_note_of_a_reader() {
        let bob = person(1);
        let eve = person(2);
        let (alice_space, k0, _) = rotated(&[&bob]);
        let bob_space = only("space-1", &[&k0]);
        // Bob missed K1: he proves with K0 and his note sealed under K0; Alice lets him in by 4.
        let proof = proof_by(&bob, &bob_space);
        assert!(proof.earlier.is_empty());
        assert_eq!(
            check(&alice_space, &bob, &proof),
            Some(Admission::Read {
                step: 4,
                key: k0.did.clone()
            })
        );
        // The same old key without a note, or with a note of someone who is no reader, fails.
        let bare = ReadProof {
            member: None,
            ..proof.clone()
        };
        assert_eq!(check(&alice_space, &bob, &bare), None);
        let eves = proof_by(&eve, &bob_space);
        assert_eq!(check(&alice_space, &eve, &eves), None);
        // Bob's member shown by another session is made out to Bob's, so it lets nobody in.
        assert_eq!(check(&alice_space, &eve, &proof), None);
        // A note no longer valid proves nothing, though it is Bob's and Bob reads.
        let lapsed = Person {
            note: whole_power(&key(1).0, &bob.session, NOW.as_secs()),
            account: bob.account.clone(),
            session: bob.session.clone(),
        };
        let stale = proof_by(&lapsed, &bob_space);
        assert!(stale.member.is_some(), "the lapsed note is shown");
        assert_eq!(check(&alice_space, &lapsed, &stale), None);
    }

    #[test]
    fn a_verifier_without_the_space_key_cannot_let_an_old_key_in_by_step_4() {
        let bob = person(1);
        let (k0, k1) = (read_key(100), read_key(101));
        let mut host = MemorySpace::private("space-1");
        host.add_key(HeldReadKey {
            seal_key: None,
            ..k0.clone()
        });
        host.add_key(HeldReadKey {
            seal_key: None,
            ..k1
        });
        host.add_reader(&bob.account);
        let proof = proof_by(&bob, &only("space-1", &[&k0]));
        assert_eq!(check(&host, &bob, &proof), None);
    }

    #[test]
    fn a_verifier_that_missed_the_change_accepts_an_earlier_entry_for_its_current_key() {
        let alice = person(1);
        let bob = person(2);
        let (alice_space, k0, _) = rotated(&[&alice, &bob]);
        let bob_space = only("space-1", &[&k0]);
        let proof = proof_by(&alice, &alice_space);
        assert_eq!(proof.earlier.len(), 1);
        assert_eq!(proof.earlier[0].read_key, k0.did);
        assert_eq!(
            check(&bob_space, &alice, &proof),
            Some(Admission::Read {
                step: 5,
                key: k0.did.clone()
            })
        );
        let without = ReadProof {
            earlier: Vec::new(),
            ..proof
        };
        assert_eq!(check(&bob_space, &alice, &without), None);
    }

    #[test]
    fn only_the_first_4_entries_of_earlier_count() {
        let alice = person(1);
        let keys: Vec<HeldReadKey> = (0..6).map(|i| read_key(200 + i)).collect();
        let refs: Vec<&HeldReadKey> = keys.iter().collect();
        let all = only("space-1", &refs);
        let proof = proof_by(&alice, &all);
        assert_eq!(proof.earlier.len(), MAX_EARLIER);
        for (i, k) in keys.iter().enumerate().skip(1) {
            let behind = only("space-1", &[k]);
            let got = check(&behind, &alice, &proof);
            assert_eq!(got.is_some(), i <= MAX_EARLIER, "key {i}");
        }
        // A wire list of 5 whose 5th names the verifier's key is read as 4.
        let mut obj = Map::new();
        let mut long = proof.clone();
        long.earlier.insert(0, long.earlier[0].clone());
        long.write_into(&mut obj);
        assert_eq!(obj["earlier"].as_array().unwrap().len(), 5);
        assert_eq!(ReadProof::from_object(&obj).earlier.len(), MAX_EARLIER);
    }

    #[test]
    fn a_node_that_holds_no_read_key_cannot_prove() {
        let p = person(1);
        let mut space = MemorySpace::private("space-1");
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        assert_eq!(
            prove(default_provider(), &mut rng, &space, LABEL, Some(&p.note)),
            None
        );
        space.add_key(HeldReadKey {
            secret: None,
            ..read_key(3)
        });
        assert_eq!(
            prove(default_provider(), &mut rng, &space, LABEL, Some(&p.note)),
            None
        );
    }

    #[test]
    fn while_a_new_key_is_due_a_former_member_with_the_current_key_is_refused() {
        let carol = person(3);
        let bob = person(2);
        let (mut space, _, _) = rotated(&[&carol, &bob]);
        let carols = proof_by(&carol, &space);
        assert!(check(&space, &carol, &carols).is_some());
        space.remove_member(&carol.account);
        assert!(space.new_key_due());
        assert_eq!(check(&space, &carol, &carols), None);
        let bobs = proof_by(&bob, &space);
        assert!(check(&space, &bob, &bobs).is_some());
    }

    #[test]
    fn a_removed_member_that_redials_with_the_old_key_and_her_note_is_refused() {
        let carol = person(3);
        let bob = person(2);
        let k0 = read_key(100);
        let mut space = only("space-1", &[&k0]);
        space.add_reader(&carol.account);
        space.add_reader(&bob.account);
        let carols = proof_by(&carol, &space);
        space.remove_member(&carol.account);
        space.add_key(read_key(101));
        assert_eq!(check(&space, &carol, &carols), None);
        let bobs = proof_by(&bob, &only("space-1", &[&k0]));
        assert_eq!(
            check(&space, &bob, &bobs),
            Some(Admission::Read {
                step: 4,
                key: k0.did
            })
        );
    }

    fn let_in(space: &MemorySpace, p: &Person, proof: &ReadProof) -> Reader {
        Reader::new(check(space, p, proof).unwrap(), NOW)
    }

    #[test]
    fn after_a_key_change_a_reader_stays_and_someone_removed_is_let_go_at_once() {
        let bob = person(2);
        let carol = person(3);
        let k0 = read_key(100);
        let mut space = only("space-1", &[&k0]);
        space.add_reader(&bob.account);
        space.add_reader(&carol.account);
        let mut b = let_in(&space, &bob, &proof_by(&bob, &space));
        let mut c = let_in(&space, &carol, &proof_by(&carol, &space));
        b.who_arrived(Some(bob.account.clone()));
        c.who_arrived(Some(carol.account.clone()));
        space.remove_member(&carol.account);
        assert_eq!(
            c.review(&space, NOW),
            Review::LetGo,
            "former member while key due"
        );
        space.add_key(read_key(101));
        assert_eq!(b.review(&space, NOW), Review::Keep);
        assert_eq!(c.review(&space, NOW), Review::LetGo);
        // Carol invited back, holding the newer key, is let in again.
        space.add_reader(&carol.account);
        let again = let_in(&space, &carol, &proof_by(&carol, &space));
        assert_eq!(again.review(&space, NOW), Review::Keep);
    }

    #[test]
    fn a_peer_on_an_old_key_whose_who_has_not_arrived_gets_10_s_then_is_let_go() {
        let bob = person(2);
        let k0 = read_key(100);
        let mut space = only("space-1", &[&k0]);
        space.add_reader(&bob.account);
        let r = let_in(&space, &bob, &proof_by(&bob, &space));
        space.add_key(read_key(101));
        let deadline = NOW.saturating_add(WHO_GRACE);
        assert_eq!(r.review(&space, NOW), Review::LookAgainAt(deadline));
        let just_before = Timestamp::from_millis(deadline.as_millis() - 1);
        assert_eq!(r.review(&space, just_before), Review::LookAgainAt(deadline));
        assert_eq!(r.review(&space, deadline), Review::LetGo);
        let mut late = r.clone();
        late.who_arrived(Some(bob.account.clone()));
        assert_eq!(late.review(&space, deadline), Review::Keep);
        let mut nobody = r;
        nobody.who_arrived(None);
        assert_eq!(nobody.review(&space, NOW), Review::LetGo);
    }

    #[test]
    fn a_peer_on_the_current_key_is_kept_whatever_its_who() {
        let bob = person(2);
        let (space, _, _) = rotated(&[]);
        let r = let_in(&space, &bob, &proof_by(&bob, &space));
        assert_eq!(
            r.review(&space, NOW.saturating_add(WHO_GRACE)),
            Review::Keep
        );
    }

    #[test]
    fn while_a_new_key_is_due_a_former_member_let_go_is_turned_away_until_the_key_changes() {
        let carol = person(3);
        let (mut space, _, _) = rotated(&[&carol]);
        let mut turned = TurnedAway::default();
        space.remove_member(&carol.account);
        turned.remember(&carol.session);
        assert!(turned.refuses(&space, &carol.session));
        assert!(!turned.refuses(&space, &person(4).session));
        space.add_key(read_key(102));
        assert!(!turned.refuses(&space, &carol.session));
    }

    fn mesh_access(space: MemorySpace, p: &Person) -> impl ReadAccess {
        let rng = ChaCha20Rng::seed_from_u64(11);
        MeshReadAccess::new(
            default_provider(),
            space,
            notes(),
            Some(p.note.clone()),
            rng,
        )
    }

    #[test]
    fn the_mesh_read_access_proves_with_the_newest_key_and_checks_by_the_six_steps() {
        let (alice, bob) = (person(1), person(2));
        let (space, _, k1) = rotated(&[&alice, &bob]);
        let a = mesh_access(space.clone(), &alice);
        let b = mesh_access(space, &bob);
        let proof = a.prove(LABEL).unwrap();
        assert_eq!(proof["readKey"], Value::String(k1.did.clone()));
        assert!(b.verify(NOW, &alice.session, LABEL, &proof));
        assert!(!b.verify(NOW, &alice.session, "minca-mesh/v1|another", &proof));
        assert!(!b.verify(NOW, &alice.session, LABEL, &Map::new()));
    }

    #[test]
    fn a_mesh_member_without_a_read_key_proves_nothing() {
        let p = person(1);
        let a = mesh_access(MemorySpace::private("space-1"), &p);
        assert_eq!(a.prove(LABEL), None);
    }

    #[test]
    fn the_mesh_read_access_refuses_a_session_turned_away() {
        let (alice, bob, carol) = (person(1), person(2), person(3));
        let (space, _, _) = rotated(&[&alice, &bob, &carol]);
        let proof = mesh_access(space.clone(), &alice).prove(LABEL).unwrap();
        // Carol's removal makes a new key due; Alice's session was let go meanwhile.
        let mut turned = space;
        turned.remove_member(&carol.account);
        assert!(mesh_access(turned.clone(), &bob).verify(NOW, &alice.session, LABEL, &proof));
        turned.turn_away(&alice.session);
        let b = mesh_access(turned, &bob);
        assert!(!b.verify(NOW, &alice.session, LABEL, &proof));
    }
}
