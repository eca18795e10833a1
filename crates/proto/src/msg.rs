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
//! Message types here are the wire's own: the planner's `CellSpec` is
//! converted to and from [`SpecWire`] at the edges (client and broker).

use crate::wire::{DecodeError, Reader, Writer};

/// Wire-format version. **Bump it on any change to a message**; the broker
/// answers other versions with [`ErrorCode::UnsupportedVersion`]. (The grant
/// page has its own [`crate::page::PAGE_VERSION`].)
///
/// History: 1 — cells; 2 — the resource ledger for `require` (0x0A–0x0E);
/// 3 — one-way requests are never answered, [`ErrorCode::Limit`], the
/// status document carries its own version ([`crate::status`]).
pub const PROTOCOL_VERSION: u16 = 3;

/// Header magic.
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

/// Where a cell's CPUs should lie, as the wire encodes it (`u8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PlacementWire {
    /// 0: anywhere.
    #[default]
    Any = 0,
    /// 1: within one last-level cache.
    Llc = 1,
    /// 2: within one NUMA node.
    Numa = 2,
}

impl PlacementWire {
    /// From the wire byte.
    pub fn from_code(code: u8) -> Option<PlacementWire> {
        match code {
            0 => Some(PlacementWire::Any),
            1 => Some(PlacementWire::Llc),
            2 => Some(PlacementWire::Numa),
            _ => None,
        }
    }
}

/// What a cell asks for, as it travels: `min: u32, max: u32, weight: u32,
/// exclusive: bool, placement: u8`. The broker validates it when it turns
/// it into the planner's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpecWire {
    /// CPUs guaranteed (0: best effort).
    pub min: u32,
    /// Most CPUs (0: the machine).
    pub max: u32,
    /// Relative weight (1 to 10000).
    pub weight: u32,
    /// CPUs no other cell may use.
    pub exclusive: bool,
    /// Where the CPUs should lie.
    pub placement: PlacementWire,
}

impl Default for SpecWire {
    fn default() -> Self {
        SpecWire {
            min: 0,
            max: 0,
            weight: 1,
            exclusive: false,
            placement: PlacementWire::Any,
        }
    }
}

/// One line of a ledger acquisition or release: an amount of one device of
/// a resource kind.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerItem {
    /// Kind name.
    pub kind: String,
    /// Device index.
    pub dev: u32,
    /// Amount.
    pub amount: f64,
    /// A shared (non-exclusive) holding.
    pub shared: bool,
}

/// One device of a kind definition.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDef {
    /// Name.
    pub name: String,
    /// Left to processes that asked for nothing.
    pub min: f64,
    /// Largest allocation.
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
        spec: SpecWire,
        /// Queue instead of failing when admission says "not now".
        wait: bool,
        /// Process ids to put in the cell.
        members: Vec<u32>,
    },
    /// `0x03` — `cell: u64, token: u64`. Reattaches to a cell after the
    /// connection (or the broker) went away.
    Rejoin {
        /// The cell.
        cell: u64,
        /// The secret returned by `Registered`.
        token: u64,
    },
    /// `0x04` — `cell: u64, pid: u32`. Adds a process to a cell.
    AddMember {
        /// The cell.
        cell: u64,
        /// The process.
        pid: u32,
    },
    /// `0x05` — `cell: u64, busy: u32, wanted: u32, progress: u64`.
    /// A progress report; no reply.
    Report {
        /// The cell.
        cell: u64,
        /// Workers busy now.
        busy: u32,
        /// CPUs the cell could use now (0: unknown).
        wanted: u32,
        /// A monotone progress counter (tasks done, bytes, frames…).
        progress: u64,
    },
    /// `0x06` — `cell: u64, spec`. Changes a cell's request.
    UpdateSpec {
        /// The cell.
        cell: u64,
        /// The new request.
        spec: SpecWire,
    },
    /// `0x07` — `cell: u64`. Ends a cell.
    Release {
        /// The cell.
        cell: u64,
    },
    /// `0x08` — no fields. Asks for the broker's state as JSON.
    Status,
    /// `0x09` — no fields. Asks the broker to exit (its owner or root only).
    Shutdown,
    /// `0x0A` — `name: str, devices: list<(name: str, min: f64, max: f64)>`.
    /// Defines a virtual (counting) resource kind for every process.
    KindDefine {
        /// Kind name.
        name: String,
        /// Its devices.
        devices: Vec<DeviceDef>,
    },
    /// `0x0B` — no fields. The ledger as JSON (`Json` chunks).
    KindList,
    /// `0x0C` — `items: list<(kind: str, dev: u32, amount: f64, shared: bool)>`.
    /// Takes every item for the calling process, all or nothing.
    KindAcquire {
        /// What to take.
        items: Vec<LedgerItem>,
    },
    /// `0x0D` — same fields as `KindAcquire`. Gives items back; no reply.
    KindRelease {
        /// What to give back.
        items: Vec<LedgerItem>,
    },
    /// `0x0E` — `epoch: u64, waiting: u32`. Answered with `Changed` as soon
    /// as the ledger's epoch exceeds `epoch`; `waiting` is how many of the
    /// caller's threads wait (summed into the waiters policies see).
    KindWatch {
        /// Last epoch seen.
        epoch: u64,
        /// Threads of the caller waiting.
        waiting: u32,
    },
}

/// The broker's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// memfd travels with it as `SCM_RIGHTS`.
    Registered {
        /// The cell.
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
        /// This chunk.
        json: String,
    },
    /// `0x87` — `more: bool, json: str`. One chunk of the ledger JSON.
    Json {
        /// Another chunk follows.
        more: bool,
        /// This chunk.
        json: String,
    },
    /// `0x88` — `epoch: u64, waiters: u32`. The ledger changed.
    Changed {
        /// The ledger's epoch now.
        epoch: u64,
        /// Threads waiting across all processes.
        waiters: u32,
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
            Request::KindList => 0x0B,
            Request::KindAcquire { .. } => 0x0C,
            Request::KindRelease { .. } => 0x0D,
            Request::KindWatch { .. } => 0x0E,
        }
    }

    /// Whether the broker answers this request (see the module docs).
    pub fn expects_reply(&self) -> bool {
        kind_expects_reply(self.kind())
    }
}

/// Whether the broker answers requests of wire kind `kind`: every kind but
/// the one-way `Report` (0x05) and `KindRelease` (0x0D).
pub fn kind_expects_reply(kind: u16) -> bool {
    !matches!(kind, 0x05 | 0x0D)
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
    /// Unknown kind.
    #[error("unknown message kind 0x{0:02x}")]
    Kind(u16),
    /// The body did not decode.
    #[error("message kind 0x{kind:02x}: {err}")]
    Body {
        /// The kind.
        kind: u16,
        /// The decode error.
        err: DecodeError,
    },
    /// Too long.
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

fn frame(kind: u16, body: Writer) -> Vec<u8> {
    let body = body.into_bytes();
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Splits a datagram into (kind, body) after checking the header.
fn unframe(buf: &[u8]) -> Result<(u16, &[u8]), FrameError> {
    if buf.len() > MAX_MESSAGE {
        return Err(FrameError::Oversized(buf.len()));
    }
    if buf.len() < HEADER_LEN {
        return Err(FrameError::Frame(format!(
            "{} bytes is shorter than the {HEADER_LEN}-byte header",
            buf.len()
        )));
    }
    let u16_at = |i: usize| u16::from_le_bytes([buf[i], buf[i + 1]]);
    let magic = u16_at(0);
    if magic != MAGIC {
        return Err(FrameError::Magic(magic));
    }
    let version = u16_at(2);
    if version != PROTOCOL_VERSION {
        return Err(FrameError::Version { got: version });
    }
    let kind = u16_at(4);
    if u16_at(6) != 0 {
        return Err(FrameError::Frame("reserved flags are not zero".into()));
    }
    let len = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    if len != buf.len() - HEADER_LEN {
        return Err(FrameError::Frame(format!(
            "header says {len} body bytes but {} arrived",
            buf.len() - HEADER_LEN
        )));
    }
    Ok((kind, &buf[HEADER_LEN..]))
}

fn put_items(w: &mut Writer, items: &[LedgerItem]) {
    let n = items.len().min(crate::wire::MAX_LIST);
    w.u16(n as u16);
    for i in &items[..n] {
        w.str(&i.kind).u32(i.dev).f64(i.amount).bool(i.shared);
    }
}

fn get_items(r: &mut Reader<'_>) -> Result<Vec<LedgerItem>, DecodeError> {
    let n = r.u16("items")? as usize;
    if n > crate::wire::MAX_LIST {
        return Err(DecodeError::Malformed {
            field: "items",
            detail: format!("{n} items"),
        });
    }
    (0..n)
        .map(|_| {
            Ok(LedgerItem {
                kind: r.str("item.kind")?,
                dev: r.u32("item.dev")?,
                amount: r.f64("item.amount")?,
                shared: r.bool("item.shared")?,
            })
        })
        .collect()
}

fn put_spec(w: &mut Writer, s: &SpecWire) {
    w.u32(s.min)
        .u32(s.max)
        .u32(s.weight)
        .bool(s.exclusive)
        .u8(s.placement as u8);
}

fn get_spec(r: &mut Reader<'_>) -> Result<SpecWire, DecodeError> {
    let min = r.u32("spec.min")?;
    let max = r.u32("spec.max")?;
    let weight = r.u32("spec.weight")?;
    let exclusive = r.bool("spec.exclusive")?;
    let code = r.u8("spec.placement")?;
    let placement = PlacementWire::from_code(code).ok_or_else(|| DecodeError::Malformed {
        field: "spec.placement",
        detail: format!("unknown placement code {code}"),
    })?;
    Ok(SpecWire {
        min,
        max,
        weight,
        exclusive,
        placement,
    })
}

impl Request {
    /// Encodes as one datagram.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Request::Hello { client } => {
                w.str(client);
            }
            Request::Register {
                name,
                spec,
                wait,
                members,
            } => {
                w.str(name);
                put_spec(&mut w, spec);
                w.bool(*wait).u32_list(members);
            }
            Request::Rejoin { cell, token } => {
                w.u64(*cell).u64(*token);
            }
            Request::AddMember { cell, pid } => {
                w.u64(*cell).u32(*pid);
            }
            Request::Report {
                cell,
                busy,
                wanted,
                progress,
            } => {
                w.u64(*cell).u32(*busy).u32(*wanted).u64(*progress);
            }
            Request::UpdateSpec { cell, spec } => {
                w.u64(*cell);
                put_spec(&mut w, spec);
            }
            Request::Release { cell } => {
                w.u64(*cell);
            }
            Request::Status | Request::Shutdown | Request::KindList => {}
            Request::KindDefine { name, devices } => {
                w.str(name);
                let n = devices.len().min(crate::wire::MAX_LIST);
                w.u16(n as u16);
                for d in &devices[..n] {
                    w.str(&d.name).f64(d.min).f64(d.max);
                }
            }
            Request::KindAcquire { items } | Request::KindRelease { items } => {
                put_items(&mut w, items)
            }
            Request::KindWatch { epoch, waiting } => {
                w.u64(*epoch).u32(*waiting);
            }
        }
        frame(self.kind(), w)
    }

    /// Decodes one datagram. Never panics, whatever the bytes.
    pub fn decode(buf: &[u8]) -> Result<Request, FrameError> {
        let (kind, body) = unframe(buf)?;
        if !(0x01..=0x0E).contains(&kind) {
            return Err(FrameError::Kind(kind));
        }
        let mut r = Reader::new(body);
        let req =
            Request::decode_body(kind, &mut r).map_err(|err| FrameError::Body { kind, err })?;
        r.finish().map_err(|err| FrameError::Body { kind, err })?;
        Ok(req)
    }

    fn decode_body(kind: u16, r: &mut Reader<'_>) -> Result<Request, DecodeError> {
        Ok(match kind {
            0x01 => Request::Hello {
                client: r.str("client")?,
            },
            0x02 => Request::Register {
                name: r.str("name")?,
                spec: get_spec(r)?,
                wait: r.bool("wait")?,
                members: r.u32_list("members")?,
            },
            0x03 => Request::Rejoin {
                cell: r.u64("cell")?,
                token: r.u64("token")?,
            },
            0x04 => Request::AddMember {
                cell: r.u64("cell")?,
                pid: r.u32("pid")?,
            },
            0x05 => Request::Report {
                cell: r.u64("cell")?,
                busy: r.u32("busy")?,
                wanted: r.u32("wanted")?,
                progress: r.u64("progress")?,
            },
            0x06 => Request::UpdateSpec {
                cell: r.u64("cell")?,
                spec: get_spec(r)?,
            },
            0x07 => Request::Release {
                cell: r.u64("cell")?,
            },
            0x08 => Request::Status,
            0x09 => Request::Shutdown,
            0x0A => {
                let name = r.str("name")?;
                let n = r.u16("devices")? as usize;
                if n > crate::wire::MAX_LIST {
                    return Err(DecodeError::Malformed {
                        field: "devices",
                        detail: format!("{n} devices"),
                    });
                }
                let devices = (0..n)
                    .map(|_| {
                        Ok(DeviceDef {
                            name: r.str("device.name")?,
                            min: r.f64("device.min")?,
                            max: r.f64("device.max")?,
                        })
                    })
                    .collect::<Result<_, DecodeError>>()?;
                Request::KindDefine { name, devices }
            }
            0x0B => Request::KindList,
            0x0C => Request::KindAcquire {
                items: get_items(r)?,
            },
            0x0D => Request::KindRelease {
                items: get_items(r)?,
            },
            _ => Request::KindWatch {
                epoch: r.u64("epoch")?,
                waiting: r.u32("waiting")?,
            },
        })
    }
}

impl Reply {
    /// Encodes as one datagram.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Reply::Welcome {
                broker_pid,
                instance,
                backend,
                machine,
                cpus,
            } => {
                w.u32(*broker_pid)
                    .u64(*instance)
                    .str(backend)
                    .str(machine)
                    .u32(*cpus);
            }
            Reply::Registered {
                cell,
                token,
                generation,
            } => {
                w.u64(*cell).u64(*token).u64(*generation);
            }
            Reply::Queued {
                cell,
                position,
                reason,
            } => {
                w.u64(*cell).u32(*position).str(reason);
            }
            Reply::Ok => {}
            Reply::Error {
                code,
                request,
                message,
            } => {
                w.u16(*code as u16).u16(*request).str(message);
            }
            Reply::Status { more, json } | Reply::Json { more, json } => {
                w.bool(*more).str(json);
            }
            Reply::Changed { epoch, waiters } => {
                w.u64(*epoch).u32(*waiters);
            }
        }
        frame(self.kind(), w)
    }

    /// Decodes one datagram. Never panics, whatever the bytes.
    pub fn decode(buf: &[u8]) -> Result<Reply, FrameError> {
        let (kind, body) = unframe(buf)?;
        if !(0x81..=0x88).contains(&kind) {
            return Err(FrameError::Kind(kind));
        }
        let mut r = Reader::new(body);
        let rep = Reply::decode_body(kind, &mut r).map_err(|err| FrameError::Body { kind, err })?;
        r.finish().map_err(|err| FrameError::Body { kind, err })?;
        Ok(rep)
    }

    fn decode_body(kind: u16, r: &mut Reader<'_>) -> Result<Reply, DecodeError> {
        Ok(match kind {
            0x81 => Reply::Welcome {
                broker_pid: r.u32("broker_pid")?,
                instance: r.u64("instance")?,
                backend: r.str("backend")?,
                machine: r.str("machine")?,
                cpus: r.u32("cpus")?,
            },
            0x82 => Reply::Registered {
                cell: r.u64("cell")?,
                token: r.u64("token")?,
                generation: r.u64("generation")?,
            },
            0x83 => Reply::Queued {
                cell: r.u64("cell")?,
                position: r.u32("position")?,
                reason: r.str("reason")?,
            },
            0x84 => Reply::Ok,
            0x85 => {
                let raw = r.u16("code")?;
                let code = ErrorCode::from_u16(raw).ok_or_else(|| DecodeError::Malformed {
                    field: "code",
                    detail: format!("unknown error code {raw}"),
                })?;
                Reply::Error {
                    code,
                    request: r.u16("request")?,
                    message: r.str("message")?,
                }
            }
            0x86 => Reply::Status {
                more: r.bool("more")?,
                json: r.str("json")?,
            },
            0x87 => Reply::Json {
                more: r.bool("more")?,
                json: r.str("json")?,
            },
            _ => Reply::Changed {
                epoch: r.u64("epoch")?,
                waiters: r.u32("waiters")?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn requests() -> Vec<Request> {
        vec![
            Request::Hello {
                client: "test ✓".into(),
            },
            Request::Register {
                name: "make".into(),
                spec: SpecWire {
                    min: 1,
                    max: 4,
                    weight: 2,
                    exclusive: true,
                    placement: PlacementWire::Numa,
                },
                wait: true,
                members: vec![1, 2, 3],
            },
            Request::Rejoin {
                cell: 7,
                token: u64::MAX,
            },
            Request::AddMember { cell: 7, pid: 42 },
            Request::Report {
                cell: 7,
                busy: 3,
                wanted: 4,
                progress: 99,
            },
            Request::UpdateSpec {
                cell: 1,
                spec: SpecWire::default(),
            },
            Request::Release { cell: 9 },
            Request::Status,
            Request::Shutdown,
            Request::KindDefine {
                name: "StrongCore".into(),
                devices: vec![DeviceDef {
                    name: "0".into(),
                    min: 0.0,
                    max: 2.0,
                }],
            },
            Request::KindList,
            Request::KindAcquire {
                items: vec![LedgerItem {
                    kind: "cpu".into(),
                    dev: 1,
                    amount: 0.5,
                    shared: true,
                }],
            },
            Request::KindRelease {
                items: vec![LedgerItem {
                    kind: "cpu".into(),
                    dev: 1,
                    amount: 0.5,
                    shared: false,
                }],
            },
            Request::KindWatch {
                epoch: 9,
                waiting: 2,
            },
        ]
    }

    #[test]
    fn requests_roundtrip() {
        for r in requests() {
            assert_eq!(Request::decode(&r.encode()), Ok(r.clone()), "{r:?}");
        }
    }

    #[test]
    fn replies_roundtrip() {
        for r in [
            Reply::Welcome {
                broker_pid: 1,
                instance: 2,
                backend: "cgroup1".into(),
                machine: "m".into(),
                cpus: 2,
            },
            Reply::Registered {
                cell: 1,
                token: 2,
                generation: 3,
            },
            Reply::Queued {
                cell: 1,
                position: 2,
                reason: "busy".into(),
            },
            Reply::Ok,
            Reply::error(ErrorCode::Refused, 2, "no"),
            Reply::Status {
                more: true,
                json: "{}".into(),
            },
            Reply::Json {
                more: false,
                json: "[]".into(),
            },
            Reply::Changed {
                epoch: 7,
                waiters: 3,
            },
        ] {
            assert_eq!(Reply::decode(&r.encode()), Ok(r.clone()));
        }
    }

    /// Found by the `wire` fuzz target: an error reply with a code this
    /// version does not define decoded as `Internal` and re-encoded as 10.
    #[test]
    fn fuzz_unknown_error_codes_are_malformed_not_rewritten() {
        let crash =
            b"\x10\xa1\x03\x00\x85\x00\x00\x00\x12\x00\x00\x00\x7e\x00\x02\x00\x0c\x00limits.cells";
        assert!(matches!(
            Reply::decode(crash),
            Err(FrameError::Body {
                kind: 0x85,
                err: DecodeError::Malformed { field: "code", .. }
            })
        ));
        for code in 1..=12u16 {
            let c = ErrorCode::from_u16(code).expect("defined");
            assert_eq!(c as u16, code);
        }
        assert_eq!(ErrorCode::from_u16(0), None);
        assert_eq!(ErrorCode::from_u16(13), None);
    }

    #[test]
    fn every_kind_is_covered_by_the_roundtrip_tests() {
        let mut kinds: Vec<u16> = requests().iter().map(Request::kind).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds, (0x01..=0x0E).collect::<Vec<u16>>());
    }

    #[test]
    fn only_reports_and_releases_are_one_way() {
        let one_way: Vec<u16> = requests()
            .iter()
            .filter(|r| !r.expects_reply())
            .map(Request::kind)
            .collect();
        assert_eq!(one_way, vec![0x05, 0x0D]);
    }

    #[test]
    fn non_finite_amounts_are_malformed() {
        let mut m = Request::KindAcquire {
            items: vec![LedgerItem {
                kind: "cpu".into(),
                dev: 0,
                amount: 1.0,
                shared: false,
            }],
        }
        .encode();
        let at = m.len() - 9;
        m[at..at + 8].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
        assert!(matches!(
            Request::decode(&m),
            Err(FrameError::Body {
                err: DecodeError::Malformed { .. },
                ..
            })
        ));
    }

    #[test]
    fn header_errors_are_specific() {
        let mut m = Request::Status.encode();
        m[2] = 99;
        assert!(matches!(
            Request::decode(&m),
            Err(FrameError::Version { got: 99 })
        ));
        assert_eq!(
            FrameError::Version { got: 99 }.code(),
            ErrorCode::UnsupportedVersion
        );
        let mut m = Request::Status.encode();
        m[0] = 0;
        assert!(matches!(Request::decode(&m), Err(FrameError::Magic(_))));
        let mut m = Request::Status.encode();
        m[4] = 0x70;
        assert_eq!(Request::decode(&m), Err(FrameError::Kind(0x70)));
        assert!(matches!(
            Request::decode(&[1, 2, 3]),
            Err(FrameError::Frame(_))
        ));
        let big = vec![0u8; MAX_MESSAGE + 1];
        assert_eq!(
            Request::decode(&big),
            Err(FrameError::Oversized(MAX_MESSAGE + 1))
        );
        // Truncated body: header length patched to match, body short.
        let full = Request::Release { cell: 9 }.encode();
        let mut cut = full[..full.len() - 3].to_vec();
        let n = (cut.len() - HEADER_LEN) as u32;
        cut[8..12].copy_from_slice(&n.to_le_bytes());
        assert!(matches!(
            Request::decode(&cut),
            Err(FrameError::Body {
                kind: 0x07,
                err: DecodeError::Truncated(_)
            })
        ));
        // Trailing bytes.
        let mut long = full.clone();
        long.push(0);
        let n = (long.len() - HEADER_LEN) as u32;
        long[8..12].copy_from_slice(&n.to_le_bytes());
        assert!(matches!(
            Request::decode(&long),
            Err(FrameError::Body {
                err: DecodeError::Trailing(1),
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = Request::decode(&bytes);
            let _ = Reply::decode(&bytes);
        }

        #[test]
        fn decoder_survives_valid_headers_with_random_bodies(kind in 0u16..0x100, body in prop::collection::vec(any::<u8>(), 0..120)) {
            let mut m = Vec::new();
            m.extend_from_slice(&MAGIC.to_le_bytes());
            m.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
            m.extend_from_slice(&kind.to_le_bytes());
            m.extend_from_slice(&0u16.to_le_bytes());
            m.extend_from_slice(&(body.len() as u32).to_le_bytes());
            m.extend_from_slice(&body);
            if let Ok(r) = Request::decode(&m) {
                // Whatever decodes re-encodes to the same bytes.
                prop_assert_eq!(r.encode(), m.clone());
            }
            if let Ok(r) = Reply::decode(&m) {
                prop_assert_eq!(r.encode(), m);
            }
        }

        /// A body cut short, with the header's length patched to match (so
        /// the frame check passes and the body decoder itself must notice).
        #[test]
        fn every_truncated_body_is_an_error(i in 0usize..14, cut in 0usize..64) {
            let m = requests()[i].encode();
            let body = m.len() - HEADER_LEN;
            prop_assume!(cut < body);
            let mut short = m[..HEADER_LEN + cut].to_vec();
            short[8..12].copy_from_slice(&(cut as u32).to_le_bytes());
            match Request::decode(&short) {
                Err(FrameError::Body { kind, err: DecodeError::Truncated(_) }) => {
                    prop_assert_eq!(kind, requests()[i].kind());
                }
                other => prop_assert!(false, "cut {} of {:?}: {:?}", cut, requests()[i], other),
            }
        }

        /// A datagram cut anywhere without fixing the header is refused by
        /// the frame check.
        #[test]
        fn every_truncated_datagram_is_an_error(i in 0usize..14, cut in 0usize..64) {
            let m = requests()[i].encode();
            prop_assume!(cut < m.len());
            prop_assert!(Request::decode(&m[..cut]).is_err());
        }
    }
}
