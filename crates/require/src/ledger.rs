//! The link between a process's require runtime and the broker's ledger.
//!
//! With a broker, each device's root in the process starts empty and holds
//! only what the broker granted. A request the root cannot cover asks the
//! broker for the shortfall (all of a request's shortfalls at once); a root
//! left with no allocation gives its amount back. Both travel on one
//! connection used under the runtime's lock; releases are sent without
//! waiting for a reply (the broker answers only if one is malformed).
//!
//! Items name devices by their index in the *broker's* list of the kind,
//! which is not the process's own: a process confined to some CPUs lists
//! only those, and the broker leaves out devices it does not share (loop
//! devices). The link matches devices by name ([`Link::device_index`],
//! from the broker's `KindList`); a device the broker does not list is the
//! process's own.
//!
//! A thread that waits for the broker keeps a place in the broker's line
//! (one number per waiting acquisition, given up with `KindLeave` when
//! it stops waiting), so requests of all processes are served in the
//! order they asked; a refusal says what is free to it, which its policy
//! then chooses from. A try asks with place 0 and holds no place.
//!
//! Requests of policies that divide among concurrent arrivals
//! (`fair_cores`) arrive at the broker before their policies run, on a
//! connection of their own ([`Gatherer`]), and are answered in turn with
//! how many others arrived with them, from any process.
//!
//! A thread that must wait for the broker is woken by a *watcher* thread
//! which parks a `KindWatch` at the broker ([`Watch`], one connection for
//! all its watches) and, when the ledger changes, bumps the runtime's epoch
//! so every waiting thread looks again; of those with a place in line, only
//! the ones the broker's answer names ask it again (the others would be
//! refused). It runs only while threads of this process wait.

use allot_proto::msg::{ErrorCode, LedgerItem, Reply, Request};
use allot_proto::{Conn, DeviceDef, DuePlace};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A connection to the broker's ledger.
#[derive(Debug)]
pub struct Link {
    socket: PathBuf,
    conn: Conn,
    /// Kind → device name → index in the broker's list (as last listed).
    devices: HashMap<String, HashMap<String, u32>>,
}

/// How an acquisition asks the broker (see [`Link::acquire`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asking {
    /// The waiting request it is for (0: a try, which holds no place).
    pub place: u64,
    /// The asking thread holds allocations already (it is nested).
    pub holding: bool,
    /// A policy chose the devices: others of the same kinds would do.
    pub any_device: bool,
}

/// Why the broker did not grant something.
#[derive(Debug, Clone, PartialEq)]
pub enum Denied {
    /// Not available now (the broker's reason).
    NotNow(String),
    /// Never as asked (the broker's reason): the plan cannot give it, as
    /// an exclusive CPU in a cell that shares its CPUs in time.
    Never(String),
    /// The broker cannot be reached.
    Gone(String),
    /// Not available now, and the request keeps its place in the broker's
    /// line: `ahead` requests of other processes asked first for some of
    /// its devices; `free` is what it could take now on the devices of the
    /// kinds it asked for (a device not listed has nothing free).
    InLine {
        /// Requests of other processes ahead of it.
        ahead: u32,
        /// Free to it now, per device (exclusive and shared items).
        free: Vec<LedgerItem>,
    },
}

impl Link {
    /// Connects to the broker at `socket`.
    pub fn connect(socket: &Path) -> Option<Link> {
        let conn = Conn::connect(socket).ok()?;
        conn.set_timeout(Some(std::time::Duration::from_secs(10)))
            .ok()?;
        Some(Link {
            socket: socket.to_path_buf(),
            conn,
            devices: HashMap::new(),
        })
    }

    /// The broker's index of device `name` of `kind`; `None` when the
    /// broker does not list it (the device is this process's own). A kind
    /// not seen before is listed, once and alone (other users' kinds are
    /// not sent): a kind the broker does not have is remembered as having
    /// no device.
    pub fn device_index(&mut self, kind: &str, name: &str) -> Option<u32> {
        if !self.devices.contains_key(kind) {
            let listed = self.list(kind).unwrap_or_default();
            self.devices.extend(listed);
            self.devices.entry(kind.to_string()).or_default();
        }
        self.devices.get(kind)?.get(name).copied()
    }

    /// The broker's kind `kind` and its devices' indices.
    fn list(&mut self, kind: &str) -> Option<HashMap<String, HashMap<String, u32>>> {
        self.conn
            .send(&Request::KindList {
                kind: kind.to_string(),
            })
            .ok()?;
        let mut json = String::new();
        loop {
            match self.reply().ok()? {
                Reply::Json { more, json: part } => {
                    json.push_str(&part);
                    if !more {
                        break;
                    }
                }
                _ => return None,
            }
        }
        parse_devices(&json)
    }

    /// Path of the broker socket this link connected to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Receives the reply to the last call, skipping late errors about
    /// earlier releases.
    fn reply(&mut self) -> Result<Reply, Denied> {
        loop {
            match self.conn.recv() {
                Ok((Reply::Error { request: 0x0D, .. }, _)) => continue,
                Ok((r, _)) => return Ok(r),
                Err(e) => return Err(Denied::Gone(e.to_string())),
            }
        }
    }

    /// Takes `items` for this process, all or nothing. `how.place` names
    /// the waiting request it is for, which keeps its place in the
    /// broker's line while refused (`Denied::InLine`) until it is granted
    /// or [`Link::leave`] gives it up; 0 is a try, which holds no place
    /// (refused: `NotNow`). `how.holding`: the asking thread holds items
    /// already (its acquisition is nested), so it is not held back by
    /// places waiting on this process. `how.any_device`: its place waits
    /// for any device of the items' kinds.
    pub fn acquire(&mut self, items: Vec<LedgerItem>, how: Asking) -> Result<(), Denied> {
        self.conn
            .send(&Request::KindAcquire {
                items,
                place: how.place,
                holding: how.holding,
                any_device: how.any_device,
            })
            .map_err(|e| Denied::Gone(e.to_string()))?;
        match self.reply()? {
            Reply::Ok => Ok(()),
            Reply::InLine { ahead, free } => Err(Denied::InLine { ahead, free }),
            Reply::Error {
                code: ErrorCode::Refused,
                message,
                ..
            } => Err(Denied::NotNow(message)),
            Reply::Error {
                code: ErrorCode::Never,
                message,
                ..
            } => Err(Denied::Never(message)),
            Reply::Error { message, .. } => Err(Denied::Gone(message)),
            other => Err(Denied::Gone(format!("unexpected reply {other:?}"))),
        }
    }

    /// The waiting request `place` stopped waiting: gives its place in the
    /// broker's line up (no reply awaited).
    pub fn leave(&mut self, place: u64) {
        let _ = self.conn.send(&Request::KindLeave { place });
    }

    /// Gives `items` back (no reply awaited).
    pub fn release(&mut self, items: Vec<LedgerItem>) {
        let _ = self.conn.send(&Request::KindRelease { items });
    }

    /// Defines a virtual kind for every process.
    pub fn define(&mut self, name: &str, devices: Vec<DeviceDef>) -> Result<(), String> {
        self.conn
            .send(&Request::KindDefine {
                name: name.into(),
                devices,
            })
            .map_err(|e| e.to_string())?;
        match self.reply() {
            Ok(Reply::Ok) => {
                // Its devices are the broker's now: list them afresh.
                self.devices.remove(name);
                Ok(())
            }
            Ok(Reply::Error { message, .. }) => Err(message),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(Denied::Gone(e) | Denied::NotNow(e) | Denied::Never(e)) => Err(e),
            Err(Denied::InLine { .. }) => Err("unexpected place in line".into()),
        }
    }
}

/// How long a gathered arrival waits for the broker's answer before its
/// policy runs without it: far past any window the broker keeps
/// ([`allot_proto::gather::MAX_WINDOW`]) for a broker that stopped
/// answering.
pub const GATHER_GIVE_UP: std::time::Duration = std::time::Duration::from_secs(3);

/// The connection on which a process's requests of dividing policies
/// arrive at the broker to be gathered with every other process's
/// (`KindGather`). Answers come when each one's turn comes, in any order
/// across the process's threads: one thread at a time *reads*
/// ([`Gatherer::take_reader`]) and files every answer it receives for
/// whichever thread it is ([`Gatherer::file`]); the others sleep. Sending
/// uses a second handle, so arrivals and choices go out while a thread
/// reads.
#[derive(Debug)]
pub struct Gatherer {
    send: Conn,
    recv: Option<Conn>,
    /// Arrivals sent and not yet answered.
    asked: std::collections::HashSet<u64>,
    /// Answers received and not yet taken: arrival → others.
    answers: HashMap<u64, u32>,
    next: u64,
}

impl Gatherer {
    /// A connection of its own to the broker at `socket`.
    pub fn connect(socket: &Path) -> Option<Gatherer> {
        let recv = Conn::connect(socket).ok()?;
        recv.set_timeout(Some(GATHER_GIVE_UP)).ok()?;
        let send = recv.try_clone().ok()?;
        Some(Gatherer {
            send,
            recv: Some(recv),
            asked: Default::default(),
            answers: HashMap::new(),
            next: 1,
        })
    }

    /// Sends an arrival with the process's `window`; its number, or `None`
    /// when the broker cannot be reached.
    pub fn arrive(&mut self, window: std::time::Duration) -> Option<u64> {
        let arrival = self.next;
        self.next += 1;
        let window_us = u32::try_from(window.as_micros()).unwrap_or(u32::MAX);
        let sent_ns = allot_proto::window::monotonic_ns();
        self.send
            .send(&Request::KindGather {
                arrival,
                window_us,
                sent_ns,
            })
            .ok()?;
        self.asked.insert(arrival);
        Some(arrival)
    }

    /// Says that the policy of `arrival` has chosen (no reply awaited).
    pub fn chosen(&mut self, arrival: u64) {
        self.asked.remove(&arrival);
        self.answers.remove(&arrival);
        let _ = self.send.send(&Request::KindChosen { arrival });
    }

    /// The answer to `arrival` (others of its batch), once received.
    pub fn answer(&mut self, arrival: u64) -> Option<u32> {
        let got = self.answers.remove(&arrival)?;
        self.asked.remove(&arrival);
        Some(got)
    }

    /// The receiving handle, unless a thread reads already.
    pub fn take_reader(&mut self) -> Option<Conn> {
        self.recv.take()
    }

    /// Gives the receiving handle back with what it `got`, filing an
    /// answer for its arrival; false when the connection failed (the
    /// broker went away or sent something else). Nothing received within
    /// [`GATHER_GIVE_UP`] is not a failure: the waiting thread gives up.
    pub fn file(&mut self, reader: Conn, got: Result<Reply, allot_proto::CallError>) -> bool {
        self.recv = Some(reader);
        match got {
            Ok(Reply::Gathered { arrival, others }) => {
                if self.asked.contains(&arrival) {
                    self.answers.insert(arrival, others);
                }
                true
            }
            Err(allot_proto::CallError::Io(e)) => matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::Interrupted
            ),
            _ => false,
        }
    }
}

/// The watcher thread's connection to the broker (see the module notes):
/// one connection for every watch the thread parks, so a wake-up is not
/// followed by a connection made anew (the broker accepting it and
/// checking the process) while the woken threads ask for what was freed.
#[derive(Debug)]
pub struct Watch {
    socket: PathBuf,
    conn: Option<Conn>,
}

impl Watch {
    /// A watch of the broker at `socket`, connected at its first use.
    pub fn new(socket: &Path) -> Watch {
        Watch {
            socket: socket.to_path_buf(),
            conn: None,
        }
    }

    /// Waits until the ledger's epoch passes `epoch`, telling the broker
    /// that `waiting` threads of this process wait. Returns the new epoch,
    /// the system-wide waiters and this process's places in line that
    /// could take something now (with what is free to each), or `None` if
    /// the broker went away.
    pub fn wait(&mut self, epoch: u64, waiting: u32) -> Option<(u64, u32, Vec<DuePlace>)> {
        let got = self.park(epoch, waiting);
        if got.is_none() {
            self.conn = None;
        }
        got
    }

    fn park(&mut self, epoch: u64, waiting: u32) -> Option<(u64, u32, Vec<DuePlace>)> {
        if self.conn.is_none() {
            self.conn = Some(Conn::connect(&self.socket).ok()?);
        }
        let conn = self.conn.as_mut()?;
        conn.send(&Request::KindWatch { epoch, waiting }).ok()?;
        match conn.recv().ok()?.0 {
            Reply::Changed {
                epoch,
                waiters,
                due,
            } => Some((epoch, waiters, due)),
            _ => None,
        }
    }
}

/// Kind → device name → index, from the broker's ledger JSON.
fn parse_devices(json: &str) -> Option<HashMap<String, HashMap<String, u32>>> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let mut out = HashMap::new();
    for k in v.get("kinds")?.as_array()? {
        let name = k.get("name")?.as_str()?.to_string();
        let devs = k
            .get("devices")?
            .as_array()?
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((d.get("name")?.as_str()?.to_string(), i as u32)))
            .collect();
        out.insert(name, devs);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_indexed_as_the_broker_lists_them() {
        let json = r#"{"epoch":3,"kinds":[
            {"name":"cpu","virtual":false,"devices":[{"name":"0"},{"name":"1"},{"name":"2"}]},
            {"name":"io","virtual":false,"devices":[{"name":"8:0"}]}],"holders":[]}"#;
        let d = parse_devices(json).unwrap();
        assert_eq!(d["cpu"]["2"], 2);
        assert_eq!(d["io"]["8:0"], 0);
        assert!(!d["io"].contains_key("7:0"));
        assert!(parse_devices("{}").is_none());
    }
}
