//! `weft demo`, the README's main command, passes every one of its checks: the Minca meeting
//! over WebRTC and the AIRC exchanges, within one realm and across two by a passport.

use std::process::ExitCode;

#[test]
fn the_demo_passes_every_check() {
    let mut out = Vec::new();
    let code = weft_drivers::demo::run(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    assert!(text.contains("all checks passed"), "{text}");
    assert!(!text.contains("FAILED"), "{text}");
    assert!(
        text.contains("listener read \"hello, realm\""),
        "the AIRC exchange ran: {text}"
    );
    for line in [
        "[ok] A and B met through the relay, opened a WebRTC data channel and proved their session keys",
        "[ok] each one's `who` note named its account to the other",
        "read live \"hello from A\" from session did:key:",
        "read live \"hello from B\" from session did:key:",
        "[ok] the Minca meeting worked end to end",
    ] {
        assert!(
            text.contains(line),
            "the Minca meeting ran ({line}): {text}"
        );
    }
    for line in [
        "b.test redeemed it for bob/y over the peer link: Some(Delivered), link L",
        "bob/y sent a message to //a.test/alice/x, signed by b.test: ack Delivered",
        "alice/x read \"hello across realms\" from airc://b.test/bob/y",
        "[ok] the passport was redeemed, and the signed message crossed and was delivered",
    ] {
        assert!(
            text.contains(line),
            "the two-realm exchange ran ({line}): {text}"
        );
    }
    assert!(
        !text.contains("Not yet here"),
        "nothing is left out: {text}"
    );
}
