//! A host run on each runtime adapter (smol, tokio, blocking) on a thread of its own until the
//! test stops it: the one place the driver tests say how each adapter is started and stopped.
#![allow(dead_code)]

use std::io;
use std::thread;

use weft_drivers::host::{Commands, Hooks, Host, HostMachine, Listener};

/// The runtime adapter a host runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Adapter {
    Smol,
    #[cfg(feature = "tokio")]
    Tokio,
    Blocking,
}

impl Adapter {
    /// Every adapter this build has.
    pub(crate) const ALL: &[Adapter] = &[
        Adapter::Smol,
        #[cfg(feature = "tokio")]
        Adapter::Tokio,
        Adapter::Blocking,
    ];

    /// Runs the host that `make` builds, over its listeners and fed its commands when it has
    /// any, on a new thread: a store or socket `make` opens stays on the thread that uses it.
    /// Once stopped, `finish` takes what the test reads of the host.
    pub(crate) fn spawn<M, H, T>(
        self,
        make: impl FnOnce() -> io::Result<Served<M, H>> + Send + 'static,
        finish: impl FnOnce(Host<M, H>) -> T + Send + 'static,
    ) -> Running<T>
    where
        M: HostMachine,
        H: Hooks<M>,
        T: Send + 'static,
    {
        // The async adapters end on the channel, the blocking one on its signal; stopping
        // raises both, so `Running` need not know which adapter it stops.
        let (stop, stopped) = smol::channel::bounded::<()>(1);
        let (stopper, stop_signal) = weft_drivers::blocking::stop_signal().unwrap();
        let thread = thread::spawn(move || {
            let Served {
                mut host,
                listeners,
                commands,
            } = make()?;
            let host_ref = &mut host;
            let until_stopped = async {
                let _ = stopped.recv().await;
                Ok(())
            };
            match self {
                Adapter::Smol => smol::block_on(smol::future::or(
                    async {
                        match &commands {
                            Some(c) => {
                                weft_drivers::smol::run_commanded(host_ref, listeners, c).await
                            }
                            None => weft_drivers::smol::run(host_ref, listeners).await,
                        }
                    },
                    until_stopped,
                ))?,
                // The stop race uses smol's runtime-neutral combinator; the adapter runs on
                // tokio.
                #[cfg(feature = "tokio")]
                Adapter::Tokio => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
                    .block_on(smol::future::or(
                        async {
                            match &commands {
                                Some(c) => {
                                    weft_drivers::tokio::run_commanded(host_ref, listeners, c).await
                                }
                                None => weft_drivers::tokio::run(host_ref, listeners).await,
                            }
                        },
                        until_stopped,
                    ))?,
                Adapter::Blocking => match &commands {
                    Some(c) => {
                        weft_drivers::blocking::run_commanded(host_ref, listeners, c, &stop_signal)?
                    }
                    None => weft_drivers::blocking::run(host_ref, listeners, &stop_signal)?,
                },
            }
            Ok(finish(host))
        });
        Running {
            stop: Box::new(move || {
                let _ = stop.try_send(());
                stopper.stop();
            }),
            thread,
        }
    }
}

/// What an adapter runs: a host, its listeners, and the application's commands when it takes
/// any.
pub(crate) struct Served<M: HostMachine, H: Hooks<M>> {
    pub host: Host<M, H>,
    pub listeners: Vec<Listener>,
    pub commands: Option<Commands<M::Input>>,
}

impl<M: HostMachine, H: Hooks<M>> Served<M, H> {
    /// `host` over `listeners`, with no commands.
    pub(crate) fn new(host: Host<M, H>, listeners: Vec<Listener>) -> Self {
        Self {
            host,
            listeners,
            commands: None,
        }
    }
}

/// A host running on an adapter's thread.
pub(crate) struct Running<T> {
    stop: Box<dyn FnOnce() + Send>,
    thread: thread::JoinHandle<io::Result<T>>,
}

impl<T> Running<T> {
    /// Stops the host and hands back what `finish` took from it; panics if it failed.
    pub(crate) fn stop(self) -> T {
        (self.stop)();
        self.thread.join().unwrap().unwrap()
    }
}
