//! The Minca part of `weft demo`: a relay and two nodes on loopback, in this process (Minca 04
//! Network §2, §5.1, §6.2, §7, §9).
//!
//! The relay is `weft relay`'s machine on its own thread; each node is `weft node`'s runner
//! ([`crate::minca::node_runner`]) with a fresh account and session. They meet through the relay,
//! open a str0m data channel, prove themselves in the space's room, say who they are, and
//! exchange one live message each way. Every wait is bounded by [`STEP_BUDGET`].

use std::io::{self, Write};
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::{Duration, Instant};

use serde_json::json;
use weft_proto::codec::{did_key::DidKey, js};
use weft_proto::crypto::generate_p256;
use weft_proto::minca::relay_url::RelayUrl;

use crate::minca::node_runner::{NodeEvent, NodeOptions, RunningNode};
use crate::minca::relay::{RelayOptions, serve};

/// How many node events may wait for the demo to print them.
const DEMO_EVENTS: usize = 4096;

/// The longest any one step may take before the demo calls it failed.
pub(super) const STEP_BUDGET: Duration = Duration::from_secs(5);

const SPACE: &str = "demo-space";

/// Runs the meeting, writing each step to `out`; `Ok(true)` when every step worked.
pub(super) fn meeting(
    out: &mut impl Write,
    check: &mut dyn FnMut(&mut dyn Write, &str, bool) -> io::Result<()>,
) -> io::Result<bool> {
    let (stop_relay, relay_stopped) = smol::channel::bounded(1);
    // One address, once.
    let (ready_tx, ready) = sync_channel(1);
    let options = RelayOptions::plain("127.0.0.1:0".parse().map_err(io::Error::other)?);
    let relay = std::thread::spawn(move || {
        serve(options, relay_stopped, move |addr| {
            let _ = ready_tx.send(addr);
        })
    });
    let addr = ready
        .recv_timeout(STEP_BUDGET)
        .map_err(|_| io::Error::other("the relay did not start"))?;
    let url = format!("ws://{addr}");
    writeln!(out, "  relay listening on {url}")?;
    let result = nodes(out, check, &url);
    let _ = stop_relay.send_blocking(());
    relay
        .join()
        .map_err(|_| io::Error::other("the relay thread panicked"))??;
    result
}

/// Two nodes meet through the relay at `url` and talk.
fn nodes(
    out: &mut impl Write,
    check: &mut dyn FnMut(&mut dyn Write, &str, bool) -> io::Result<()>,
    url: &str,
) -> io::Result<bool> {
    let relay = RelayUrl::parse(url).map_err(|e| io::Error::other(format!("{e:?}")))?;
    let crypto = crate::server_provider();
    let mut rng = crate::os_rng();
    // The lesser DID offers (§7.3): it starts first, so the other's hello finds it listening and
    // it offers at once, instead of waiting for a hello back (§2).
    let mut sessions: Vec<_> = (0..2)
        .map(|_| {
            let key = generate_p256(crypto, &mut rng);
            let did = crypto
                .p256_public_key(&key)
                .map(|p| DidKey::P256(p.0).to_did())
                .unwrap_or_default();
            (key, did)
        })
        .collect();
    sessions.sort_by(|a, b| js::cmp(&a.1, &b.1));
    // Far more than the demo's nodes say before it ends; an event past it is not shown.
    let (events_tx, events) = sync_channel::<(usize, NodeEvent)>(DEMO_EVENTS);
    let mut running = Vec::new();
    let mut ok = true;
    for (i, (key, _)) in sessions.into_iter().enumerate() {
        let options = NodeOptions {
            spaces: vec![SPACE.into()],
            relays: vec![relay.clone()],
            nodes: Vec::new(),
            bind: crate::minca::node_runner::DEFAULT_BIND
                .parse()
                .map_err(io::Error::other)?,
            account: None,
            session: Some(key),
        };
        let tx = events_tx.clone();
        let node = RunningNode::start(options, move |e| {
            let _ = tx.try_send((i, e));
        })?;
        writeln!(
            out,
            "  node {} session {} account {} (WebRTC on udp {})",
            name(i),
            short(&node.identity.did),
            short(&node.identity.account),
            node.udp
        )?;
        running.push(node);
        let opened = wait(&events, |(j, e)| {
            *j == i && matches!(e, NodeEvent::Relay { open: true, .. })
        });
        check(
            out,
            &format!("node {} opened its relay socket and said hello", name(i)),
            opened.is_some(),
        )?;
        ok &= opened.is_some();
    }
    let dids: Vec<String> = running.iter().map(|n| n.identity.did.clone()).collect();
    let accounts: Vec<String> = running.iter().map(|n| n.identity.account.clone()).collect();

    let started = Instant::now();
    let mut admitted = [false, false];
    let mut told = [false, false];
    let mut seen = Vec::new();
    while !(admitted == [true, true] && told == [true, true]) && started.elapsed() < STEP_BUDGET {
        let Some((i, e)) = wait(&events, |_| true) else {
            break;
        };
        match &e {
            NodeEvent::Admitted { peer, .. } if *peer == dids[1 - i] => admitted[i] = true,
            NodeEvent::Account { peer, account, .. } if *peer == dids[1 - i] => {
                told[i] = account.as_deref() == Some(accounts[1 - i].as_str());
            }
            _ => {}
        }
        seen.push((i, e));
    }
    let ms = started.elapsed().as_millis();
    check(
        out,
        &format!(
            "A and B met through the relay, opened a WebRTC data channel and proved their session keys (minca-mesh/v1) in {ms} ms"
        ),
        admitted == [true, true],
    )?;
    check(
        out,
        "each one's `who` note named its account to the other",
        told == [true, true],
    )?;
    ok &= admitted == [true, true] && told == [true, true];
    if !ok {
        writeln!(out, "  what the nodes said: {seen:?}")?;
        return Ok(false);
    }

    for (i, node) in running.iter().enumerate() {
        let text = format!("hello from {}", name(i));
        node.send_live(json!(text));
        let got = wait(&events, |(j, e)| {
            *j == 1 - i
                && matches!(e, NodeEvent::Message { kind, payload, .. }
                    if kind == "live" && *payload == json!(text))
        });
        let right = match &got {
            Some((_, NodeEvent::Message { from, account, .. })) => {
                writeln!(
                    out,
                    "  {} read live {text:?} from session {} of account {}",
                    name(1 - i),
                    short(from),
                    account.as_deref().map_or("(none)", short)
                )?;
                *from == dids[i] && account.as_deref() == Some(accounts[i].as_str())
            }
            _ => false,
        };
        check(
            out,
            &format!(
                "{}'s live message reached {}, attributed to {}'s session and account",
                name(i),
                name(1 - i),
                name(i)
            ),
            right,
        )?;
        ok &= right;
    }
    for node in running {
        node.stop()?;
    }
    Ok(ok)
}

/// Waits at most [`STEP_BUDGET`] for an event that `matches`, passing over others.
fn wait(
    events: &Receiver<(usize, NodeEvent)>,
    matches: impl Fn(&(usize, NodeEvent)) -> bool,
) -> Option<(usize, NodeEvent)> {
    let deadline = Instant::now() + STEP_BUDGET;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = events.recv_timeout(left).ok()?;
        if matches(&e) {
            return Some(e);
        }
    }
}

fn name(i: usize) -> &'static str {
    ["A", "B"][i]
}

/// A DID cut to its start, for reading.
fn short(did: &str) -> &str {
    did.get(..24).unwrap_or(did)
}
