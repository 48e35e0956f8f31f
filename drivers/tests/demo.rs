//! `weft demo`, the README's main command, passes every one of its checks.

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
}
