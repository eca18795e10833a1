//! `allot channel`: send and receive on a named channel from a shell.
//!
//! `allot channel send NAME` sends each line of its standard input as one
//! message (without the newline); `allot channel recv NAME` prints each
//! message as a line. Both hold their end through their connection to the
//! broker, so when either exits — or is killed — the broker tells the
//! other side (`recv` then ends once it has printed what was sent).

use allot_client::channel::{Full, RecvError};
use allot_client::{ChannelEnd, Client};
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
    },
}

pub fn run(a: Args) -> i32 {
    let socket = a.socket.unwrap_or_else(allot_proto::default_socket_path);
    match serve(&socket, a.what) {
        Ok(()) => 0,
        Err(e) => super::fail(e),
    }
}

fn connect(socket: &std::path::Path) -> anyhow::Result<Client> {
    Client::connect(socket).with_context(|| {
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
                Some(c) => c.channel_sender(&name, slots, message_max),
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
                c.close_channel(&name, ChannelEnd::Send)?;
            }
            Ok(())
        }
        What::Recv {
            name,
            count,
            slots,
            message_max,
            ..
        } => {
            let mut rx = match &mut client {
                Some(c) => c.channel_receiver(&name, slots, message_max),
                None => allot_client::inherited::receiver(&name),
            }
            .with_context(|| format!("cannot open channel {name} to receive"))?;
            let mut out = std::io::stdout().lock();
            let mut buf = Vec::new();
            let mut got = 0u64;
            while count.is_none_or(|c| got < c) {
                match rx.recv(&mut buf, None) {
                    Ok(()) => {
                        out.write_all(&buf)?;
                        out.write_all(b"\n")?;
                        out.flush()?;
                        got += 1;
                    }
                    Err(RecvError::Disconnected) => break,
                    Err(e) => bail!("receiving on channel {name}: {e}"),
                }
            }
            if let Some(c) = &mut client {
                c.close_channel(&name, ChannelEnd::Receive)?;
            }
            Ok(())
        }
    }
}
