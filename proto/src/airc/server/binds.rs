//! Binds (AIRC §4.3, §2.6, §5): `bind` → `bound` inside the connection's namespaces
//! (`forbidden` outside them), reserved names only when configured
//! ([`ServerConfig::bindable_reserved`](super::ServerConfig::bindable_reserved)), each bind
//! counted in the namespace it lies in; a bind flushes its namespace's spool (§7.4). The table
//! and the resolving-client selection are [`crate::airc::bind`]'s.

use super::Server;
use crate::airc::address::Namespace;
use crate::airc::frame::{Bound, ErrorCode, Frame};
use crate::airc::pattern::{Pattern, PatternSegment};
use crate::core::{ConnId, Timestamp};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use rand_core::CryptoRng;

impl<R: CryptoRng> Server<R> {
    pub(super) fn bind(&mut self, now: Timestamp, conn: ConnId, names: Vec<String>) {
        let namespaces = self
            .conns
            .get(&conn)
            .map(|c| c.namespaces.clone())
            .unwrap_or_default();
        let mut patterns = Vec::with_capacity(names.len());
        for name in &names {
            let p = match Pattern::parse_in_realm(name, &self.config.realm) {
                Ok(p) => p,
                Err(e) => return self.fail(conn, ErrorCode::BadBind, &format!("{name}: {e}")),
            };
            // Counted in the broadest of the connection's namespaces it lies in: the one its
            // user was given, when another user holds one beneath it.
            let within = namespaces
                .iter()
                .filter(|ns| pattern_inside(&p, ns))
                .min_by_key(|ns| ns.segments().len());
            let within = match within {
                Some(ns) if p.authority() == Some(&self.config.realm) => ns,
                _ => {
                    let why = format!("{name} is outside your namespaces");
                    return self.fail(conn, ErrorCode::Forbidden, &why);
                }
            };
            if self.reserved_not_bindable(&p) {
                return self.fail(conn, ErrorCode::Forbidden, &format!("{name} is reserved"));
            }
            patterns.push((p, within.segments().to_vec()));
        }
        let mut keys = Vec::new();
        for (p, within) in &patterns {
            if !self.binds.bind_in(conn, p.clone(), within) {
                return self.fail(conn, ErrorCode::BadBind, "too many binds");
            }
            if let Some(PatternSegment::Literal(first)) = p.segments().first() {
                keys.push(first.clone());
            }
        }
        let bound = Bound {
            names: patterns.iter().map(|(p, _)| p.to_string()).collect(),
        };
        self.send(conn, &Frame::Bound(bound));
        // §7.4: a bind flushes the spool for its namespace.
        keys.sort();
        keys.dedup();
        for key in keys {
            self.flush(now, &key);
        }
    }

    fn reserved_not_bindable(&self, p: &Pattern) -> bool {
        p.segments().iter().any(|s| match s {
            PatternSegment::Literal(l) => {
                crate::airc::address::is_reserved_segment(l)
                    && !self.config.bindable_reserved.iter().any(|r| r == l)
            }
            _ => false,
        })
    }
}

/// Whether bind pattern `p` lies inside namespace `ns` (§4.3, §5): its literal prefix is the
/// namespace and something follows, or it names the namespace itself with a trailing `/`.
fn pattern_inside(p: &Pattern, ns: &Namespace) -> bool {
    let segs = p.segments();
    let n = ns.segments();
    let prefix = segs.len() >= n.len()
        && segs
            .iter()
            .zip(n)
            .all(|(s, ns)| matches!(s, PatternSegment::Literal(l) if l == ns));
    prefix && (segs.len() > n.len() || p.is_namespace())
}
