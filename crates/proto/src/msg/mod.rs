//! Control messages between clients and the broker.
//!
//! Every message is one `SOCK_SEQPACKET` datagram: a 12-byte header, then the
//! body.
//!
//! ```text
//! offset  size  field
//!      0     2  magic    0xA110 (little-endian)
//!      2     2  version  PROTOCOL_VERSION
//!      4     2  kind     request kinds 0x01.., reply kinds 0x81..
//!      6     2  flags    reserved, must be 0
//!      8     4  length   body length in bytes (= datagram length − 12)
//! ```
//!
//! Bodies are sequences of the primitive forms in [`crate::wire`]; each
//! message's fields are listed on its variant below, in order. A datagram
//! longer than [`MAX_MESSAGE`] is rejected before decoding.
//!
//! Requests get exactly one reply each, in order, except the *one-way*
//! requests `Report` and `KindRelease` ([`Request::expects_reply`]), which
//! never get one — not even an error: a client that sends one and then
//! calls anything else reads the reply to its call, never a stale error.
//! The broker logs what it rejects of them. A datagram whose header names a
//! one-way kind is never answered either, even if its body is malformed. A
//! `Register` that is queued gets `Queued` now and `Registered` later, when
//! admitted.
//!
//! A cell's spec travels as the one spec vocabulary's [`CellSpec`]
//! (`allot_spec`, which every party links); how each of its fields is laid
//! out in bytes is [`spec`]'s, the one encoding. What the broker admits is
//! checked once, by [`CellSpec::validate`] and the planner's admission.

use crate::wire::DecodeError;
use allot_spec::{CellSpec, Goal, Placement, TimeContract};

pub mod spec;

/// Wire-format version. **Bump it on any change to a message**; the broker
/// answers other versions with [`ErrorCode::UnsupportedVersion`]. (The grant
/// page has its own [`crate::page::PAGE_VERSION`].)
///
/// History: 1 — cells; 2 — the resource ledger for `require` (0x0A–0x0E);
/// 3 — one-way requests are never answered, [`ErrorCode::Limit`], the
/// status document carries its own version ([`crate::status`]); 4 — the
/// one-way `PoolStats` (0x0F): a runtime pool's per-worker statistics,
/// summed; 5 — the spec carries a time contract ([`spec::time_fields`]);
/// 6 — the spec carries a goal ([`spec::goal_fields`]), and `SetGoal`
/// (0x10) changes it;
/// 7 — named channels: `ChannelOpen` (0x11), the one-way `ChannelClose`
/// (0x12), `ChannelRejoin` (0x13) and the `Channel` reply (0x89) with
/// three descriptors; 8 — `Register` may ask for the cell's join files
/// (`joins_itself`), which `Registered` then carries after the page;
/// 9 — the spec carries a memory guarantee and limit
/// ([`allot_spec::Memory`]: two `u64`, bytes) and a share of the cache
/// and memory bandwidth ([`allot_spec::Cache`]: two `u32`), and
/// `SetMemory` (0x14) changes the memory, `SetCache` (0x15) the cache;
/// 10 — `IncludeGroup` (0x16): a cell also confines a launcher's cgroup;
/// 11 — `KindList` (0x0B) names the kind to list (empty: every kind), so a
/// process that needs one kind's devices is not sent every user's kinds;
/// 12 — waiting in line for the ledger: `KindAcquire` (0x0C) carries the
/// caller's `place`, the broker answers a refusal with a place kept by
/// `InLine` (0x8A: who is ahead, what is free to it), and the one-way
/// `KindLeave` (0x17) gives a place up; `KindAcquire` says whether the
/// asking thread holds items already (`holding`) and whether other devices
/// of the same kinds would do (`any_device`);
/// 13 — gathering across processes: `KindGather` (0x18), answered by
/// `Gathered` (0x8B) when the caller's turn in its batch comes, and the
/// one-way `KindChosen` (0x19) when the policy it gathered for has chosen;
/// 14 — `Changed` (0x88) names the caller's places in line that could
/// take something now (`due`), so only their threads ask again;
/// 15 — with what is free to each of them.
pub const PROTOCOL_VERSION: u16 = 15;

/// The header's first two bytes, little-endian; other values are not the allot protocol.
pub const MAGIC: u16 = 0xA110;

/// Header length in bytes.
pub const HEADER_LEN: usize = 12;

/// Largest datagram either side sends or accepts.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Stable error codes carried by [`Reply::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// The datagram did not decode.
    Malformed = 1,
    /// The header's version is not the broker's.
    UnsupportedVersion = 2,
    /// Unknown message kind.
    UnknownKind = 3,
    /// Datagram above [`MAX_MESSAGE`].
    Oversized = 4,
    /// Admission refused for now (the message says which guarantees block it).
    Refused = 5,
    /// The request can never be met on this machine.
    Never = 6,
    /// No such cell.
    UnknownCell = 7,
    /// The caller may not act on that cell or process.
    PermissionDenied = 8,
    /// The request is well-formed but invalid (bad spec, bad pid).
    Invalid = 9,
    /// The broker failed internally; the message says what to do.
    Internal = 10,
    /// The broker is shutting down.
    ShuttingDown = 11,
    /// A per-user limit of the broker's configuration was reached (cells,
    /// queued cells, connections, kinds…); the message names it.
    Limit = 12,
}

impl ErrorCode {
    /// A short stable name (snake case), for logs and metrics labels.
    pub fn name(self) -> &'static str {
        use ErrorCode::*;
        match self {
            Malformed => "malformed",
            UnsupportedVersion => "unsupported_version",
            UnknownKind => "unknown_kind",
            Oversized => "oversized",
            Refused => "refused",
            Never => "never",
            UnknownCell => "unknown_cell",
            PermissionDenied => "permission_denied",
            Invalid => "invalid",
            Internal => "internal",
            ShuttingDown => "shutting_down",
            Limit => "limit",
        }
    }

    /// From the wire value. A code this version does not define is not
    /// mapped to another (the peer speaks the same version, so it is a
    /// malformed reply, and a decoder that rewrote it would misreport it).
    pub fn from_u16(v: u16) -> Option<ErrorCode> {
        use ErrorCode::*;
        Some(match v {
            1 => Malformed,
            2 => UnsupportedVersion,
            3 => UnknownKind,
            4 => Oversized,
            5 => Refused,
            6 => Never,
            7 => UnknownCell,
            8 => PermissionDenied,
            9 => Invalid,
            10 => Internal,
            11 => ShuttingDown,
            12 => Limit,
            _ => return None,
        })
    }
}

/// One line of a ledger acquisition or release: an amount of one device of
/// a resource kind.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerItem {
    /// Name of the resource kind (`cpu`, `memory`, `io` or a virtual kind).
    pub kind: String,
    /// Index of the device in the kind's device list, from 0.
    pub dev: u32,
    /// How much of the device, in the kind's unit (CPUs, bytes, an I/O weight, a count);
    /// not negative.
    pub amount: f64,
    /// A shared (non-exclusive) holding.
    pub shared: bool,
}

/// A place in line that could take something now (`Changed`), with what is
/// free to it: as `InLine` says, less what the due places ahead of it count
/// on.
#[derive(Debug, Clone, PartialEq)]
pub struct DuePlace {
    /// The place (`KindAcquire`'s `place`).
    pub place: u64,
    /// Free to it, per device of the kinds it waits for (exclusive and
    /// shared items).
    pub free: Vec<LedgerItem>,
}

/// One device of a kind definition.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDef {
    /// The device's name, unique within the kind.
    pub name: String,
    /// Left to processes that asked for nothing.
    pub min: f64,
    /// The device's capacity in the kind's unit; holders share what `min` leaves.
    pub max: f64,
}

/// A client's request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `0x01` — `client: str`. Introduces the client; answered by `Welcome`.
    Hello {
        /// Free-form client description ("allot run", "liballot 0.1").
        client: String,
    },
    /// `0x02` — `name: str, spec, wait: bool, members: list<u32>`.
    /// Creates a cell for `members` (empty: the caller itself).
    Register {
        /// Human-readable name.
        name: String,
        /// What the cell asks for.
        spec: CellSpec,
        /// Queue instead of failing when admission says "not now".
        wait: bool,
        /// Process ids to put in the cell.
        members: Vec<u32>,
        /// The registering process puts itself into the cell: the broker
        /// attaches no member but records the peer as one, and sends the
        /// cell's join files with `Registered` (when it trusts the peer
        /// with them and its backend has them; otherwise it attaches the
        /// members itself, as without the flag). See `Registered`.
        joins_itself: bool,
    },
    /// `0x03` — `cell: u64, token: u64`. Reattaches to a cell after the
    /// connection (or the broker) went away.
    Rejoin {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// The secret returned by `Registered`.
        token: u64,
    },
    /// `0x04` — `cell: u64, pid: u32`. Adds a process to a cell.
    AddMember {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// Id of the process to add; the caller must be allowed to act on it.
        pid: u32,
    },
    /// `0x05` — `cell: u64, busy: u32, wanted: u32, progress: u64`.
    /// A progress report; no reply.
    Report {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// Workers busy now.
        busy: u32,
        /// CPUs the cell could use now (0: unknown).
        wanted: u32,
        /// A monotone progress counter (tasks done, bytes, frames…).
        progress: u64,
    },
    /// `0x0F` — `cell: u64, stats` ([`PoolStatsWire`]). A runtime pool's
    /// statistics; no reply.
    PoolStats {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// The pool's statistics, summed over its workers.
        stats: PoolStatsWire,
    },
    /// `0x10` — `cell: u64, goal` ([`spec::goal_fields`]). Changes a cell's goal
    /// alone, keeping the rest of its request (a program that inherited
    /// its cell from `allot run` does not know the rest).
    SetGoal {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// The new goal.
        goal: Goal,
    },
    /// `0x14` — `cell: u64, min: u64, max: u64` (bytes, 0: none). Changes
    /// a cell's memory guarantee and limit alone, keeping the rest of its
    /// request, as [`Request::SetGoal`] does for the goal.
    SetMemory {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// The new memory guarantee and limit.
        memory: allot_spec::Memory,
    },
    /// `0x15` — `cell: u64, ways: u32, bandwidth: u32`. Changes a cell's
    /// L3 ways and memory bandwidth ceiling alone ([`allot_spec::Cache`]),
    /// keeping the rest of its request.
    SetCache {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// The new ways and ceiling.
        cache: allot_spec::Cache,
    },
    /// `0x16` — `cell: u64, token: u64, dir: str`. The cell also confines
    /// `dir`, a cgroup v2 directory a launcher made for its own processes
    /// (Slurm's step `user` group): the broker writes the cell's CPUs and
    /// weight there and moves no process. Root only, with the cell's
    /// token (from a ticket), so a launcher's tasks can ask from any
    /// process. Answered `Ok`, or an error saying why the directory
    /// cannot be one (nothing changed then).
    IncludeGroup {
        /// The cell's id.
        cell: u64,
        /// The cell's token (the secret of its ticket).
        token: u64,
        /// The launcher's cgroup, an absolute path.
        dir: String,
    },
    /// `0x06` — `cell: u64, spec`. Changes a cell's request.
    UpdateSpec {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
        /// The new request.
        spec: CellSpec,
    },
    /// `0x07` — `cell: u64`. Ends a cell.
    Release {
        /// The cell's id, from `Registered` or `Queued`.
        cell: u64,
    },
    /// `0x08` — no fields. Asks for the broker's state as JSON.
    Status,
    /// `0x09` — no fields. Asks the broker to exit (its owner or root only).
    Shutdown,
    /// `0x0A` — `name: str, devices: list<(name: str, min: f64, max: f64)>`.
    /// Defines a virtual (counting) resource kind for every process.
    KindDefine {
        /// Name of the new kind; defining it again with the same devices is accepted.
        name: String,
        /// The kind's devices, in index order (`LedgerItem::dev` counts from 0).
        devices: Vec<DeviceDef>,
    },
    /// `0x0B` — `kind: str`. The ledger as JSON (`Json` chunks): the kind
    /// named, or every kind when `kind` is empty.
    KindList {
        /// The kind to list; empty: every kind.
        kind: String,
    },
    /// `0x0C` — `items: list<(kind: str, dev: u32, amount: f64, shared: bool)>,
    /// place: u64, holding: bool, any_device: bool`. Takes every item for the calling process, all or
    /// nothing. With `place` 0 (a try) a refusal is an `Error` and holds no
    /// place. Otherwise `place` names the caller's waiting request (one
    /// number per waiting thread, the caller's choice): refused, it keeps a
    /// place in the ledger's line under that number and is answered
    /// `InLine`; asked again under the same number it keeps its place,
    /// with the items asked last. The place is given up by a grant,
    /// `KindLeave`, or the connection's end. `holding` says the asking
    /// thread already holds items (the acquisition is nested in another):
    /// then places that wait on the caller's process do not hold it back.
    /// `any_device` says a policy chose the devices and would take others
    /// of the same kinds: its place then waits for any device of them.
    KindAcquire {
        /// What to take.
        items: Vec<LedgerItem>,
        /// The caller's waiting request (0: a try, which holds no place).
        place: u64,
        /// The asking thread holds items already.
        holding: bool,
        /// Any device of the items' kinds would do (a policy chose them).
        any_device: bool,
    },
    /// `0x0D` — same fields as `KindAcquire`. Gives items back; no reply.
    KindRelease {
        /// What to give back.
        items: Vec<LedgerItem>,
    },
    /// `0x17` — `place: u64`. The caller's waiting request `place` stopped
    /// waiting (it was met another way, or gave up): its place in line is
    /// given up. No reply.
    KindLeave {
        /// The place `KindAcquire` named.
        place: u64,
    },
    /// `0x18` — `arrival: u64, window_us: u32, sent_ns: u64`. A request
    /// of a policy that divides among concurrent arrivals (`fair_cores`)
    /// arrives: answered by `Gathered` when its batch's window has closed
    /// (the rule of [`crate::gather`]; `window_us` is the caller's window,
    /// cut to [`crate::gather::MAX_WINDOW`]) and the arrival before it in
    /// the batch has chosen. `arrival` is the caller's number for it (not
    /// 0); `sent_ns` when it was sent (`CLOCK_MONOTONIC`, nanoseconds):
    /// its wait counts from then, not from when the broker read it (no
    /// later than that, no earlier than a window before).
    KindGather {
        /// The caller's number for this arrival.
        arrival: u64,
        /// The caller's gathering window, microseconds.
        window_us: u32,
        /// When the caller sent it (`CLOCK_MONOTONIC` nanoseconds).
        sent_ns: u64,
    },
    /// `0x19` — `arrival: u64`. The policy of the caller's `arrival` has
    /// chosen (its acquisition holds what it chose, or waits): the next
    /// arrival of its batch may be answered. No reply.
    KindChosen {
        /// The arrival `KindGather` named.
        arrival: u64,
    },
    /// `0x0E` — `epoch: u64, waiting: u32`. Answered with `Changed` as soon
    /// as the ledger's epoch exceeds `epoch` and the change may let the
    /// caller through (it has a place in line that could take something,
    /// or more threads waiting than places); `waiting` is how many of the
    /// caller's threads wait (summed into the waiters policies see).
    KindWatch {
        /// Last epoch seen.
        epoch: u64,
        /// Threads of the caller waiting.
        waiting: u32,
    },
    /// `0x11` — `name: str, send: bool, slots: u32, message_max: u32`.
    /// Opens one end of the named channel, creating it (with at least
    /// `slots` slots of messages up to `message_max` bytes) if it does not
    /// exist; answered by `Channel` with its descriptors. An existing
    /// channel keeps its size: 0 for either accepts it, a larger one is
    /// refused. The end stays open until `ChannelClose` or the connection
    /// closes.
    ChannelOpen {
        /// The channel's name (1 to 64 of `A-Z a-z 0-9 . _ -`).
        name: String,
        /// The sending end (else the receiving end; one per channel).
        send: bool,
        /// Slots wanted (0: the broker's default, or whatever it has).
        slots: u32,
        /// Longest message wanted, bytes (0: the default, or whatever it has).
        message_max: u32,
    },
    /// `0x12` — `name: str, send: bool`. Closes one end this connection
    /// opened; no reply.
    ChannelClose {
        /// The channel's name.
        name: String,
        /// True for the sending end, false for the receiving end.
        send: bool,
    },
    /// `0x13` — `name: str, send: bool`, with the channel's three
    /// descriptors (`SCM_RIGHTS`, in `Channel`'s order). After a broker
    /// restart, an end that was open hands its channel back; the new broker
    /// adopts the channel under its name (or finds it adopted already) and
    /// counts the end for this connection. Answered by `Ok` or `Error`.
    ChannelRejoin {
        /// The channel's name.
        name: String,
        /// True for the sending end, false for the receiving end.
        send: bool,
    },
}

/// The broker's reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `0x81` — `broker_pid: u32, instance: u64, backend: str, machine: str, cpus: u32`.
    Welcome {
        /// The broker's process id.
        broker_pid: u32,
        /// Random id of this broker run (changes on restart).
        instance: u64,
        /// Enforcement backend in use.
        backend: String,
        /// Machine summary line.
        machine: String,
        /// CPUs available to cells.
        cpus: u32,
    },
    /// `0x82` — `cell: u64, token: u64, generation: u64`. The grant page's
    /// memfd travels with it as `SCM_RIGHTS`; for a `Register` with
    /// `joins_itself` that the broker granted, the cell's join files
    /// follow it (cgroup v1: each hierarchy's `tasks`, opened for writing:
    /// the registering thread writes `0` to each, moving itself; the
    /// processes it starts then begin inside the cell). Without them the
    /// broker attached the members itself.
    Registered {
        /// The new cell's id, used by every later request about it.
        cell: u64,
        /// Secret for `Rejoin`.
        token: u64,
        /// Grant generation at the time of the reply.
        generation: u64,
    },
    /// `0x83` — `cell: u64, position: u32, reason: str`. Admission is
    /// waiting; `Registered` follows when the cell is admitted.
    Queued {
        /// The cell id reserved for it.
        cell: u64,
        /// 1 for the head of the queue.
        position: u32,
        /// Why it waits.
        reason: String,
    },
    /// `0x84` — no fields.
    Ok,
    /// `0x85` — `code: u16, request: u16, message: str`.
    Error {
        /// What went wrong.
        code: ErrorCode,
        /// Kind of the request that caused it (0 if it did not decode).
        request: u16,
        /// What happened and what to do.
        message: String,
    },
    /// `0x86` — `more: bool, json: str`. One chunk of the status JSON; chunks
    /// with `more` set are followed by another.
    Status {
        /// Another chunk follows.
        more: bool,
        /// The next piece of the JSON text; the pieces concatenate in order.
        json: String,
    },
    /// `0x87` — `more: bool, json: str`. One chunk of the ledger JSON.
    Json {
        /// Another chunk follows.
        more: bool,
        /// The next piece of the JSON text; the pieces concatenate in order.
        json: String,
    },
    /// `0x88` — `epoch: u64, waiters: u32, due: list<(place: u64, free:
    /// list<item>)>`. The ledger changed.
    Changed {
        /// The ledger's epoch now.
        epoch: u64,
        /// Threads waiting across all processes.
        waiters: u32,
        /// The watching process's places in line (`KindAcquire`'s `place`)
        /// that could take something now, first in line first, each with
        /// what is free to it; the others would be refused again. Empty
        /// when the process was woken for its threads that wait without a
        /// place.
        due: Vec<DuePlace>,
    },
    /// `0x8A` — `ahead: u32, free: list<(kind: str, dev: u32, amount: f64,
    /// shared: bool)>`. A `KindAcquire` with a place was refused and keeps
    /// its place in line: `ahead` requests of other processes asked before
    /// it for some of the same devices; `free` is what it could take now on
    /// the devices of the kinds it asked for (exclusive and shared amounts,
    /// devices others reserve by waiting ahead counted as taken; a device
    /// not listed has nothing free).
    InLine {
        /// Waiting requests ahead of it that want some of its devices.
        ahead: u32,
        /// What is free to it now, per device of the kinds it asked for.
        free: Vec<LedgerItem>,
    },
    /// `0x8B` — `arrival: u64, others: u32`. The caller's turn in its batch
    /// of arrivals (`KindGather`) came: `others` requests of the batch,
    /// of any process, arrived with it and have not chosen yet; its policy
    /// divides what is free among itself and them.
    Gathered {
        /// The arrival `KindGather` named.
        arrival: u64,
        /// Arrivals of its batch that have not chosen yet, itself aside.
        others: u32,
    },
    /// `0x89` — `slots: u32, message_max: u32`. A channel end is open; its
    /// memory, data doorbell and space doorbell travel with it as
    /// `SCM_RIGHTS`, in that order.
    Channel {
        /// Slots in the ring.
        slots: u32,
        /// Longest message, bytes.
        message_max: u32,
    },
}

impl Request {
    /// The wire kind.
    pub fn kind(&self) -> u16 {
        match self {
            Request::Hello { .. } => 0x01,
            Request::Register { .. } => 0x02,
            Request::Rejoin { .. } => 0x03,
            Request::AddMember { .. } => 0x04,
            Request::Report { .. } => 0x05,
            Request::UpdateSpec { .. } => 0x06,
            Request::Release { .. } => 0x07,
            Request::Status => 0x08,
            Request::Shutdown => 0x09,
            Request::KindDefine { .. } => 0x0A,
            Request::KindList { .. } => 0x0B,
            Request::KindAcquire { .. } => 0x0C,
            Request::KindRelease { .. } => 0x0D,
            Request::KindWatch { .. } => 0x0E,
            Request::PoolStats { .. } => 0x0F,
            Request::SetGoal { .. } => 0x10,
            Request::ChannelOpen { .. } => 0x11,
            Request::ChannelClose { .. } => 0x12,
            Request::ChannelRejoin { .. } => 0x13,
            Request::SetMemory { .. } => 0x14,
            Request::SetCache { .. } => 0x15,
            Request::IncludeGroup { .. } => 0x16,
            Request::KindLeave { .. } => 0x17,
            Request::KindGather { .. } => 0x18,
            Request::KindChosen { .. } => 0x19,
        }
    }

    /// A `KindAcquire` that is a try: refused, it holds no place in line.
    pub fn kind_try(items: Vec<LedgerItem>) -> Request {
        Request::KindAcquire {
            items,
            place: 0,
            holding: false,
            any_device: false,
        }
    }

    /// Whether the broker answers this request (see the module docs).
    pub fn expects_reply(&self) -> bool {
        kind_expects_reply(self.kind())
    }
}

/// Whether the broker answers requests of wire kind `kind`: every kind but
/// the one-way `Report` (0x05), `KindRelease` (0x0D), `PoolStats` (0x0F),
/// `ChannelClose` (0x12), `KindLeave` (0x17) and `KindChosen` (0x19).
pub fn kind_expects_reply(kind: u16) -> bool {
    !matches!(kind, 0x05 | 0x0D | 0x0F | 0x12 | 0x17 | 0x19)
}

/// The request kind a datagram's header names, read as far as the magic
/// allows: whatever else is wrong with it (version, flags, length, body),
/// a datagram that starts with the magic and a one-way kind is never
/// answered, so an error can never sit unread on a connection that mixes
/// one-way messages with calls. `None` when even that cannot be read.
pub fn header_kind(buf: &[u8]) -> Option<u16> {
    let u16_at = |i: usize| Some(u16::from_le_bytes([*buf.get(i)?, *buf.get(i + 1)?]));
    (u16_at(0)? == MAGIC).then_some(())?;
    u16_at(4)
}

/// A runtime pool's per-worker statistics summed over its workers (the
/// `allot-runtime` crate's `WorkerStats`), as a cell reports them with
/// [`Request::PoolStats`] and the status document shows them
/// ([`crate::status::CellStatus::pool_stats`]). On the wire: `workers:
/// u32`, then the ten counters as `u64`s in field order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PoolStatsWire {
    /// Workers active (holding a CPU) when the report was made.
    pub workers: u32,
    /// Tasks the workers ran, panicking ones included (not those a waiter ran itself).
    pub tasks_run: u64,
    /// Tasks created on workers.
    pub tasks_created: u64,
    /// Tasks taken by idle workers from others' or shared queues.
    pub tasks_stolen: u64,
    /// Of those, tasks taken from retired workers.
    pub tasks_migrated: u64,
    /// Tasks created suspended on workers.
    pub tasks_suspended: u64,
    /// Resumed or timed tasks run.
    pub tasks_resumed: u64,
    /// Quanta used up (a ready task ran nested).
    pub yields: u64,
    /// Worker time not parked, in ns (running or looking for tasks).
    pub ns_awake: u64,
    /// Worker time parked, in ns.
    pub ns_asleep: u64,
    /// The most tasks one worker's queues held at once (sampled).
    pub queue_high_water: u64,
}

impl Reply {
    /// The wire kind.
    pub fn kind(&self) -> u16 {
        match self {
            Reply::Welcome { .. } => 0x81,
            Reply::Registered { .. } => 0x82,
            Reply::Queued { .. } => 0x83,
            Reply::Ok => 0x84,
            Reply::Error { .. } => 0x85,
            Reply::Status { .. } => 0x86,
            Reply::Json { .. } => 0x87,
            Reply::Changed { .. } => 0x88,
            Reply::Channel { .. } => 0x89,
            Reply::InLine { .. } => 0x8A,
            Reply::Gathered { .. } => 0x8B,
        }
    }

    /// An error reply.
    pub fn error(code: ErrorCode, request: u16, message: impl Into<String>) -> Reply {
        Reply::Error {
            code,
            request,
            message: message.into(),
        }
    }
}

/// Why a datagram was rejected, with the reply the broker sends for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Shorter than a header, or the header's length disagrees.
    #[error("bad frame: {0}")]
    Frame(String),
    /// Wrong magic number: not an allot peer.
    #[error("bad magic 0x{0:04x}: the peer does not speak the allot protocol")]
    Magic(u16),
    /// Another protocol version.
    #[error(
        "protocol version {got} is not supported (this side speaks {PROTOCOL_VERSION}); use matching allot versions"
    )]
    Version {
        /// The peer's version.
        got: u16,
    },
    /// The header's kind is not a request or reply kind of this version.
    #[error("unknown message kind 0x{0:02x}")]
    Kind(u16),
    /// The body did not decode.
    #[error("message kind 0x{kind:02x}: {err}")]
    Body {
        /// The header's message kind, whose body failed to decode.
        kind: u16,
        /// The decode error.
        err: DecodeError,
    },
    /// Longer than [`MAX_MESSAGE`] bytes; carries the datagram's length.
    #[error("message of {0} bytes exceeds the {MAX_MESSAGE}-byte limit")]
    Oversized(usize),
}

impl FrameError {
    /// The error code to answer with.
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::Version { .. } => ErrorCode::UnsupportedVersion,
            FrameError::Kind(_) => ErrorCode::UnknownKind,
            FrameError::Oversized(_) => ErrorCode::Oversized,
            _ => ErrorCode::Malformed,
        }
    }

    /// The request kind, when the header decoded far enough.
    pub fn request_kind(&self) -> u16 {
        match self {
            FrameError::Kind(k) | FrameError::Body { kind: k, .. } => *k,
            _ => 0,
        }
    }
}

mod codec;
mod examples;

pub use examples::{example_replies, example_requests};
#[cfg(test)]
mod tests;
