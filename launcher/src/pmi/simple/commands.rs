//! What each PMI-1 and PMI-2 command does, and its reply.

use super::conn::State;
use super::kvs::{KEY_MAX, KVSNAME_MAX, PUT_BYTES_PER_RANK, VALUE_MAX};
use super::server::{Server, Waiter};
use super::wire::{self, Framing, Message};
use crate::pmi::Report;
use std::time::Instant;

/// `(key, value)` pairs of a reply.
type Pairs = Vec<(String, String)>;

fn pairs(p: &[(&str, String)]) -> Pairs {
    p.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

fn ok(p: &[(&str, String)]) -> Pairs {
    let mut out = pairs(&[("rc", "0".into())]);
    out.extend(pairs(p));
    out
}

/// The reply command of a request.
fn reply_cmd(request: &Message) -> String {
    let cmd = request.cmd.as_str();
    match request.framing {
        Framing::V2 => format!("{cmd}-response"),
        Framing::V1 => match cmd {
            "init" => "response_to_init",
            "get_maxes" => "maxes",
            "get_appnum" => "appnum",
            "get_universe_size" => "universe_size",
            "get_my_kvsname" => "my_kvsname",
            "put" => "put_result",
            "get" => "get_result",
            "barrier_in" => "barrier_out",
            "finalize" => "finalize_ack",
            "publish_name" => "publish_result",
            "unpublish_name" => "unpublish_result",
            "lookup_name" => "lookup_result",
            "spawn" => "spawn_result",
            "singinit" => "singinit_info",
            "initack" => "initack",
            other => return format!("{other}_result"),
        }
        .to_string(),
    }
}

impl Server {
    /// Serves one request of a local rank.
    pub fn handle(&mut self, local: usize, m: Message) {
        self.trace(local, || format!("-> {m}"));
        let Some(conn) = self.conns[local].as_mut() else {
            return;
        };
        let rank = conn.rank;
        if !std::mem::replace(&mut conn.spoke, true) {
            self.report(Report::Spoke { rank });
        }
        match (m.framing, m.cmd.as_str()) {
            (Framing::V1, "init") => self.init(local, &m),
            (Framing::V1, "get_maxes") => self.reply(local, &m, maxes()),
            (Framing::V1, "get_appnum") => {
                self.reply(local, &m, ok(&[("appnum", self.appnum(rank))]))
            }
            (Framing::V1, "get_universe_size") => {
                let size = self.map.world_size.to_string();
                self.reply(local, &m, ok(&[("size", size)]))
            }
            (Framing::V1, "get_my_kvsname") => {
                let name = self.kvsname();
                self.reply(local, &m, ok(&[("kvsname", name)]))
            }
            (Framing::V1, "put") | (Framing::V2, "kvs-put") => self.put(local, &m),
            (Framing::V1, "get") | (Framing::V2, "kvs-get") => self.get(local, &m),
            (Framing::V1, "barrier_in") | (Framing::V2, "kvs-fence") => {
                self.barrier_enter(local, &m)
            }
            (_, "finalize") => self.finalize(local, &m),
            (_, "abort") => self.abort(local, &m),
            (Framing::V2, "fullinit") => self.fullinit(local, &m),
            (Framing::V2, "job-getid") => {
                let name = self.kvsname();
                self.reply(local, &m, ok(&[("jobid", name)]))
            }
            (Framing::V2, "info-getjobattr") => self.get_job_attr(local, &m),
            (Framing::V2, "info-putnodeattr") => self.put_node_attr(local, &m),
            (Framing::V2, "info-getnodeattr") => self.get_node_attr(local, &m),
            _ => self.fail(local, &m, &format!("psyrun does not serve `{}`", m.cmd)),
        }
    }

    /// Replies to `request` with `pairs`.
    fn reply(&mut self, local: usize, request: &Message, pairs: Pairs) {
        let cmd = reply_cmd(request);
        let thrid = request.get("thrid").map(str::to_string);
        self.send(local, request.framing, &cmd, pairs, thrid.as_deref());
    }

    /// Replies to `request` with an error (rc=-1) saying `text`.
    pub fn fail(&mut self, local: usize, request: &Message, text: &str) {
        let pairs = self.error_pairs(request.framing, text);
        self.reply(local, request, pairs);
    }

    /// `rc=-1` and the message, named as each framing's clients read it.
    pub fn error_pairs(&self, framing: Framing, text: &str) -> Pairs {
        let key = match framing {
            Framing::V1 => "msg",
            Framing::V2 => "errmsg",
        };
        pairs(&[
            ("rc", "-1".into()),
            (key, wire::message_value(framing, text)),
        ])
    }

    fn kvsname(&self) -> String {
        self.map.job_id.chars().take(KVSNAME_MAX - 1).collect()
    }

    fn appnum(&self, rank: usize) -> String {
        self.map.appnum.get(rank).copied().unwrap_or(0).to_string()
    }

    /// PMI-1 `init`: version 1.1, or 2.0 for a PMI-2 client (which then speaks PMI-2).
    fn init(&mut self, local: usize, m: &Message) {
        let version = match m.get("pmi_version") {
            Some("1") => ("1", "1"),
            Some("2") => ("2", "0"),
            other => {
                let text = format!(
                    "PMI version {} is not served (1 and 2 are)",
                    other.unwrap_or("?")
                );
                return self.fail(local, m, &text);
            }
        };
        let reply = ok(&[
            ("pmi_version", version.0.into()),
            ("pmi_subversion", version.1.into()),
        ]);
        self.reply(local, m, reply);
    }

    /// PMI-2 `fullinit`: the rank learns its rank, size and appnum.
    fn fullinit(&mut self, local: usize, m: &Message) {
        let rank = self.map.hosts[self.node].ranks[local];
        if let Some(asked) = m
            .get("pmirank")
            .filter(|r| *r != rank.to_string() && *r != "-1")
        {
            let text = format!("fullinit as rank {asked} on the socket of rank {rank}");
            return self.fail(local, m, &text);
        }
        let reply = ok(&[
            ("pmi-version", "2".into()),
            ("pmi-subversion", "0".into()),
            ("rank", rank.to_string()),
            ("size", self.map.world_size.to_string()),
            ("appnum", self.appnum(rank)),
            ("debugged", "FALSE".into()),
            ("pmiverbose", "FALSE".into()),
        ]);
        self.reply(local, m, reply);
    }

    fn put(&mut self, local: usize, m: &Message) {
        let (Some(key), Some(value)) = (m.get("key"), m.get("value")) else {
            return self.fail(local, m, "put without key or value");
        };
        let used = self.put_bytes[local] + key.len() + value.len();
        let refusal = if key.len() > KEY_MAX || value.len() > VALUE_MAX {
            Some(format!(
                "key or value too long (at most {KEY_MAX} and {VALUE_MAX} bytes)"
            ))
        } else if key.starts_with("PMI_") {
            Some("keys starting with PMI_ are reserved".to_string())
        } else if used > PUT_BYTES_PER_RANK {
            Some(format!(
                "more than {PUT_BYTES_PER_RANK} bytes put by one rank"
            ))
        } else {
            None
        };
        if let Some(text) = refusal {
            return self.fail(local, m, &text);
        }
        self.put_bytes[local] = used;
        self.control.note_segment(value);
        self.kvs.put(key, value);
        self.reply(local, m, ok(&[]));
    }

    /// A job attribute (what Hydra answers for `PMI_` keys and `universeSize`).
    fn job_attr(&self, key: &str) -> Option<String> {
        match key {
            "PMI_process_mapping" => self.mapping.clone(),
            "universeSize" => Some(self.map.world_size.to_string()),
            _ => None,
        }
    }

    fn get(&mut self, local: usize, m: &Message) {
        let Some(key) = m.get("key") else {
            return self.fail(local, m, "get without key");
        };
        let value = match key.starts_with("PMI_") || key == "universeSize" {
            true => self.job_attr(key),
            false => self.kvs.get(key).map(str::to_string),
        };
        let reply = match (m.framing, value) {
            (Framing::V1, Some(v)) => ok(&[("value", v)]),
            // As Hydra: old clients read rc, new ones also `found`.
            (Framing::V1, None) => pairs(&[
                ("rc", "-1".into()),
                (
                    "msg",
                    wire::message_value(Framing::V1, &format!("key_{key}_not_found")),
                ),
                ("value", "unknown".into()),
            ]),
            (Framing::V2, Some(v)) => ok(&[("found", "TRUE".into()), ("value", v)]),
            (Framing::V2, None) => ok(&[("found", "FALSE".into())]),
        };
        self.reply(local, m, reply);
    }

    fn get_job_attr(&mut self, local: usize, m: &Message) {
        let value = m.get("key").and_then(|k| self.job_attr(k));
        let reply = match value {
            Some(v) => ok(&[("found", "TRUE".into()), ("value", v)]),
            None => ok(&[("found", "FALSE".into())]),
        };
        self.reply(local, m, reply);
    }

    fn put_node_attr(&mut self, local: usize, m: &Message) {
        let (Some(key), Some(value)) = (m.get("key"), m.get("value")) else {
            return self.fail(local, m, "info-putnodeattr without key or value");
        };
        let used = self.put_bytes[local] + key.len() + value.len();
        if key.len() > KEY_MAX || value.len() > VALUE_MAX || used > PUT_BYTES_PER_RANK {
            return self.fail(local, m, "node attribute too long, or too many");
        }
        self.put_bytes[local] = used;
        self.control.note_segment(value);
        let (key, value) = (key.to_string(), value.to_string());
        self.kvs.put_node_attr(&key, &value);
        self.reply(local, m, ok(&[]));
        let (ready, waiting): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| w.key == key);
        self.waiters = waiting;
        for w in ready {
            let reply = ok(&[("found", "TRUE".into()), ("value", value.clone())]);
            self.reply(w.local, &w.request, reply);
        }
    }

    fn get_node_attr(&mut self, local: usize, m: &Message) {
        let Some(key) = m.get("key") else {
            return self.fail(local, m, "info-getnodeattr without key");
        };
        if let Some(v) = self.kvs.node_attr(key).map(str::to_string) {
            return self.reply(local, m, ok(&[("found", "TRUE".into()), ("value", v)]));
        }
        if m.get("wait") == Some("TRUE") {
            self.waiters.push(Waiter {
                local,
                request: m.clone(),
                key: key.to_string(),
                deadline: Instant::now() + self.timeout,
            });
            return;
        }
        self.reply(local, m, ok(&[("found", "FALSE".into())]));
    }

    fn finalize(&mut self, local: usize, m: &Message) {
        let Some(conn) = self.conns[local].as_mut() else {
            return;
        };
        conn.state = State::Done;
        let rank = conn.rank;
        self.report(Report::Finalized { rank });
        self.reply(local, m, ok(&[]));
        self.barrier_check(&format!("rank {rank} finalized"));
    }

    /// `abort`: PMI-1 `exitcode` and `message`; PMI-2 `exitcode` (MPICH 4.1+) or none (older
    /// clients, whose `msg` names the code as `MPI_Abort(comm, code)`). No reply: the rank exits.
    fn abort(&mut self, local: usize, m: &Message) {
        let Some(conn) = self.conns[local].as_mut() else {
            return;
        };
        conn.state = State::Done;
        let rank = conn.rank;
        let raw = m.get("message").or(m.get("msg")).unwrap_or("");
        let message = match m.framing {
            Framing::V1 => wire::unescape_v1(raw),
            Framing::V2 => raw.to_string(),
        };
        let code = m
            .get("exitcode")
            .and_then(|c| c.parse().ok())
            .or_else(|| code_in_message(&message))
            .unwrap_or(1);
        self.report(Report::Abort {
            rank,
            code,
            message,
        });
    }
}

/// The `N` of `MPI_Abort(..., N)` in an abort message.
fn code_in_message(message: &str) -> Option<i32> {
    let after = &message[message.find("MPI_Abort(")? + "MPI_Abort(".len()..];
    let args = &after[..after.find(')')?];
    args.rsplit(',').next()?.trim().parse().ok()
}

/// `maxes`, as Hydra gives them.
fn maxes() -> Pairs {
    ok(&[
        ("kvsname_max", KVSNAME_MAX.to_string()),
        ("keylen_max", KEY_MAX.to_string()),
        ("vallen_max", VALUE_MAX.to_string()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_codes_are_found_in_messages() {
        let m = "application called MPI_Abort(MPI_COMM_WORLD, 7) - process 1";
        assert_eq!(code_in_message(m), Some(7));
        assert_eq!(code_in_message("MPI_Abort(comm=0x84000000, 12)"), Some(12));
        assert_eq!(code_in_message("no code"), None);
    }

    #[test]
    fn replies_are_named_as_clients_expect() {
        let m = |framing, cmd: &str| Message {
            framing,
            cmd: cmd.into(),
            pairs: Vec::new(),
        };
        assert_eq!(reply_cmd(&m(Framing::V1, "init")), "response_to_init");
        assert_eq!(reply_cmd(&m(Framing::V1, "barrier_in")), "barrier_out");
        assert_eq!(
            reply_cmd(&m(Framing::V1, "frobnicate")),
            "frobnicate_result"
        );
        assert_eq!(
            reply_cmd(&m(Framing::V2, "kvs-fence")),
            "kvs-fence-response"
        );
    }
}
