//! Encoding and decoding of the messages in [`super`]: the 12-byte header
//! ([`frame`], [`unframe`]) and each body, field by field in the order the
//! variants' docs list. Decoding never panics and never allocates more
//! than its input's length (the `wire` fuzz target and the property tests
//! in `tests.rs` check it).

use super::*;
use crate::wire::{DecodeError, Reader, Writer};

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

fn put_spec(w: &mut Writer, s: &CellSpec) {
    w.u32(s.min)
        .u32(s.max)
        .u32(s.weight)
        .bool(s.exclusive)
        .u8(s.placement.code());
    let (kind, a, b) = spec::time_fields(s.time);
    w.u8(kind).u32(a).u32(b);
    let (kind, value) = spec::goal_fields(s.goal);
    w.u8(kind).u64(value);
    w.u64(s.memory.min).u64(s.memory.max);
    w.u32(s.cache.ways).u32(s.cache.bandwidth);
}

fn get_goal(r: &mut Reader<'_>) -> Result<Goal, DecodeError> {
    let kind = r.u8("spec.goal.kind")?;
    let value = r.u64("spec.goal.value")?;
    spec::goal_from_fields(kind, value).ok_or_else(|| DecodeError::Malformed {
        field: "spec.goal.kind",
        detail: format!("unknown goal {kind} (or a value it cannot carry: {value})"),
    })
}

fn get_spec(r: &mut Reader<'_>) -> Result<CellSpec, DecodeError> {
    let min = r.u32("spec.min")?;
    let max = r.u32("spec.max")?;
    let weight = r.u32("spec.weight")?;
    let exclusive = r.bool("spec.exclusive")?;
    let code = r.u8("spec.placement")?;
    let placement = Placement::from_code(code).ok_or_else(|| DecodeError::Malformed {
        field: "spec.placement",
        detail: format!("unknown placement code {code}"),
    })?;
    let kind = r.u8("spec.time.kind")?;
    let a = r.u32("spec.time.a")?;
    let b = r.u32("spec.time.b")?;
    let time = spec::time_from_fields(kind, a, b).ok_or_else(|| DecodeError::Malformed {
        field: "spec.time.kind",
        detail: format!("unknown time contract {kind} (or a field it does not use is not 0)"),
    })?;
    let goal = get_goal(r)?;
    let memory = allot_spec::Memory {
        min: r.u64("spec.memory.min")?,
        max: r.u64("spec.memory.max")?,
    };
    let cache = allot_spec::Cache {
        ways: r.u32("spec.cache.ways")?,
        bandwidth: r.u32("spec.cache.bandwidth")?,
    };
    Ok(CellSpec {
        min,
        max,
        weight,
        exclusive,
        placement,
        time,
        goal,
        memory,
        cache,
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
                joins_itself,
            } => {
                w.str(name);
                put_spec(&mut w, spec);
                w.bool(*wait).u32_list(members).bool(*joins_itself);
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
            Request::SetMemory { cell, memory } => {
                w.u64(*cell).u64(memory.min).u64(memory.max);
            }
            Request::SetCache { cell, cache } => {
                w.u64(*cell).u32(cache.ways).u32(cache.bandwidth);
            }
            Request::IncludeGroup { cell, token, dir } => {
                w.u64(*cell).u64(*token).str(dir);
            }
            Request::SetGoal { cell, goal } => {
                let (kind, value) = spec::goal_fields(*goal);
                w.u64(*cell).u8(kind).u64(value);
            }
            Request::Release { cell } => {
                w.u64(*cell);
            }
            Request::Status | Request::Shutdown => {}
            Request::KindList { kind } => {
                w.str(kind);
            }
            Request::KindDefine { name, devices } => {
                w.str(name);
                let n = devices.len().min(crate::wire::MAX_LIST);
                w.u16(n as u16);
                for d in &devices[..n] {
                    w.str(&d.name).f64(d.min).f64(d.max);
                }
            }
            Request::KindAcquire {
                items,
                place,
                holding,
                any_device,
            } => {
                put_items(&mut w, items);
                w.u64(*place).bool(*holding).bool(*any_device);
            }
            Request::KindRelease { items } => put_items(&mut w, items),
            Request::KindLeave { place } => {
                w.u64(*place);
            }
            Request::KindGather {
                arrival,
                window_us,
                sent_ns,
            } => {
                w.u64(*arrival).u32(*window_us).u64(*sent_ns);
            }
            Request::KindChosen { arrival } => {
                w.u64(*arrival);
            }
            Request::KindWatch { epoch, waiting } => {
                w.u64(*epoch).u32(*waiting);
            }
            Request::ChannelOpen {
                name,
                send,
                slots,
                message_max,
            } => {
                w.str(name).bool(*send).u32(*slots).u32(*message_max);
            }
            Request::ChannelClose { name, send } | Request::ChannelRejoin { name, send } => {
                w.str(name).bool(*send);
            }
            Request::PoolStats { cell, stats: s } => {
                w.u64(*cell).u32(s.workers);
                for v in [
                    s.tasks_run,
                    s.tasks_created,
                    s.tasks_stolen,
                    s.tasks_migrated,
                    s.tasks_suspended,
                    s.tasks_resumed,
                    s.yields,
                    s.ns_awake,
                    s.ns_asleep,
                    s.queue_high_water,
                ] {
                    w.u64(v);
                }
            }
        }
        frame(self.kind(), w)
    }

    /// Decodes one datagram. Never panics, whatever the bytes.
    pub fn decode(buf: &[u8]) -> Result<Request, FrameError> {
        let (kind, body) = unframe(buf)?;
        if !(0x01..=0x19).contains(&kind) {
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
                joins_itself: r.bool("joins_itself")?,
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
            0x0B => Request::KindList {
                kind: r.str("kind")?,
            },
            0x0C => Request::KindAcquire {
                items: get_items(r)?,
                place: r.u64("place")?,
                holding: r.bool("holding")?,
                any_device: r.bool("any_device")?,
            },
            0x0D => Request::KindRelease {
                items: get_items(r)?,
            },
            0x0E => Request::KindWatch {
                epoch: r.u64("epoch")?,
                waiting: r.u32("waiting")?,
            },
            0x11 => Request::ChannelOpen {
                name: r.str("name")?,
                send: r.bool("send")?,
                slots: r.u32("slots")?,
                message_max: r.u32("message_max")?,
            },
            0x12 => Request::ChannelClose {
                name: r.str("name")?,
                send: r.bool("send")?,
            },
            0x13 => Request::ChannelRejoin {
                name: r.str("name")?,
                send: r.bool("send")?,
            },
            0x17 => Request::KindLeave {
                place: r.u64("place")?,
            },
            0x18 => Request::KindGather {
                arrival: r.u64("arrival")?,
                window_us: r.u32("window_us")?,
                sent_ns: r.u64("sent_ns")?,
            },
            0x19 => Request::KindChosen {
                arrival: r.u64("arrival")?,
            },
            0x16 => Request::IncludeGroup {
                cell: r.u64("cell")?,
                token: r.u64("token")?,
                dir: r.str("dir")?,
            },
            0x15 => Request::SetCache {
                cell: r.u64("cell")?,
                cache: allot_spec::Cache {
                    ways: r.u32("cache.ways")?,
                    bandwidth: r.u32("cache.bandwidth")?,
                },
            },
            0x14 => Request::SetMemory {
                cell: r.u64("cell")?,
                memory: allot_spec::Memory {
                    min: r.u64("memory.min")?,
                    max: r.u64("memory.max")?,
                },
            },
            0x10 => {
                let cell = r.u64("cell")?;
                Request::SetGoal {
                    cell,
                    goal: get_goal(r)?,
                }
            }
            _ => Request::PoolStats {
                cell: r.u64("cell")?,
                stats: PoolStatsWire {
                    workers: r.u32("workers")?,
                    tasks_run: r.u64("tasks_run")?,
                    tasks_created: r.u64("tasks_created")?,
                    tasks_stolen: r.u64("tasks_stolen")?,
                    tasks_migrated: r.u64("tasks_migrated")?,
                    tasks_suspended: r.u64("tasks_suspended")?,
                    tasks_resumed: r.u64("tasks_resumed")?,
                    yields: r.u64("yields")?,
                    ns_awake: r.u64("ns_awake")?,
                    ns_asleep: r.u64("ns_asleep")?,
                    queue_high_water: r.u64("queue_high_water")?,
                },
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
            Reply::Changed {
                epoch,
                waiters,
                due,
            } => {
                w.u64(*epoch).u32(*waiters);
                let n = due.len().min(crate::wire::MAX_LIST);
                w.u16(n as u16);
                for d in &due[..n] {
                    w.u64(d.place);
                    put_items(&mut w, &d.free);
                }
            }
            Reply::Channel { slots, message_max } => {
                w.u32(*slots).u32(*message_max);
            }
            Reply::InLine { ahead, free } => {
                w.u32(*ahead);
                put_items(&mut w, free);
            }
            Reply::Gathered { arrival, others } => {
                w.u64(*arrival).u32(*others);
            }
        }
        frame(self.kind(), w)
    }

    /// Decodes one datagram. Never panics, whatever the bytes.
    pub fn decode(buf: &[u8]) -> Result<Reply, FrameError> {
        let (kind, body) = unframe(buf)?;
        if !(0x81..=0x8B).contains(&kind) {
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
            0x89 => Reply::Channel {
                slots: r.u32("slots")?,
                message_max: r.u32("message_max")?,
            },
            0x8A => Reply::InLine {
                ahead: r.u32("ahead")?,
                free: get_items(r)?,
            },
            0x8B => Reply::Gathered {
                arrival: r.u64("arrival")?,
                others: r.u32("others")?,
            },
            _ => Reply::Changed {
                epoch: r.u64("epoch")?,
                waiters: r.u32("waiters")?,
                due: {
                    let n = r.u16("due")? as usize;
                    if n > crate::wire::MAX_LIST {
                        return Err(DecodeError::Malformed {
                            field: "due",
                            detail: format!("{n} places"),
                        });
                    }
                    (0..n)
                        .map(|_| {
                            Ok(DuePlace {
                                place: r.u64("due.place")?,
                                free: get_items(r)?,
                            })
                        })
                        .collect::<Result<_, DecodeError>>()?
                },
            },
        })
    }
}
