//! Each invariant check of the scenario fires when its rule is broken. A quiet run gives real
//! state (message ids, open connections, stores, delivery records); each test then forges the
//! one misbehaviour a check exists for, where the simulator reads what a machine put out, and
//! expects that check to name it. The sweeps show correct machines pass; these show the
//! checker is not blind.

use super::*;
use weft_proto::airc::frame::{Ack, Msg};

/// Two realms, one client on each, a few messages and no faults: every message settles and
/// every client stays on its first connection, so what a test forges is the only thing wrong.
fn quiet() -> Scenario {
    Scenario {
        realms: 2,
        clients: 2,
        messages: 6,
        duration: Duration::from_secs(30),
        heal: Duration::from_secs(60),
        faults: Faults {
            link_drop_every: None,
            crash_every: None,
            stall_permille: 0,
            link: LinkFaults::none(Duration::from_millis(2)),
            spike_permille: 0,
            ..Faults::default()
        },
        ..Scenario::new(3)
    }
}

/// `sc` run to its end, every check passing: the state the forgeries start from.
fn settled(sc: &Scenario) -> Net<'_> {
    let mut net = Net::new(sc, None);
    assert_eq!(net.run(), Ok(()), "a quiet run passes every check");
    // The tests take a client's connection to be the one it sent and received everything on.
    let first = sc.clients as u64 + net.report.peer_links;
    assert_eq!(net.next_wire, first, "no wire but the first ones opened");
    net
}

/// A message that reached its destination, with its origin and destination clients. With two
/// clients the origin is whichever one it was not delivered to.
fn a_delivered_message(net: &Net) -> (String, usize, usize) {
    let (dest, id) = net
        .deliveries
        .keys()
        .next()
        .cloned()
        .expect("a quiet run delivers its messages");
    (id, 1 - dest, dest)
}

/// The server end of client `c`'s connection and its wire.
fn connection_of(net: &Net, c: usize) -> (usize, ConnId, u64) {
    let wire = net.client_wire[c].expect("a quiet run leaves every client connected");
    let End::Server { s, conn, .. } = net.wires[&wire].ends[1] else {
        panic!("a client's wire ends at its home server");
    };
    (s, conn, wire)
}

/// Client `c`'s inbox as a server writes it in a delivered message's `to`.
fn inbox(net: &Net, c: usize) -> String {
    format!("airc://{}/c{c}/inbox", net.realms[net.home[c]])
}

/// A `msg` frame for `id`, as a client sends it again or a server hands it over.
fn msg(id: &str, to: String) -> Frame {
    Frame::Msg(Msg {
        id: id.to_string(),
        from: "out".to_string(),
        to,
        ts: 1.0,
        body: "again".to_string(),
        kind: None,
        re: None,
        ttl: None,
        via: None,
        hdr: None,
    })
}

/// An `ack` for `id`, as a server writes it.
fn ack(id: &str, status: AckStatus) -> Vec<u8> {
    framing::encode(&Frame::Ack(Ack::new(id, status)))
}

/// Client `c` reads `frame` from its server, and the simulator reads what the client makes of it.
fn client_reads(net: &mut Net, c: usize, frame: &Frame) -> Check {
    net.clients[c].handle(net.now, ClientInput::Received(framing::encode(frame)));
    net.drain_client(c)
}

/// The origin sends `id` again on its connection and its server reads it. Only the oracle reads
/// it: the real server would answer it correctly, and the tests forge a wrong answer instead.
fn server_reads_a_retry(net: &mut Net, id: &str, origin: usize, dest: usize) -> (usize, ConnId) {
    let (s, conn, wire) = connection_of(net, origin);
    let retry = framing::encode(&msg(id, inbox(net, dest)));
    net.server_reads(s, conn, wire, &retry)
        .expect("reading a retry breaks no check");
    (s, conn)
}

/// Asserts that `v` broke `invariant` and that its detail names each of `offenders`.
fn assert_caught(v: (&str, String), invariant: &str, offenders: &[&str]) {
    assert_eq!(v.0, invariant, "{}", v.1);
    for o in offenders {
        assert!(v.1.contains(o), "{o:?} not named in {:?}", v.1);
    }
}

/// The application of `origin` sends one more message to `dest`: returns its id.
fn send_late(net: &mut Net, origin: usize, dest: usize) -> String {
    net.event(Ev::AppSend { c: origin, dest })
        .expect("sending breaks no check");
    let id = net.clients[origin]
        .unanswered()
        .next()
        .expect("the message waits for its ack")
        .to_string();
    assert_eq!(net.dest.get(&id), Some(&dest), "the client wrote it");
    id
}

/// The destination's server acks, on the destination's connection, a message it handed over
/// there: the connection never sent that `msg`, it sent the `ack` for it. §6.1 answers each
/// `msg` on the connection it came on, and only a `msg`.
#[test]
fn an_ack_for_a_message_the_connection_never_sent_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (id, _, dest) = a_delivered_message(&net);
    let (s, conn, _) = connection_of(&net, dest);
    let v = net
        .server_writes(s, conn, &ack(&id, AckStatus::Delivered))
        .expect_err("nothing to answer");
    assert_caught(v, "one-ack-per-msg", &[&id, &format!("s{s} ")]);
}

/// The origin's server acks a message it already answered: the origin holds two final answers
/// to one `msg`, where §6.1 gives exactly one.
#[test]
fn a_second_ack_for_a_message_already_answered_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (id, origin, _) = a_delivered_message(&net);
    let (s, conn, _) = connection_of(&net, origin);
    let v = net
        .server_writes(s, conn, &ack(&id, AckStatus::Delivered))
        .expect_err("answered once already");
    assert_caught(v, "one-ack-per-msg", &[&id, &format!("s{s} ")]);
}

/// The origin sends a message again and its server answers `queued`, though it delivered the
/// message and forgot its copy: `queued` promises a held copy that will be retried (§6.4–§6.6),
/// and here nothing would be. The retry reaches only the oracle's bookkeeping
/// ([`server_reads_a_retry`]), the one way to have a server read it and answer it wrongly.
#[test]
fn a_queued_ack_with_no_copy_in_the_store_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (id, origin, dest) = a_delivered_message(&net);
    let (s, conn) = server_reads_a_retry(&mut net, &id, origin, dest);
    assert!(!net.stores[s].holds(&id) && !net.queued_downstream.contains(&(s, id.clone())));
    let v = net
        .server_writes(s, conn, &ack(&id, AckStatus::Queued))
        .expect_err("no copy held");
    assert_caught(v, "queued-holds-copy", &[&id, &format!("s{s} ")]);
}

/// A server hands the origin the message it sent to the other client: a delivery goes only to
/// the client bound for its `to`.
#[test]
fn a_message_handed_to_the_wrong_client_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (id, origin, dest) = a_delivered_message(&net);
    let stray = msg(&id, inbox(&net, dest));
    let v = client_reads(&mut net, origin, &stray).expect_err("not its message");
    assert_caught(v, "right-recipient", &[&id, &format!("c{origin} ")]);
}

/// A client puts a `msg` on the wire to an address that is no client's inbox (here the app's
/// own slip stands in for a client machine that rewrites `to`): the loss check could not follow
/// the message to a destination, so the send itself is named.
#[test]
fn a_message_sent_to_no_clients_inbox_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    for to in ["//r0/elsewhere/inbox", "//r0/c9/inbox", "//r0/cx/inbox"] {
        let c = 0;
        let body = "stray".to_string();
        let to = to.to_string();
        net.clients[c].handle(
            net.now,
            ClientInput::Send {
                to: to.clone(),
                body,
            },
        );
        let v = net.drain_client(c).expect_err("no client to follow it to");
        assert_caught(v, "right-recipient", &["c0 ", &to[4..]]);
    }
}

/// A server hands a client a message again after reading its `delivered` ack for the first
/// copy: that ack settled the message (§6.6) and recorded its id as seen (§7.3), so nothing may
/// bring it back.
#[test]
fn a_message_handed_again_after_its_ack_was_read_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (id, _, dest) = a_delivered_message(&net);
    let acked = net.deliveries[&(dest, id.clone())]
        .iter()
        .any(|d| d.ack_read);
    assert!(acked, "the server read the client's ack in the quiet run");
    let again = msg(&id, inbox(&net, dest));
    let v = client_reads(&mut net, dest, &again).expect_err("already settled");
    assert_caught(v, "no-duplicate-delivery", &[&id, &format!("c{dest} ")]);
}

/// A server crashes after the heal phase and is never restarted: whatever it holds can reach no
/// one, so the run cannot show that nothing acked was lost (§6.4, §7).
#[test]
fn a_server_down_at_the_end_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    net.crash(1);
    let v = net.final_checks().expect_err("s1 is down");
    assert_caught(v, "no-loss-after-heal", &["s1 "]);
}

/// The origin sends a message again on its open connection and the server never answers:
/// §6.1 owes every `msg` read one `ack` while its connection stays open. The retry reaches only
/// the oracle's bookkeeping ([`server_reads_a_retry`]), as if the server swallowed it.
#[test]
fn a_message_read_on_an_open_connection_and_never_acked_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (id, origin, dest) = a_delivered_message(&net);
    let (s, _) = server_reads_a_retry(&mut net, &id, origin, dest);
    let v = net.final_checks().expect_err("the retry is unanswered");
    assert_caught(v, "one-ack-per-msg", &[&id, &format!("s{s} ")]);
}

/// The origin is told its new message was delivered, but the message never left it (its bytes
/// are still on the way when the run ends): an ack `delivered` or `queued` promises the message
/// reaches its destination (§6.4, §7), and this one never does.
#[test]
fn a_message_acked_but_never_delivered_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (_, origin, dest) = a_delivered_message(&net);
    let id = send_late(&mut net, origin, dest);
    let lie = Frame::Ack(Ack::new(id.clone(), AckStatus::Delivered));
    client_reads(&mut net, origin, &lie).expect("an ack the client waits for");
    let v = net.final_checks().expect_err("acked, never delivered");
    assert_caught(v, "no-loss-after-heal", &[&id, &format!("c{dest};")]);
}

/// The origin sends a message that nothing ever answers: its frame never reaches the server,
/// and no ack, not even `failed`, comes back. Every message a client sends gets its final ack
/// once the network heals (§6.1, §7.3 retries).
#[test]
fn a_message_no_one_answered_is_caught() {
    let sc = quiet();
    let mut net = settled(&sc);
    let (_, origin, dest) = a_delivered_message(&net);
    let id = send_late(&mut net, origin, dest);
    let v = net.final_checks().expect_err("never answered");
    assert_caught(v, "every-msg-answered", &[&id, &format!("c{origin} ")]);
}

/// A run that needs more events than its budget stops there, as one that livelocked would,
/// rather than spin to its end.
#[test]
fn a_run_past_its_event_budget_stops_at_the_limit() {
    let sc = Scenario {
        max_events: 20,
        ..quiet()
    };
    let v = run(&sc, None).expect_err("six messages take more than 20 events");
    assert_eq!(v.invariant, "event-limit");
    assert_eq!((v.seed, v.report.events), (3, 21));
}
