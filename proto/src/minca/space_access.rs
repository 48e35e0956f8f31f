//! What 03 Spaces would supply to peer authentication (lost from the copy), as one small trait
//! and weft's in-memory implementation.
//!
//! §6.3 needs, of a space: whether it is private; the current read key (a did:key, from
//! `sys.key`); the read keys this node holds, newest first, with their secrets, to prove with;
//! the seal key of the space key behind a read key (03 §8.1), to seal and open `member`; whether
//! a new key is due (03 §9.2); and whether an account is a reader now or a former member. The
//! access history that answers these lives in 03; [`SpaceAccess`] is the narrow view Minca reads,
//! and [`MemorySpace`] is the table weft keeps when no 03 implementation is attached.
//!
//! Every method returns owned values, so a host can implement the trait over shared, mutable
//! state (a `RefCell`, a database) and the socket machines still see the access history as it is
//! at the moment they ask.

use alloc::collections::BTreeSet;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::read_proof::TurnedAway;
use crate::crypto::P256Secret;

/// Read keys a [`MemorySpace`] holds at most: the newest are kept. A proof uses the newest and
/// at most [`super::read_proof::MAX_EARLIER`] older ones, so more are of use only to open old
/// `member` seals.
pub const MAX_HELD_READ_KEYS: usize = 64;

/// Accounts a [`MemorySpace`] lists as readers, and separately as former members, at most.
pub const MAX_SPACE_ACCOUNTS: usize = 4096;

/// One read key as a holder of the space knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldReadKey {
    /// The read key's did:key.
    pub did: String,
    /// Its secret, if held: what signs `read`.
    pub secret: Option<P256Secret>,
    /// The seal key of the space key behind it (03 §8.1), if held: what seals and opens `member`.
    pub seal_key: Option<[u8; 32]>,
}

/// A space's access, as peer authentication reads it (§6.3).
pub trait SpaceAccess {
    /// The space id (§6: the id, not the room, goes into H and T).
    fn space_id(&self) -> String;
    /// Whether the space is private, so that a read proof is asked for.
    fn is_private(&self) -> bool;
    /// The read key this holder calls current, if it knows one.
    fn current_read_key(&self) -> Option<String>;
    /// Every read key held, newest first.
    fn held_read_keys(&self) -> Vec<HeldReadKey>;
    /// Whether someone who manages the space should change the key (03 §9.2).
    fn new_key_due(&self) -> bool;
    /// Whether `account` may read the space now.
    fn is_reader(&self, account: &str) -> bool;
    /// Whether `account` was a member and was removed (03 §9.2).
    fn is_former_member(&self, account: &str) -> bool;

    /// Whether the verifier turns `session` away when it reconnects (§6.3: while a new key is
    /// due, a session let go of as a former member SHOULD be). This is the verifier's own state,
    /// kept beside the access history; a host that keeps none answers `false`.
    fn turned_away(&self, session: &str) -> bool {
        let _ = session;
        false
    }

    /// The seal key behind `read_key`, if held.
    fn seal_key(&self, read_key: &str) -> Option<[u8; 32]> {
        self.held_read_keys()
            .into_iter()
            .find(|k| k.did == read_key)
            .and_then(|k| k.seal_key)
    }
}

macro_rules! forward {
    ($($ty:ty),*) => {$(
        impl<T: SpaceAccess + ?Sized> SpaceAccess for $ty {
            fn space_id(&self) -> String { (**self).space_id() }
            fn is_private(&self) -> bool { (**self).is_private() }
            fn current_read_key(&self) -> Option<String> { (**self).current_read_key() }
            fn held_read_keys(&self) -> Vec<HeldReadKey> { (**self).held_read_keys() }
            fn new_key_due(&self) -> bool { (**self).new_key_due() }
            fn is_reader(&self, account: &str) -> bool { (**self).is_reader(account) }
            fn is_former_member(&self, account: &str) -> bool { (**self).is_former_member(account) }
            fn seal_key(&self, read_key: &str) -> Option<[u8; 32]> { (**self).seal_key(read_key) }
            fn turned_away(&self, session: &str) -> bool { (**self).turned_away(session) }
        }
    )*};
}
forward!(&T, Rc<T>, Arc<T>, alloc::boxed::Box<T>);

/// weft's in-memory access table for one space.
///
/// The current read key is the newest one added: a holder that missed a key change calls its
/// newest key current, which is exactly the situation §6.3's steps 4 and 5 resolve.
#[derive(Clone, Debug, Default)]
pub struct MemorySpace {
    id: String,
    private: bool,
    /// Newest first.
    keys: Vec<HeldReadKey>,
    readers: BTreeSet<String>,
    former: BTreeSet<String>,
    new_key_due: bool,
    turned_away: TurnedAway,
}

impl MemorySpace {
    /// A public space: no read proof is asked.
    pub fn public(id: &str) -> Self {
        Self {
            id: id.into(),
            ..Self::default()
        }
    }

    /// A private space, with no keys or members yet.
    pub fn private(id: &str) -> Self {
        Self {
            id: id.into(),
            private: true,
            ..Self::default()
        }
    }

    /// Learns a newer read key, which becomes current. The oldest beyond
    /// [`MAX_HELD_READ_KEYS`] is forgotten. Adding a key ends a due key change (03 §9.2: the
    /// change is what was due).
    pub fn add_key(&mut self, key: HeldReadKey) {
        self.keys.retain(|k| k.did != key.did);
        self.keys.insert(0, key);
        self.keys.truncate(MAX_HELD_READ_KEYS);
        self.new_key_due = false;
    }

    /// Learns an older read key (one from before the current), kept behind every known key.
    pub fn add_older_key(&mut self, key: HeldReadKey) {
        if self.keys.len() < MAX_HELD_READ_KEYS && !self.keys.iter().any(|k| k.did == key.did) {
            self.keys.push(key);
        }
    }

    /// Makes `account` a reader. False when the table is full.
    pub fn add_reader(&mut self, account: &str) -> bool {
        self.former.remove(account);
        if self.readers.len() >= MAX_SPACE_ACCOUNTS && !self.readers.contains(account) {
            return false;
        }
        self.readers.insert(account.into());
        true
    }

    /// Remembers a session let go of as a former member (an [`Output::LetGo`] whose account is
    /// one), to turn it away while the new key is still due.
    ///
    /// [`Output::LetGo`]: super::node_socket::Output::LetGo
    pub fn turn_away(&mut self, session: &str) {
        self.turned_away.remember(session);
    }

    /// Removes `account`: it becomes a former member, and a new key is due (03 §9.2).
    pub fn remove_member(&mut self, account: &str) {
        self.readers.remove(account);
        if self.former.len() < MAX_SPACE_ACCOUNTS {
            self.former.insert(account.into());
        }
        self.new_key_due = true;
    }
}

impl SpaceAccess for MemorySpace {
    fn space_id(&self) -> String {
        self.id.clone()
    }
    fn is_private(&self) -> bool {
        self.private
    }
    fn current_read_key(&self) -> Option<String> {
        self.keys.first().map(|k| k.did.clone())
    }
    fn held_read_keys(&self) -> Vec<HeldReadKey> {
        self.keys.clone()
    }
    fn new_key_due(&self) -> bool {
        self.new_key_due
    }
    fn is_reader(&self, account: &str) -> bool {
        self.readers.contains(account)
    }
    fn is_former_member(&self, account: &str) -> bool {
        self.former.contains(account)
    }
    fn turned_away(&self, session: &str) -> bool {
        self.turned_away.refuses(self, session)
    }
}
