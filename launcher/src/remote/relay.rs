//! An agent's relaying role in a tree launch ([`super::tree`]): told to
//! [`Reach`](ToAgent::Reach) the hosts below it, it starts their agents as psyrun would (over
//! SSH with the targets psyrun worked out, or as local children), passes psyrun's messages down
//! and wraps everything they say on the way up, tagged with each host's index.
//!
//! Per host below it reports [`FromAgent::Reached`] (the route, or why not) before anything the
//! host says, so psyrun knows the host before its hello. A host reached directly that relays in
//! turn is sent its own Reach as soon as its link is open. When a link ends, the host and
//! everything below it are reported [`FromAgent::Closed`] (by [`super::link::Route`]); when the
//! agent's own link ends, closing its links makes the hosts below stop their ranks.

use super::agent_out::Out;
use super::link::{spawn_child, AgentLink, HostEvent, LinkEvent, Route};
use super::protocol::{FromAgent, RelayHost, RelayRoute, ToAgent};
use super::ssh;
use super::tree;
use crate::spawn::helper_thread;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a Reach asks of this agent.
pub struct ReachOrder {
    /// The tree's width.
    pub width: usize,
    /// Silence after which a link below counts as lost.
    pub heartbeat_timeout: Duration,
    /// The psyrun to run below.
    pub remote_psyrun: PathBuf,
    /// Every host below this agent.
    pub hosts: Vec<RelayHost>,
}

/// A host reached directly: messages for it (or through it) wait until its link is open.
enum Child {
    Opening(Vec<ToAgent>),
    Open(AgentLink),
    Gone,
}

/// The relaying agent's state: its direct links and which of them leads to each host below.
pub struct Relay {
    children: Mutex<HashMap<usize, Child>>,
    /// For every host below, the host reached directly that leads to it.
    through: HashMap<usize, usize>,
    /// Direct links not yet closed, and a wake-up when that changes.
    open: (Mutex<usize>, Condvar),
}

impl Relay {
    /// Starts reaching every host of `order` (the first level on threads of their own) and
    /// forwarding what they say through `out`.
    pub(crate) fn start(order: ReachOrder, out: Arc<Out>) -> Arc<Relay> {
        let by_index: HashMap<usize, RelayHost> = order
            .hosts
            .iter()
            .map(|h| (h.host as usize, h.clone()))
            .collect();
        let indices: Vec<usize> = order.hosts.iter().map(|h| h.host as usize).collect();
        let plan = tree::split(&indices, order.width);
        let mut through = HashMap::new();
        for (head, run) in &plan {
            through.insert(*head, *head);
            through.extend(run.iter().map(|&h| (h, *head)));
        }
        let relay = Arc::new(Relay {
            children: Mutex::new(
                plan.iter()
                    .map(|(h, _)| (*h, Child::Opening(Vec::new())))
                    .collect(),
            ),
            through,
            open: (Mutex::new(plan.len()), Condvar::new()),
        });
        let (tx, rx) = mpsc::channel::<HostEvent>();
        let forwarding = helper_thread("psyrun-relay-up", {
            let (relay, out) = (relay.clone(), out.clone());
            move || relay.forward_up(&rx, &out)
        });
        if let Err(e) = forwarding {
            eprintln!("psyrun agent: cannot start the relay's thread: {e}");
        }
        let order = Arc::new(order);
        for (head, run) in plan {
            let Some(host) = by_index.get(&head).cloned() else {
                continue;
            };
            let run: Vec<RelayHost> = run
                .iter()
                .filter_map(|h| by_index.get(h).cloned())
                .collect();
            let (relay, up, tx, order) = (relay.clone(), out.clone(), tx.clone(), order.clone());
            let name = format!("psyrun-relay-{head}");
            let spawned = helper_thread(name, move || relay.reach(&host, &run, &order, &up, tx));
            if let Err(e) = spawned {
                out.send(&FromAgent::Reached {
                    host: head as u32,
                    outcome: Err(format!("cannot start a thread to reach it: {e}")),
                });
            }
        }
        relay
    }

    /// Reaches `host` and, through it, `run`: reports the route (or why not, for it and for
    /// every host of `run`), then hands its link the messages that waited and its own Reach.
    fn reach(
        &self,
        host: &RelayHost,
        run: &[RelayHost],
        order: &ReachOrder,
        out: &Out,
        events: Sender<HostEvent>,
    ) {
        let index = host.host as usize;
        let below: Vec<usize> = run.iter().map(|h| h.host as usize).collect();
        let route = Route::new(index, &host.name, &below);
        let opened = open(host, route, order, out, events);
        let link = match opened {
            Ok(link) => link,
            Err(why) => {
                out.send(&FromAgent::Reached {
                    host: host.host,
                    outcome: Err(why.clone()),
                });
                for h in run {
                    out.send(&FromAgent::Reached {
                        host: h.host,
                        outcome: Err(format!(
                            "not reached: {}, which was to relay for it, could not be reached \
                             ({why})",
                            host.name
                        )),
                    });
                }
                self.closed(index);
                return;
            }
        };
        if !run.is_empty() {
            link.send(tree::reach_message(
                order.width,
                order.heartbeat_timeout,
                &order.remote_psyrun,
                run.to_vec(),
            ));
        }
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Child::Opening(waiting)) = children.remove(&index) {
            for msg in waiting {
                link.send(msg);
            }
        }
        children.insert(index, Child::Open(link));
    }

    /// Forwards what the hosts below say, wrapped, until every link is gone.
    fn forward_up(&self, events: &Receiver<HostEvent>, out: &Out) {
        while let Ok(e) = events.recv() {
            let host = u32::try_from(e.host).unwrap_or(u32::MAX);
            match e.event {
                LinkEvent::Frame(msg) => {
                    out.send(&FromAgent::Relayed {
                        host,
                        body: msg.body(),
                    });
                }
                LinkEvent::Diagnostic(line) => {
                    out.send(&FromAgent::Said { host, line });
                }
                LinkEvent::Closed { why, status } => {
                    out.send(&FromAgent::Closed { host, why, status });
                    if self.through.get(&e.host) == Some(&e.host) {
                        self.closed(e.host);
                    }
                }
            }
        }
    }

    /// The direct link to `host` is gone (or never opened).
    fn closed(&self, host: usize) {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(children.insert(host, Child::Gone), Some(Child::Gone)) {
            let mut open = self.open.0.lock().unwrap_or_else(|p| p.into_inner());
            *open = open.saturating_sub(1);
            self.open.1.notify_all();
        }
    }

    /// Passes a message from psyrun (a frame `body`) down to `host`: to its link if it is reached
    /// directly, else wrapped again to the host that leads to it.
    pub fn pass_down(&self, host: u32, body: Vec<u8>) {
        let Some(&head) = self.through.get(&(host as usize)) else {
            eprintln!("psyrun agent: a message for host #{host}, which this agent does not reach");
            return;
        };
        let msg = if head == host as usize {
            match ToAgent::decode(&body) {
                Ok(msg) => msg,
                Err(e) => {
                    eprintln!("psyrun agent: a relayed message for host #{host}: {e}");
                    return;
                }
            }
        } else {
            ToAgent::Relay { host, body }
        };
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        match children.get_mut(&head) {
            Some(Child::Opening(waiting)) => waiting.push(msg),
            Some(Child::Open(link)) => {
                link.send(msg);
            }
            Some(Child::Gone) | None => {}
        }
    }

    /// Waits up to `limit` until every direct link has closed (their agents said Done and
    /// exited, so everything they said has been passed up).
    pub fn wait_closed(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut open = self.open.0.lock().unwrap_or_else(|p| p.into_inner());
        while *open > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            open = match self.open.1.wait_timeout(open, left) {
                Ok((guard, _)) => guard,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Closes every direct link: the agents below stop their ranks and exit.
    pub fn close_all(&self) {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        for child in children.values_mut() {
            *child = Child::Gone;
        }
    }
}

/// Opens the link to `host`: over SSH, or as a local child. [`FromAgent::Reached`] is said
/// before the link's thread starts, so it comes before anything the host says.
fn open(
    host: &RelayHost,
    route: Route,
    order: &ReachOrder,
    out: &Out,
    events: Sender<HostEvent>,
) -> Result<AgentLink, String> {
    let reached = |via: String, peer: Option<String>| {
        out.send(&FromAgent::Reached {
            host: host.host,
            outcome: Ok(RelayRoute { via, peer }),
        });
    };
    if host.local {
        let mut command = Command::new(&order.remote_psyrun);
        command.arg(super::constants::AGENT_FLAG);
        reached("local".into(), None);
        // A failure now is reported as Reached with the reason, which psyrun takes over the
        // route it was just told.
        return spawn_child(route, command, events)
            .map_err(|e| format!("cannot start agent {}: {e}", order.remote_psyrun.display()));
    }
    let target = tree::target_of(host);
    let conn = ssh::connect(&target, &ssh::agent_command(&order.remote_psyrun))?;
    reached(
        format!("ssh {}@{}", target.user, conn.peer),
        Some(conn.peer.ip().to_string()),
    );
    ssh::run_link(route, conn, events, order.heartbeat_timeout)
        .map_err(|e| format!("cannot start the link thread: {e}"))
}
