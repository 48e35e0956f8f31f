//! The registry of codes (AIRC §14): what an `ack` says in `code`, what an `error` frame says in
//! `code`, and the reasons a passport redemption is refused with.
//!
//! The frames carry codes as strings, because a hop relays an ack "unchanged (status, code, by,
//! reason)" (§6.6) even when the code is one it does not know; these enums are how a machine
//! names the codes it sends and reads the ones it understands.

use core::fmt;

/// Declares a registry enum with its wire strings, `as_str`, `parse` and `ALL`.
macro_rules! registry {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in registry order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The string on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)+
                }
            }

            /// The value a wire string names, or `None` for a string this registry lacks.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($wire => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

registry! {
    /// An `ack`'s `code` (§14.1, gathered from §6, §7 and §12, which name each one where it
    /// arises).
    AckCode {
        /// `failed`: a field of the `msg` has the wrong type, or a local form came from a peer
        /// (§6.2).
        BadAddress = "bad_address",
        /// `failed`: origin outside the connection's namespaces, no relaying or transit, a
        /// missing or invalid signature, policy, or a passport refusal (§6.2, §6.4, §12.5).
        Refused = "refused",
        /// `failed`: `ts + ttl` has passed (§6.2, §7.2).
        Expired = "expired",
        /// `delivered`: the id was seen before; not delivered again (§7.3).
        Duplicate = "duplicate",
        /// `failed`: a namespace reference as destination; fan-out is not offered (§6.4).
        NamespaceNotEndpoint = "namespace_not_endpoint",
        /// `failed`: nothing is bound for the path and the realm knows no such namespace (§6.4).
        NoSuchPath = "no_such_path",
        /// `queued`: the destination's namespace is known but no client is bound (§6.4).
        EndpointOffline = "endpoint_offline",
        /// `failed`: this realm is already in `via`, or `via` holds the hop limit (§6.5).
        RoutingLoop = "routing_loop",
        /// `failed`: DNS has no such authority at all (§6.5).
        NoSuchAuthority = "no_such_authority",
        /// `queued`: no authenticated link to the authority, or it dropped before an ack (§6.5).
        AuthorityUnreachable = "authority_unreachable",
        /// `queued`: the next hop did not ack within the timeout (§6.6).
        NoAck = "no_ack",
    }
}

registry! {
    /// An `error` frame's `code` (§14.2). An error frame is sent before closing (§4.8).
    ErrorCode {
        /// The first frame was not `hello` (§3.3).
        ExpectedHello = "expected_hello",
        /// A `hello` or `welcome` with a `proto` this side does not speak (§4.1).
        BadProto = "bad_proto",
        /// A `hello` whose `role` does not match the face (§3.1).
        WrongFace = "wrong_face",
        /// Not a frame: not an object, no string `t`, or a known `t` with bad fields (§3.2, §4).
        BadFrame = "bad_frame",
        /// Not JSON, or not UTF-8 (§3.2).
        BadJson = "bad_json",
        /// A frame longer than 1 048 576 bytes with its newline (§3.2).
        FrameTooLarge = "frame_too_large",
        /// A bind name that is not a valid pattern, or names a reserved segment (§4.3).
        BadBind = "bad_bind",
        /// An operation for something the connection may not act for (§4.3, §5).
        Forbidden = "forbidden",
        /// A frame this side does not accept here: an unknown `t`, or a known one on the wrong
        /// face or at the wrong time (§3.2).
        UnexpectedFrame = "unexpected_frame",
        /// The accepting side answered `hello` with something other than `welcome` (§3.3).
        NoWelcome = "no_welcome",
        /// `welcome.realm` is not the realm the dialler resolved (§4.1, §8.4).
        RealmMismatch = "realm_mismatch",
        /// A peer's hello or welcome did not verify (§8.4).
        PeerUnverified = "peer_unverified",
    }
}

registry! {
    /// Why a passport redemption was refused (§12.5). Sent as an ack `failed` with code
    /// [`AckCode::Refused`] and, as `reason`, [`PassportRefusal::reason`].
    PassportRefusal {
        /// No record has the token's hash.
        Unknown = "passport_unknown",
        /// The passport was revoked.
        Revoked = "passport_revoked",
        /// The passport's `expires` has passed.
        Expired = "passport_expired",
        /// Every use is consumed.
        Exhausted = "passport_exhausted",
        /// The redeemer does not match `bind_to`, or is the issuing endpoint itself.
        NotForYou = "passport_not_for_you",
    }
}

impl PassportRefusal {
    /// The ack's `reason`: the name with `_` turned to spaces (§12.5, §14.1).
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Unknown => "passport unknown",
            Self::Revoked => "passport revoked",
            Self::Expired => "passport expired",
            Self::Exhausted => "passport exhausted",
            Self::NotForYou => "passport not for you",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn every_code_round_trips_through_its_wire_string() {
        for c in AckCode::ALL {
            assert_eq!(AckCode::parse(c.as_str()), Some(*c));
        }
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
        }
        for c in PassportRefusal::ALL {
            assert_eq!(PassportRefusal::parse(c.as_str()), Some(*c));
        }
        assert_eq!(AckCode::ALL.len(), 11);
        assert_eq!(ErrorCode::ALL.len(), 12);
        assert_eq!(AckCode::parse("nope"), None);
    }

    /// A-14.1-a, A-14.2-a: the wire strings are the spec's, not merely self-consistent (the
    /// round trip above passes with any spelling). §14.2 lists the error codes; §14.1's table
    /// was lost, so the ack codes are those §6 names where each arises (§6.2, §6.4, §6.5,
    /// §6.6, in that order), and the passport refusals §12.5's and §14.1's.
    #[test]
    fn every_wire_string_is_the_one_the_spec_lists() {
        let ack: Vec<_> = AckCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            ack,
            [
                "bad_address",
                "refused",
                "expired",
                "duplicate",
                "namespace_not_endpoint",
                "no_such_path",
                "endpoint_offline",
                "routing_loop",
                "no_such_authority",
                "authority_unreachable",
                "no_ack",
            ]
        );
        let error: Vec<_> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            error,
            [
                "expected_hello",
                "bad_proto",
                "wrong_face",
                "bad_frame",
                "bad_json",
                "frame_too_large",
                "bad_bind",
                "forbidden",
                "unexpected_frame",
                "no_welcome",
                "realm_mismatch",
                "peer_unverified",
            ]
        );
        let refusal: Vec<_> = PassportRefusal::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            refusal,
            [
                "passport_unknown",
                "passport_revoked",
                "passport_expired",
                "passport_exhausted",
                "passport_not_for_you",
            ]
        );
        let mut reasons: Vec<_> = PassportRefusal::ALL.iter().map(|r| r.reason()).collect();
        reasons.sort_unstable();
        // §14.1: "passport unknown, passport expired, passport exhausted, passport revoked,
        // passport not for you", sorted.
        assert_eq!(
            reasons,
            [
                "passport exhausted",
                "passport expired",
                "passport not for you",
                "passport revoked",
                "passport unknown",
            ]
        );
    }

    #[test]
    fn passport_reasons_are_the_names_with_spaces() {
        for r in PassportRefusal::ALL {
            assert_eq!(r.reason(), r.as_str().replace('_', " "));
        }
    }
}
