//! `allot_channel_*`: named channels from C (`include/allot/channel.h`),
//! over `allot_channel` and the client's channel requests.
//!
//! A handle owns one end: a sender, or the receiver behind a mutex (one
//! receiving thread at a time). An end opened through the broker keeps its
//! own connection in the handle (a `ChannelKeeper`, which hands the end
//! back to a restarted broker), so the broker counts the end open exactly
//! as long as the handle lives (or the process does).

use super::CHANNELS;
use super::cell::client_error;
use super::status::{Code, Error, Result, entry};
use allot_client::channel::{Full, Receiver, RecvError, SendError, Sender};
use allot_client::{ChannelEnd, ChannelKeeper};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `allot_channel_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelHandle {
    /// Tag, generation and slot; 0 is no channel.
    pub id: u64,
}

/// What a handle holds.
#[derive(Debug)]
pub(crate) enum End {
    Send(Sender),
    Recv(Mutex<Receiver>),
}

/// One open end and, for an end opened here, the connection that holds
/// it open at the broker.
#[derive(Debug)]
pub(crate) struct Entry {
    end: End,
    _conn: Option<ChannelKeeper>,
}

const SEND: c_int = 0;
const RECV: c_int = 1;

fn name_from_c(name: *const c_char) -> Result<String> {
    if name.is_null() {
        return Err(Error::invalid("name is NULL"));
    }
    // SAFETY: non-null and NUL-terminated by the contract.
    let s = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Error::invalid("the channel's name is not UTF-8"))?;
    Ok(s.to_string())
}

fn end_from_c(end: c_int) -> Result<ChannelEnd> {
    match end {
        SEND => Ok(ChannelEnd::Send),
        RECV => Ok(ChannelEnd::Receive),
        e => Err(Error::invalid(format!(
            "end {e}: use ALLOT_CHANNEL_SEND (0) or ALLOT_CHANNEL_RECV (1)"
        ))),
    }
}

fn store(out: *mut ChannelHandle, entry: Entry) -> Result<()> {
    let id = CHANNELS.insert(Arc::new(entry))?;
    // SAFETY: checked non-null by the caller; a valid pointer by contract.
    unsafe { out.write(ChannelHandle { id }) };
    Ok(())
}

/// `int allot_channel_open(const char *name, int end, uint32_t slots,
/// uint32_t message_max, allot_channel_t *out)`.
///
/// # Safety
/// `name` is null or NUL-terminated; `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_channel_open(
    name: *const c_char,
    end: c_int,
    slots: u32,
    message_max: u32,
    out: *mut ChannelHandle,
) -> c_int {
    entry("allot_channel_open", || {
        super::need_out(out, "out")?;
        let name = name_from_c(name)?;
        let which = end_from_c(end)?;
        allot_client::channel::check_name(&name).map_err(Error::invalid)?;
        let conn = ChannelKeeper::connect_default().map_err(client_error)?;
        let ch = conn
            .open(&name, which, slots, message_max)
            .map_err(|e| match e {
                allot_client::ClientError::Broker {
                    code: allot_proto::msg::ErrorCode::Malformed,
                    message,
                } => Error::invalid(message),
                allot_client::ClientError::Broker {
                    code: allot_proto::msg::ErrorCode::Limit,
                    message,
                } => Error::new(Code::Os, message),
                other => client_error(other),
            })?;
        let end = match which {
            ChannelEnd::Send => End::Send(ch.managed_sender()),
            ChannelEnd::Receive => End::Recv(Mutex::new(ch.managed_receiver())),
        };
        store(
            out,
            Entry {
                end,
                _conn: Some(conn),
            },
        )
    })
}

/// `int allot_channel_inherited(const char *name, int end,
/// allot_channel_t *out)`.
///
/// # Safety
/// As [`allot_channel_open`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_channel_inherited(
    name: *const c_char,
    end: c_int,
    out: *mut ChannelHandle,
) -> c_int {
    entry("allot_channel_inherited", || {
        super::need_out(out, "out")?;
        let name = name_from_c(name)?;
        let end = match end_from_c(end)? {
            ChannelEnd::Send => allot_client::inherited::sender(&name).map(End::Send),
            ChannelEnd::Receive => {
                allot_client::inherited::receiver(&name).map(|r| End::Recv(Mutex::new(r)))
            }
        }
        .map_err(|e| match e {
            allot_client::ClientError::Protocol(why) => Error::invalid(why),
            other => client_error(other),
        })?;
        store(out, Entry { end, _conn: None })
    })
}

fn send_error(e: SendError) -> Error {
    match e {
        SendError::Full => Error::new(Code::Timeout, "the channel is full"),
        SendError::TooLong { .. } => Error::invalid(e.to_string()),
        SendError::Disconnected => Error::new(Code::Closed, e.to_string()),
    }
}

/// `int allot_channel_send(allot_channel_t ch, const void *msg, size_t len,
/// int flags)`.
///
/// # Safety
/// `msg` is valid for `len` bytes (or `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_channel_send(
    ch: ChannelHandle,
    msg: *const c_void,
    len: usize,
    flags: c_int,
) -> c_int {
    entry("allot_channel_send", || {
        if msg.is_null() && len > 0 {
            return Err(Error::invalid("msg is NULL"));
        }
        let e = CHANNELS.get(ch.id)?;
        let End::Send(tx) = &e.end else {
            return Err(Error::invalid("a receiving end cannot send"));
        };
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: valid for `len` bytes by the contract.
            unsafe { std::slice::from_raw_parts(msg.cast::<u8>(), len) }
        };
        let full = if flags & 1 != 0 {
            Full::Fail
        } else {
            Full::Wait
        };
        tx.send(bytes, full).map_err(send_error)
    })
}

/// `int allot_channel_recv(allot_channel_t ch, void *buf, size_t cap,
/// size_t *len, int64_t timeout_ns)`.
///
/// # Safety
/// `buf` is valid for `cap` bytes; `len` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_channel_recv(
    ch: ChannelHandle,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    timeout_ns: i64,
) -> c_int {
    entry("allot_channel_recv", || {
        super::need_out(len, "len")?;
        if buf.is_null() && cap > 0 {
            return Err(Error::invalid("buf is NULL"));
        }
        let e = CHANNELS.get(ch.id)?;
        let End::Recv(rx) = &e.end else {
            return Err(Error::invalid("a sending end cannot receive"));
        };
        let mut rx = rx.lock().unwrap_or_else(|p| p.into_inner());
        let out: &mut [u8] = if cap == 0 {
            &mut []
        } else {
            // SAFETY: valid for `cap` bytes by the contract, and not
            // aliased while this call runs.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), cap) }
        };
        let deadline = u64::try_from(timeout_ns)
            .ok()
            .map(|ns| Instant::now() + Duration::from_nanos(ns));
        loop {
            match rx.try_recv_slice(out) {
                Ok(n) => {
                    // SAFETY: checked non-null; valid by the contract.
                    unsafe { len.write(n) };
                    return Ok(());
                }
                Err(RecvError::Empty) => {}
                Err(RecvError::BufferTooSmall { len: n, cap }) => {
                    // SAFETY: as above.
                    unsafe { len.write(n) };
                    return Err(Error::invalid(format!(
                        "the next message has {n} bytes, more than buf's {cap}; it stays in \
                         the channel: receive it into a buffer of {n} bytes"
                    )));
                }
                Err(RecvError::Disconnected) => {
                    return Err(Error::new(Code::Closed, "every sender closed the channel"));
                }
                Err(e @ RecvError::Corrupt { .. }) => {
                    return Err(Error::new(Code::Os, e.to_string()));
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::new(Code::Timeout, "no message came"));
            }
            rx.wait_ready(deadline);
        }
    })
}

/// `int allot_channel_fd(allot_channel_t ch)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_channel_fd(ch: ChannelHandle) -> c_int {
    use std::os::fd::AsRawFd;
    let mut fd = -1;
    let status = entry("allot_channel_fd", || {
        let e = CHANNELS.get(ch.id)?;
        let End::Recv(rx) = &e.end else {
            return Err(Error::invalid("a sending end has no doorbell to poll"));
        };
        fd = rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .fd()
            .as_raw_fd();
        Ok(())
    });
    if status == 0 { fd } else { -1 }
}

/// `int allot_channel_arm(allot_channel_t ch)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_channel_arm(ch: ChannelHandle) -> c_int {
    let mut armed = false;
    let status = entry("allot_channel_arm", || {
        let e = CHANNELS.get(ch.id)?;
        let End::Recv(rx) = &e.end else {
            return Err(Error::invalid("a sending end has no doorbell"));
        };
        armed = rx.lock().unwrap_or_else(|p| p.into_inner()).arm();
        Ok(())
    });
    if status == 0 {
        c_int::from(armed)
    } else {
        -status
    }
}

/// `int allot_channel_close(allot_channel_t ch)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_channel_close(ch: ChannelHandle) -> c_int {
    entry("allot_channel_close", || {
        // The end closes when the last call using it returns: its
        // connection to the broker (which then tells the other side) or,
        // for an inherited end, its count in the channel.
        drop(CHANNELS.remove(ch.id)?);
        Ok(())
    })
}
