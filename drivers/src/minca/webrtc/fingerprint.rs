//! Channel binding (Minca 04 Network §5.1, used by §6.2): the fingerprint strings a mesh
//! handshake signs over, read from session descriptions.
//!
//! Each side takes, from its local and from the remote description, the first
//! `a=fingerprint:<alg> <value>` line and renders it `lowercase(alg) + " " + UPPERCASE(value)`.
//! A description without one has no binding: the string is empty (§5.1).

use std::string::String;

/// The attribute that names a DTLS certificate's fingerprint (RFC 8122).
const FINGERPRINT_ATTRIBUTE: &str = "a=fingerprint:";

/// The channel-binding string of one description (§5.1): its first well-formed
/// `a=fingerprint:<alg> <value>` line, rendered `lowercase(alg) + " " + UPPERCASE(value)`, or the
/// empty string when it has none.
///
/// "First" is in the order of the text, session level or media level alike, since that is what
/// the reference reads. A fingerprint line without both an algorithm and a value is not of the
/// form §5.1 names and is passed over.
pub fn channel_binding(sdp: &str) -> String {
    sdp.lines()
        .filter_map(|line| {
            line.trim_end_matches('\r')
                .strip_prefix(FINGERPRINT_ATTRIBUTE)
        })
        .find_map(render)
        .unwrap_or_default()
}

fn render(rest: &str) -> Option<String> {
    let mut parts = rest.split_ascii_whitespace();
    let alg = parts.next()?;
    let value = parts.next()?;
    let mut out = alg.to_ascii_lowercase();
    out.push(' ');
    out.push_str(&value.to_ascii_uppercase());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer as a browser writes one: the fingerprint at media level, lower-case hex.
    const BROWSER_ANSWER: &str = "v=0\r\n\
        o=- 4611731400430051336 2 IN IP4 127.0.0.1\r\n\
        s=-\r\n\
        t=0 0\r\n\
        a=group:BUNDLE 0\r\n\
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n\
        c=IN IP4 0.0.0.0\r\n\
        a=ice-ufrag:a1b2\r\n\
        a=ice-pwd:c3d4e5f6g7h8i9j0k1l2m3n4\r\n\
        a=fingerprint:SHA-256 3a:9f:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:c1\r\n\
        a=setup:active\r\n\
        a=mid:0\r\n\
        a=sctp-port:5000\r\n";

    #[test]
    fn the_binding_is_the_lowercase_algorithm_and_the_uppercase_value() {
        assert_eq!(
            channel_binding(BROWSER_ANSWER),
            "sha-256 3A:9F:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:C1"
        );
    }

    #[test]
    fn only_the_first_fingerprint_line_binds() {
        let sdp = "v=0\n\
            a=fingerprint:sha-256 AA:BB\n\
            m=application 9 UDP/DTLS/SCTP webrtc-datachannel\n\
            a=fingerprint:sha-512 CC:DD\n";
        assert_eq!(channel_binding(sdp), "sha-256 AA:BB");
    }

    #[test]
    fn a_session_level_fingerprint_before_the_media_is_the_first() {
        let sdp = "v=0\r\nt=0 0\r\na=fingerprint:Sha-1 0a:0b\r\n\
            m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=fingerprint:sha-256 ff:ee\r\n";
        assert_eq!(channel_binding(sdp), "sha-1 0A:0B");
    }

    #[test]
    fn a_description_without_a_fingerprint_has_no_binding() {
        let sdp = "v=0\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:0\r\n";
        assert_eq!(channel_binding(sdp), "");
        assert_eq!(channel_binding(""), "");
    }

    #[test]
    fn a_fingerprint_line_without_a_value_is_passed_over() {
        let sdp = "a=fingerprint:sha-256\r\na=fingerprint: \r\na=fingerprint:sha-256 ab:cd\r\n";
        assert_eq!(channel_binding(sdp), "sha-256 AB:CD");
        assert_eq!(channel_binding("a=fingerprint:sha-256\r\n"), "");
    }

    #[test]
    fn a_line_that_merely_mentions_a_fingerprint_is_not_one() {
        let sdp = "a=x-fingerprint:sha-256 11:22\r\n a=fingerprint:sha-256 33:44\r\n";
        assert_eq!(channel_binding(sdp), "");
    }
}
