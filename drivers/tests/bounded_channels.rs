//! Security issue: "the readers' channels to the loop are bounded with backpressure (no
//! unbounded channel anywhere in drivers)". Every queue between a socket, a helper thread and a
//! loop holds a named number of items, so a peer that sends faster than a loop runs is pushed
//! back on instead of buffered without end. This test reads the drivers' sources and fails on any
//! channel constructor that has no bound; test modules (after `#[cfg(test)]`) are not the
//! program and are not read.

use std::path::Path;

/// Whether `code` builds a channel with no bound: smol's and tokio's `unbounded…`, or a
/// `channel()` / `channel::<T>()` called with no capacity (std's `mpsc::channel`; tokio's and
/// smol's bounded `channel(n)` / `bounded(n)` and std's `sync_channel(n)` take one).
fn unbounded(code: &str) -> bool {
    if code.contains("unbounded") {
        return true;
    }
    code.match_indices("channel").any(|(at, _)| {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return false;
        }
        let mut rest = &code[at + "channel".len()..];
        if let Some(generic) = rest.strip_prefix("::<") {
            let Some(end) = generic.find(">(") else {
                return false;
            };
            rest = &generic[end + 1..];
        }
        rest.starts_with("()")
    })
}

fn check(dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            check(&path, found);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            let code = line.split("//").next().unwrap_or("");
            if unbounded(code) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
}

#[test]
fn no_channel_in_the_drivers_is_unbounded() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    check(&src, &mut found);
    assert!(
        found.is_empty(),
        "unbounded channels (give each a named bound and backpressure):\n{}",
        found.join("\n")
    );
}

#[test]
fn bounded_constructors_pass_and_unbounded_ones_do_not() {
    for ok in [
        "let (a, b) = mpsc::channel(crate::host::NET_QUEUE);",
        "let (a, b) = ::tokio::sync::mpsc::channel::<Job>(MAX_DNS_JOBS);",
        "let (a, b) = std::sync::mpsc::sync_channel(1);",
        "let (a, b) = ::smol::channel::bounded(1);",
        "let (a, b) = sync_channel::<(usize, NodeEvent)>(DEMO_EVENTS);",
        "// a data channel()",
    ] {
        assert!(!unbounded(ok.split("//").next().unwrap()), "{ok}");
    }
    for bad in [
        "let (a, b) = std::sync::mpsc::channel();",
        "let (a, b) = channel::<(usize, NodeEvent)>();",
        "let (a, b) = mpsc::unbounded_channel();",
        "let (a, b) = ::smol::channel::unbounded::<Task>();",
    ] {
        assert!(unbounded(bad), "{bad}");
    }
}

#[test]
fn the_check_finds_an_unbounded_channel_where_there_is_one() {
    let dir = std::env::temp_dir().join(format!("weft-channels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.rs"),
        "fn f() {\n    let (tx, rx) = ::smol::channel::unbounded();\n    // mpsc::channel( in a comment is fine\n}\n#[cfg(test)]\nmod tests { fn g() { let _ = std::sync::mpsc::channel::<()>(); } }\n",
    )
    .unwrap();
    let mut found = Vec::new();
    check(&dir, &mut found);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with("a.rs:2: let (tx, rx) = ::smol::channel::unbounded();"));
}
