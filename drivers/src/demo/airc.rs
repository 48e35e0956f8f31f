//! The AIRC part of `weft demo`: realm servers on real sockets, on embedded defaults.

use std::io::{self, Write};

/// Starts a realm server on a fresh Unix socket, binds a listener, sends it a message, and checks
/// that the ack and the delivered message agree.
pub(super) fn exchange(out: &mut impl Write) -> io::Result<bool> {
    use crate::airc::client::{Client, message_id, new_message};
    use crate::airc::serve::{ServeConfig, serve};
    use weft_proto::airc::frame::AckStatus;

    let dir = std::env::temp_dir().join(format!("weft-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = ServeConfig::local(&dir, "demo")?;
    let socket = config.client_socket.clone();
    let (stop, stopped) = smol::channel::bounded(1);
    let (ready, started) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        serve(config, stopped, move || {
            let _ = ready.send(());
        })
    });
    started.recv().map_err(io::Error::other)?;
    writeln!(out, "  realm localhost listening on {}", socket.display())?;

    let mut listener = Client::connect(&socket)?;
    let bound = listener.bind(vec!["demo/inbox".into()])?;
    writeln!(out, "  listener bound {}", bound.join(" "))?;
    let reader = std::thread::spawn(move || {
        let mut got = None;
        listener.receive(|m| got = Some(m.clone())).map(|()| got)
    });
    let mut sender = Client::connect(&socket)?;
    let id = message_id(&mut crate::os_rng());
    let ack = sender.message(new_message(
        id.clone(),
        "hello-bot",
        "inbox",
        "hello, realm",
        None,
    ))?;
    writeln!(out, "  sender got ack {:?}", ack.status)?;
    let got = reader
        .join()
        .map_err(|_| io::Error::other("listener panicked"))??;
    if let Some(m) = &got {
        writeln!(
            out,
            "  listener read {:?} from {} to {}",
            m.body, m.from, m.to
        )?;
    }
    let _ = stop.send_blocking(());
    server
        .join()
        .map_err(|_| io::Error::other("server panicked"))??;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ack.status == AckStatus::Delivered && got.is_some_and(|m| m.id == id))
}
