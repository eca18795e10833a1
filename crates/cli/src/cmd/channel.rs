//! `allot channel`: send and receive on a named channel from a shell.
//!
//! `allot channel send NAME` sends each line of its standard input as one
//! message (without the newline); `allot channel recv NAME` prints each
//! message as a line. Both hold their end through their connection to the
//! broker (an `allot_client::ChannelKeeper`, which hands the end back to a
//! restarted broker), so when either exits — or is killed — the broker
//! tells the other side (`recv` then ends once it has printed what was
//! sent).

use allot_client::channel::{Full, RecvError};
use allot_client::{ChannelEnd, ChannelKeeper};
use allot_proto::window::monotonic_ns;
use anyhow::{Context, bail};
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// Arguments of `allot channel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
    /// Broker socket [default: $ALLOT_SOCKET or the per-user default].
    #[arg(long, value_name = "PATH", global = true)]
    socket: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Send each line of standard input as one message.
    Send {
        /// The channel (created if it does not exist).
        name: String,
        /// Slots of a channel this creates (0: the broker's default, 64).
        #[arg(long, default_value_t = 0)]
        slots: u32,
        /// Longest message of a channel this creates, bytes (0: the
        /// broker's default, 4080).
        #[arg(long, default_value_t = 0, value_name = "BYTES")]
        message_max: u32,
        /// Fail on a full channel instead of waiting for room.
        #[arg(long)]
        no_wait: bool,
        /// Use the end `allot run --channel NAME:send` passed to this
        /// process instead of opening one.
        #[arg(long)]
        inherited: bool,
    },
    /// Send COUNT timestamps ("ping NS", CLOCK_MONOTONIC), one every
    /// EVERY ms: with `recv --latency`, what a message takes to be seen
    /// (for a message-triggered receiver, its activation latency).
    Ping {
        /// The channel (created if it does not exist).
        name: String,
        /// Messages to send.
        #[arg(long, default_value_t = 10)]
        count: u32,
        /// Milliseconds between them.
        #[arg(long, default_value_t = 500, value_name = "MS")]
        every: u64,
    },
    /// Print each message as a line, until every sender is gone.
    Recv {
        /// The channel (created if it does not exist).
        name: String,
        /// Stop after this many messages.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Slots of a channel this creates (0: the broker's default).
        #[arg(long, default_value_t = 0)]
        slots: u32,
        /// Longest message of a channel this creates (0: the default).
        #[arg(long, default_value_t = 0, value_name = "BYTES")]
        message_max: u32,
        /// Use the end `allot run --channel NAME:recv` passed to this
        /// process instead of opening one.
        #[arg(long)]
        inherited: bool,
        /// For "ping NS" messages (`allot channel ping`), print the
        /// microseconds from their sending to their receipt instead.
        #[arg(long)]
        latency: bool,
    },
}

pub fn run(a: Args) -> i32 {
    let socket = a.socket.unwrap_or_else(allot_proto::default_socket_path);
    match serve(&socket, a.what) {
        Ok(()) => 0,
        Err(e) => super::fail(e),
    }
}

fn connect(socket: &std::path::Path) -> anyhow::Result<ChannelKeeper> {
    ChannelKeeper::connect(socket).with_context(|| {
        format!(
            "cannot reach a broker on {} (start one with `allot daemon`)",
            socket.display()
        )
    })
}

fn serve(socket: &std::path::Path, what: What) -> anyhow::Result<()> {
    // An inherited end is held by `allot run`'s connection; none here.
    let inherited = matches!(
        what,
        What::Send {
            inherited: true,
            ..
        } | What::Recv {
            inherited: true,
            ..
        }
    );
    let mut client = if inherited {
        None
    } else {
        Some(connect(socket)?)
    };
    match what {
        What::Send {
            name,
            slots,
            message_max,
            no_wait,
            ..
        } => {
            let tx = match &mut client {
                Some(c) => c.sender(&name, slots, message_max),
                None => allot_client::inherited::sender(&name),
            }
            .with_context(|| format!("cannot open channel {name} to send"))?;
            let full = if no_wait { Full::Fail } else { Full::Wait };
            for line in std::io::stdin().lock().lines() {
                let line = line.context("reading standard input")?;
                tx.send(line.as_bytes(), full)
                    .with_context(|| format!("sending on channel {name}"))?;
            }
            if let Some(c) = &mut client {
                c.close(&name, ChannelEnd::Send)?;
            }
            Ok(())
        }
        What::Ping { name, count, every } => {
            let c = client.as_mut().expect("ping opens its own end");
            let tx = c
                .sender(&name, 0, 0)
                .with_context(|| format!("cannot open channel {name} to send"))?;
            for i in 0..count {
                if i > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(every));
                }
                tx.send(format!("ping {}", monotonic_ns()).as_bytes(), Full::Wait)
                    .with_context(|| format!("sending on channel {name}"))?;
            }
            c.close(&name, ChannelEnd::Send)?;
            Ok(())
        }
        What::Recv {
            name,
            count,
            slots,
            message_max,
            latency,
            ..
        } => {
            let mut rx = match &mut client {
                Some(c) => c.receiver(&name, slots, message_max),
                None => allot_client::inherited::receiver(&name),
            }
            .with_context(|| format!("cannot open channel {name} to receive"))?;
            let mut out = std::io::stdout().lock();
            let mut buf = Vec::new();
            let mut got = 0u64;
            while count.is_none_or(|c| got < c) {
                match rx.recv(&mut buf, None) {
                    Ok(()) => {
                        let now = monotonic_ns();
                        let sent = std::str::from_utf8(&buf)
                            .ok()
                            .and_then(|t| t.strip_prefix("ping "))
                            .and_then(|n| n.parse::<u64>().ok());
                        match sent {
                            Some(ns) if latency => {
                                writeln!(out, "{:.1}", now.saturating_sub(ns) as f64 / 1e3)?
                            }
                            _ => {
                                out.write_all(&buf)?;
                                out.write_all(b"\n")?;
                            }
                        }
                        out.flush()?;
                        got += 1;
                    }
                    Err(RecvError::Disconnected) => break,
                    Err(e) => bail!("receiving on channel {name}: {e}"),
                }
            }
            if let Some(c) = &mut client {
                c.close(&name, ChannelEnd::Receive)?;
            }
            Ok(())
        }
    }
}
