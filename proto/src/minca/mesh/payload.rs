//! The payloads the mesh writes itself, serialized from borrows: a frame it sends is written
//! once into its bytes, with no JSON tree built for it first. Each writes what the `json!` tree
//! it replaces wrote (one member, or none), so the bytes on the wire are unchanged.

use serde::Serialize;

/// `__auth-hello` (§7.2): `{"nonce": …}`.
#[derive(Serialize)]
pub(super) struct Hello<'a> {
    /// This side's nonce for the handshake.
    pub(super) nonce: &'a str,
}

/// `who` (§9.1): `{"note": …}`, or `{}` for a session acting for no account.
#[derive(Serialize)]
pub(super) struct Who<'a> {
    /// This session's note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) note: Option<&'a str>,
}

/// `__leave` (§7.2): `{"room": …}`.
#[derive(Serialize)]
pub(super) struct Leave<'a> {
    /// The room left.
    pub(super) room: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_payload_is_written_as_its_tree_was() {
        let same = |a: &dyn erased::Ser, b: serde_json::Value| {
            assert_eq!(a.bytes(), serde_json::to_vec(&b).unwrap());
        };
        same(&Hello { nonce: "n\"1" }, json!({ "nonce": "n\"1" }));
        same(&Who { note: Some("t.k") }, json!({ "note": "t.k" }));
        same(&Who { note: None }, json!({}));
        same(&Leave { room: "r1" }, json!({ "room": "r1" }));
        let peers: &[&str] = &["did:key:zA", "did:key:zB"];
        same(
            &peers,
            crate::minca::mesh::introduction::peer_list_payload(peers.iter().copied()),
        );
        let none: &[&str] = &[];
        same(
            &none,
            crate::minca::mesh::introduction::peer_list_payload([]),
        );
    }

    mod erased {
        use serde::Serialize;
        pub(super) trait Ser {
            fn bytes(&self) -> alloc::vec::Vec<u8>;
        }
        impl<T: Serialize> Ser for T {
            fn bytes(&self) -> alloc::vec::Vec<u8> {
                serde_json::to_vec(self).unwrap()
            }
        }
    }
}
