//! Real DNS for AIRC discovery (§8.1–§8.2): the answers to the realm server's
//! `Output::Resolve` questions, from hickory-resolver.
//!
//! Which questions to ask, in which order, and how long answers live are the machine's
//! (`weft_proto::airc::discovery`); this module only asks them. Lookups run on one thread with its
//! own current-thread tokio runtime, so the realm's loop never waits on DNS: a question goes in
//! with [`Dns::ask`] (or, for a host name to dial, [`Dns::locate`]) and its answer comes back
//! through the host's command channel ([`crate::host::Commander`]) as an input for
//! [`super::host::Realm`], which wakes the loop. The nameserver is the system's (`/etc/resolv.conf`)
//! unless the operator names one (`[dns] nameserver`, `--dns`), which is how tests point it at a
//! DNS server of their own on loopback.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType as Rr};
use weft_proto::airc::discovery::{Answer, RecordType, SrvRecord};
use weft_proto::airc::server::Input;

use super::host::RealmInput;
use crate::host::Commander;

enum Job {
    Ask(String, RecordType),
    Locate(u64, String),
}

/// A handle to the resolver thread; clones share it. The thread ends when every handle is gone.
#[derive(Clone)]
pub struct Dns {
    jobs: ::tokio::sync::mpsc::Sender<Job>,
}

/// How many questions and lookups may wait for the resolver thread. The machine asks few at a
/// time (it caches answers and asks each name once, §8.1) and the realm locates at most
/// [`super::host::MAX_LOCATING`] hosts at once; past it a question is answered "no records" and
/// a dial fails at once, as when DNS is off, and the machine asks again on its own schedule.
pub const MAX_DNS_JOBS: usize = 1024;

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns").finish_non_exhaustive()
    }
}

impl Dns {
    /// Starts the resolver thread, asking `nameserver` (UDP and TCP) or, when `None`, the
    /// system's nameservers, and sending every answer to `to`.
    pub fn start(nameserver: Option<SocketAddr>, to: Commander<RealmInput>) -> io::Result<Self> {
        let provider = TokioRuntimeProvider::default();
        let builder = match nameserver {
            Some(at) => {
                let mut server = NameServerConfig::udp_and_tcp(at.ip());
                for c in &mut server.connections {
                    c.port = at.port();
                }
                TokioResolver::builder_with_config(
                    ResolverConfig::from_name_servers(vec![server]),
                    provider,
                )
            }
            None => TokioResolver::builder(provider).map_err(io::Error::other)?,
        };
        let (jobs, mut inbox) = ::tokio::sync::mpsc::channel::<Job>(MAX_DNS_JOBS);
        let runtime = ::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("weft-airc-dns".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let resolver = match builder.build() {
                        Ok(r) => std::rc::Rc::new(r),
                        Err(e) => {
                            eprintln!("weft airc: no DNS resolver: {e}");
                            return;
                        }
                    };
                    let local = ::tokio::task::LocalSet::new();
                    local
                        .run_until(async move {
                            let to = Rc::new(to);
                            while let Some(job) = inbox.recv().await {
                                let resolver = resolver.clone();
                                let to = to.clone();
                                ::tokio::task::spawn_local(async move {
                                    // A send that fails means the loop is gone: nobody waits.
                                    let answer = match job {
                                        Job::Ask(name, kind) => {
                                            let answer = lookup(&resolver, &name, kind).await;
                                            Input::Resolved { name, kind, answer }.into()
                                        }
                                        Job::Locate(token, host) => {
                                            let ip = resolver
                                                .lookup_ip(absolute(&host))
                                                .await
                                                .ok()
                                                .and_then(|l| l.iter().next());
                                            RealmInput::Located { token, ip }
                                        }
                                    };
                                    // The machine waits for every answer: wait for room.
                                    let _ = to.send_async(answer).await;
                                });
                            }
                        })
                        .await;
                })
            })?;
        Ok(Self { jobs })
    }

    /// Asks one question; its answer arrives as an `Input::Resolved`. `false` when
    /// [`MAX_DNS_JOBS`] are already waiting (or the resolver is gone): nothing will answer it.
    pub fn ask(&self, name: String, kind: RecordType) -> bool {
        self.jobs.try_send(Job::Ask(name, kind)).is_ok()
    }

    /// Looks up an address of `host` for a dial; the answer arrives as
    /// [`RealmInput::Located`] with `token`. `false` as for [`Dns::ask`].
    pub fn locate(&self, token: u64, host: String) -> bool {
        self.jobs.try_send(Job::Locate(token, host)).is_ok()
    }
}

/// `name` as an absolute name, so no search domain is tried.
fn absolute(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.")
    }
}

/// One §8.1/§8.2 question asked of DNS. Any failure (NXDOMAIN, no records, SERVFAIL, timeout) is
/// [`Answer::Nothing`]: the machine decides what that means.
async fn lookup(resolver: &TokioResolver, name: &str, kind: RecordType) -> Answer {
    let name = absolute(name);
    match kind {
        RecordType::Srv => {
            let Ok(l) = resolver.lookup(name, Rr::SRV).await else {
                return Answer::Nothing;
            };
            let records: Vec<SrvRecord> = l
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::SRV(s) => Some(SrvRecord {
                        priority: s.priority,
                        weight: s.weight,
                        port: s.port,
                        target: s.target.to_ascii(),
                        ttl: r.ttl,
                    }),
                    _ => None,
                })
                .collect();
            if records.is_empty() {
                Answer::Nothing
            } else {
                Answer::Srv(records)
            }
        }
        RecordType::Address => match resolver.lookup_ip(name).await {
            Ok(l) if l.iter().next().is_some() => Answer::Addresses {
                ttl: min_ttl(l.as_lookup().answers().iter().map(|r| r.ttl)),
            },
            _ => Answer::Nothing,
        },
        RecordType::Txt => {
            let Ok(l) = resolver.lookup(name, Rr::TXT).await else {
                return Answer::Nothing;
            };
            let mut ttls = Vec::new();
            let records: Vec<String> = l
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::TXT(t) => {
                        ttls.push(r.ttl);
                        // One record's character-strings, concatenated (§8.2 reads the whole).
                        let bytes: Vec<u8> =
                            t.txt_data.iter().flat_map(|s| s.iter().copied()).collect();
                        Some(String::from_utf8_lossy(&bytes).into_owned())
                    }
                    _ => None,
                })
                .collect();
            if records.is_empty() {
                Answer::Nothing
            } else {
                Answer::Txt {
                    records,
                    ttl: min_ttl(ttls.into_iter()),
                }
            }
        }
    }
}

fn min_ttl(ttls: impl Iterator<Item = u32>) -> u32 {
    ttls.min().unwrap_or(0)
}
