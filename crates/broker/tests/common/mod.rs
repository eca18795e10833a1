//! The broker's state machine with a fake process table and the dry-run
//! backend: shared set-up for the state-machine tests.
#![allow(dead_code)]

use allot_broker::Config;
use allot_broker::core::{Effect, Engine};
use allot_broker::journal::{Journal, Record};
use allot_broker::peer::{Peer, SessionId};
use allot_enforce::DryRun;
use allot_enforce::os::FakeOs;
use allot_proto::msg::{Reply, Request};
use allot_proto::{Grant, PageMap};
use allot_spec::CellSpec;
use allot_topo::{CpuSet, Machine};
use rustix::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

/// A peer: process `pid` (started at tick `pid`, as `FakeOs` starts its
/// processes), of user and group `uid`.
pub const fn peer(pid: u32, uid: u32) -> Peer {
    Peer {
        pid,
        start: Some(pid as u64),
        uid,
        gid: uid,
        runs: None,
    }
}

pub const ROOT: Peer = Peer {
    pid: 1,
    start: Some(1),
    uid: 0,
    gid: 0,
    runs: None,
};
pub const ALICE: Peer = Peer {
    pid: 2,
    start: Some(2),
    uid: 1000,
    gid: 1000,
    runs: None,
};
pub const BOB: Peer = Peer {
    pid: 3,
    start: Some(3),
    uid: 1001,
    gid: 1001,
    runs: None,
};

pub struct World {
    pub core: Engine,
    pub os: FakeOs,
    pub dry: DryRun,
    /// The journal the core's records are appended to, as the event loop
    /// appends them.
    pub journal: Journal,
    /// Every record the core asked for, in order.
    pub records: Vec<Record>,
    pub _dir: tempfile::TempDir,
}

impl World {
    /// Appends the records among `effects` to the journal, as the event
    /// loop does, and returns the other effects.
    pub fn record(&mut self, effects: Vec<Effect>) -> Vec<Effect> {
        let mut rest = Vec::new();
        for e in effects {
            match e {
                Effect::Journal(recs) => {
                    let _ = self.journal.append(&recs);
                    let behind = self.journal.problem().map(str::to_string);
                    let more = self
                        .core
                        .journaled(&recs, std::time::Duration::ZERO, behind);
                    self.records.extend(recs);
                    rest.extend(self.record(more));
                }
                other => rest.push(other),
            }
        }
        rest
    }

    pub fn handle(
        &mut self,
        session: SessionId,
        peer: Peer,
        req: Request,
        fd: Option<OwnedFd>,
    ) -> Vec<Effect> {
        let e = self.core.handle(session, peer, req, fd);
        self.record(e)
    }

    pub fn exited(&mut self, pid: u32) -> Vec<Effect> {
        let e = self.core.exited(pid);
        self.record(e)
    }

    pub fn session_closed(&mut self, session: SessionId) -> Vec<Effect> {
        let e = self.core.session_closed(session);
        self.record(e)
    }

    pub fn tick(&mut self, now: Instant) -> Vec<Effect> {
        let e = self.core.tick(now);
        self.record(e)
    }

    pub fn settle(&mut self) -> Vec<Effect> {
        let e = self.core.settle();
        self.record(e)
    }

    pub fn doorbell(&mut self, cell: u64) -> Vec<Effect> {
        let e = self.core.doorbell(cell);
        self.record(e)
    }

    pub fn shutdown(&mut self) {
        let e = self.core.shutdown();
        self.record(e);
    }
}

pub fn world_with(cpus: usize, dir: tempfile::TempDir, os: FakeOs) -> (World, Vec<Effect>) {
    world_with_backend(cpus, dir, os, DryRun::new())
}

/// A world over `dry` (which may already hold cells, as a kernel would
/// after a crash).
pub fn world_with_backend(
    cpus: usize,
    dir: tempfile::TempDir,
    os: FakeOs,
    dry: DryRun,
) -> (World, Vec<Effect>) {
    let cfg = Config::new(dir.path().join("s.sock"));
    world_from(cpus, dir, os, dry, cfg)
}

/// A world whose broker has configuration `cfg`.
pub fn world_from(
    cpus: usize,
    dir: tempfile::TempDir,
    os: FakeOs,
    dry: DryRun,
    cfg: Config,
) -> (World, Vec<Effect>) {
    let journal = Journal::open(&dir.path().join("journal")).unwrap().journal;
    let (core, effects) = Engine::new(
        &cfg,
        Machine::uniform(cpus),
        Box::new(dry.clone()),
        Arc::new(os.clone()),
        Some(&journal),
    );
    let mut w = World {
        core,
        os,
        dry,
        journal,
        records: Vec::new(),
        _dir: dir,
    };
    let effects = w.record(effects);
    (w, effects)
}

pub fn world(cpus: usize) -> World {
    world_configured(cpus, |_| {})
}

/// A world with the peers' processes (root, alice, bob) and a broker
/// configured by `configure`.
pub fn world_configured(cpus: usize, configure: impl FnOnce(&mut Config)) -> World {
    let os = FakeOs::new();
    for (pid, uid) in [(1, 0), (2, 1000), (3, 1001)] {
        os.spawn(pid, 0, 1, &CpuSet::first_n(cpus));
        os.set_uid(pid, uid);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::new(dir.path().join("s.sock"));
    configure(&mut cfg);
    world_from(cpus, dir, os, DryRun::new(), cfg).0
}

/// An exclusive cell of `min` CPUs.
pub fn exclusive(min: u32) -> CellSpec {
    CellSpec {
        min,
        exclusive: true,
        ..Default::default()
    }
}

pub fn proc_of(w: &World, pid: u32, uid: u32) {
    w.os.spawn(pid, 0, 1, &CpuSet::first_n(64));
    w.os.set_uid(pid, uid);
}

pub fn register(
    w: &mut World,
    peer: Peer,
    name: &str,
    spec: CellSpec,
    members: Vec<u32>,
    wait: bool,
) -> Vec<Effect> {
    w.handle(
        7,
        peer,
        Request::Register {
            name: name.into(),
            spec,
            wait,
            members,
            joins_itself: false,
        },
        None,
    )
}

pub fn reply(effects: &[Effect]) -> &Reply {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Reply { reply, .. } => Some(reply),
            _ => None,
        })
        .expect("a reply")
}

/// The error code of the first reply, if it is an error.
pub fn code(effects: &[Effect]) -> Option<allot_proto::msg::ErrorCode> {
    match reply(effects) {
        Reply::Error { code, .. } => Some(*code),
        _ => None,
    }
}

/// The message of the first reply's error (or the reply itself).
pub fn message(effects: &[Effect]) -> String {
    match reply(effects) {
        Reply::Error { message, .. } => message.clone(),
        other => format!("{other:?}"),
    }
}

/// `KindList { kind }` (empty: every kind) from `peer`: the ledger's JSON,
/// its chunks joined.
pub fn kind_listing(w: &mut World, peer: Peer, kind: &str) -> String {
    w.handle(7, peer, Request::KindList { kind: kind.into() }, None)
        .iter()
        .filter_map(|e| match e {
            Effect::Reply {
                reply: Reply::Json { json, .. },
                ..
            } => Some(json.clone()),
            _ => None,
        })
        .collect()
}

/// Maps the page from a Registered effect.
pub fn page(effects: Vec<Effect>) -> (u64, u64, PageMap) {
    for e in effects {
        if let Effect::Reply {
            reply: Reply::Registered { cell, token, .. },
            fds,
            ..
        } = e
            && let Some(fd) = fds.into_iter().next()
        {
            return (cell, token, PageMap::open(fd).unwrap());
        }
    }
    panic!("no Registered reply");
}

pub fn grant(p: &PageMap) -> Grant {
    p.page().read()
}
