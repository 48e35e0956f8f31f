//! Admission to a room (§7.2): what one side keeps for one (room, peer).
//!
//! A peer in a room is, for this node, in one of three stages: merely *known* to be there (a relay
//! hello, a `__peers` list, a signal), in a *handshake* with this node's own fresh nonce, or
//! *admitted*. Nothing of the room crosses before the last (§7.2). The machine in
//! [`super::machine`] moves a peer between them; this module holds the state and the one rule of
//! when a handshake is done.

use alloc::string::String;

use crate::core::{ConnId, Timestamp};
use crate::minca::limits::LiveAllowance;
use crate::minca::read_proof::{Admission, Reader};

/// One side's half of a `minca-mesh/v1` handshake in one room (§6.2, §7.2).
#[derive(Clone, Debug)]
pub struct Handshake {
    /// This side's own fresh nonce for this (room, peer).
    pub nonce: String,
    /// Whether this side has sent `__auth-hello`.
    pub greeted: bool,
    /// Whether this side has sent its `__auth-proof` (or the room asks none and the peer's hello
    /// came).
    pub proof_sent: bool,
    /// Whether the peer's proof checked out (or the room asks none and the peer's hello came).
    pub verified: bool,
    /// When the handshake began, for the 10 s limit.
    pub started: Timestamp,
    /// How the peer's read proof let it in (§6.3), once verified in a private space.
    pub admission: Option<Admission>,
}

impl Handshake {
    /// A handshake begun at `now` with this side's `nonce`.
    pub fn new(nonce: String, now: Timestamp) -> Self {
        Self {
            nonce,
            greeted: false,
            proof_sent: false,
            verified: false,
            started: now,
            admission: None,
        }
    }

    /// Whether the peer may be admitted: this side has sent its proof and verified the peer's
    /// (§7.2). A room without proofs sets both once the peer's hello arrives.
    pub fn is_done(&self) -> bool {
        self.proof_sent && self.verified
    }
}

/// What a peer's `who` showed so far (§6.4, §9.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerWho {
    /// Not arrived, and the 10 s grace has not run out: nothing but `who` is taken from it.
    Awaited,
    /// Not arrived within the grace: the peer counts as having no account (§6.3); a late `who`
    /// is still read.
    Missing,
    /// Arrived, showing this account (`None`: the note proved none, §6.4).
    Shown(Option<String>),
}

impl PeerWho {
    /// The account the peer's `who` proved, if any.
    pub fn account(&self) -> Option<&str> {
        match self {
            Self::Shown(a) => a.as_deref(),
            _ => None,
        }
    }
}

/// What this side keeps for a peer admitted in a room.
#[derive(Clone, Debug)]
pub struct Admitted {
    /// The open connection the peer was admitted on. It stays the peer's while the peer is
    /// admitted anywhere: a connection that closes or is replaced ends every admission on it
    /// (§5.1, §7.2), so a flood reaches the peer without looking its connection up.
    pub conn: ConnId,
    /// The peer's receive allowance for live messages (§9.2).
    pub live: LiveAllowance,
    /// Whether this side's `who` went to the peer: live messages go only after it (§9.1, §9.2).
    pub who_sent: bool,
    /// Whether the application found the peer's `who` shows a former member (§9.2): nothing live
    /// goes to it and nothing live from it is taken.
    pub former_member: bool,
    /// What the peer's `who` showed (a space's room; a channel's sends none).
    pub who: PeerWho,
    /// In a private space, what the verifier remembers of the read proof that let the peer in,
    /// to keep it true while the peer stays (§6.3 "Letting a reader go").
    pub reader: Option<Reader>,
}

/// The stage one peer is at in one room.
#[derive(Clone, Debug)]
pub enum Stage {
    /// Known to be in the room; no handshake yet.
    Known,
    /// In a handshake.
    Handshake(Handshake),
    /// Admitted: the room's messages cross.
    Admitted(Admitted),
}

impl Stage {
    /// Whether the peer is admitted.
    pub fn is_admitted(&self) -> bool {
        matches!(self, Self::Admitted(_))
    }

    /// Whether this stage uses the connection to the peer (a handshake or an admission).
    pub fn uses_connection(&self) -> bool {
        !matches!(self, Self::Known)
    }

    /// Whether the peer may hold this side admitted: it does once it has verified what this side
    /// sent and sent its own (§7.2), so from this side's proof on (in a room that `asks_proofs`),
    /// or from its hello (in one that asks none), whether or not this side has admitted it yet.
    pub fn may_hold_us_admitted(&self, asks_proofs: bool) -> bool {
        match self {
            Self::Known => false,
            Self::Handshake(h) if asks_proofs => h.proof_sent,
            Self::Handshake(h) => h.greeted,
            Self::Admitted(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_is_done_only_once_the_proof_is_sent_and_the_peers_verified() {
        let mut h = Handshake::new("n".into(), Timestamp::from_millis(0));
        assert!(!h.is_done());
        h.proof_sent = true;
        assert!(!h.is_done());
        h.verified = true;
        assert!(h.is_done());
        let mut h = Handshake::new("n".into(), Timestamp::from_millis(0));
        h.verified = true;
        assert!(!h.is_done());
    }

    #[test]
    fn a_peer_may_hold_this_side_admitted_from_this_sides_proof_or_without_proofs_its_hello() {
        let now = Timestamp::from_millis(0);
        let mut h = Handshake::new("n".into(), now);
        let may = |h: &Handshake, proofs| Stage::Handshake(h.clone()).may_hold_us_admitted(proofs);
        assert!(!may(&h, true) && !may(&h, false));
        h.greeted = true;
        assert!(!may(&h, true) && may(&h, false));
        h.proof_sent = true;
        assert!(may(&h, true));
        assert!(!Stage::Known.may_hold_us_admitted(true));
        let admitted = Stage::Admitted(Admitted {
            conn: ConnId(0),
            live: LiveAllowance::new(now),
            who_sent: false,
            former_member: false,
            who: PeerWho::Awaited,
            reader: None,
        });
        assert!(admitted.may_hold_us_admitted(true) && admitted.may_hold_us_admitted(false));
    }
}
