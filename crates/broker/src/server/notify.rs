//! The service manager's notification protocol (systemd's `sd_notify`,
//! spoken directly: one datagram per state change on the socket named in
//! `NOTIFY_SOCKET`), so the broker can run as a `Type=notify` service:
//!
//! - `READY=1` once the socket serves and the journal's cells are adopted
//!   (a client that connects after that is served by this broker);
//! - `STATUS=…` a line `systemctl status` shows (cells and backend);
//! - `WATCHDOG=1` at half the interval in `WATCHDOG_USEC` (when
//!   `WATCHDOG_PID` is unset or names this process), from the event
//!   loop's tick, so a loop that stops turning is restarted;
//! - `STOPPING=1` when the loop ends.
//!
//! Without `NOTIFY_SOCKET` every call does nothing. A send that fails is
//! dropped: the manager's absence never stops the broker.

use rustix::fd::OwnedFd;
use rustix::net::{AddressFamily, SendFlags, SocketAddrUnix, SocketFlags, SocketType};
use std::time::{Duration, Instant};

/// Where notifications go, and the watchdog's rhythm.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    target: Option<(OwnedFd, SocketAddrUnix)>,
    /// Half the manager's watchdog interval (`None`: no watchdog).
    every: Option<Duration>,
    last: Option<Instant>,
}

/// The address `NOTIFY_SOCKET` names: a path, or (leading `@`) a name in
/// the abstract namespace.
fn address(value: &str) -> Option<SocketAddrUnix> {
    match value.strip_prefix('@') {
        Some(name) => SocketAddrUnix::new_abstract_name(name.as_bytes()).ok(),
        None if value.starts_with('/') => SocketAddrUnix::new(value).ok(),
        None => None,
    }
}

/// Half of `WATCHDOG_USEC` when it is meant for process `me`
/// (`WATCHDOG_PID` unset or equal to it).
fn watchdog_every(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if pid.is_some_and(|p| p.trim().parse::<u32>().ok() != Some(me)) {
        return None;
    }
    Some(Duration::from_micros(usec / 2))
}

impl Notifier {
    /// From this process's environment (nothing to do without
    /// `NOTIFY_SOCKET`).
    pub(crate) fn from_env() -> Notifier {
        let var = |k: &str| std::env::var(k).ok();
        let target = var("NOTIFY_SOCKET").and_then(|v| {
            let addr = address(&v)?;
            let fd = rustix::net::socket_with(
                AddressFamily::UNIX,
                SocketType::DGRAM,
                SocketFlags::CLOEXEC,
                None,
            )
            .ok()?;
            Some((fd, addr))
        });
        let every = watchdog_every(
            var("WATCHDOG_USEC").as_deref(),
            var("WATCHDOG_PID").as_deref(),
            std::process::id(),
        );
        Notifier {
            every: every.filter(|_| target.is_some()),
            target,
            last: None,
        }
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines).
    fn send(&self, state: &str) {
        if let Some((fd, addr)) = &self.target {
            let _ = rustix::net::sendto(fd, state.as_bytes(), SendFlags::NOSIGNAL, addr);
        }
    }

    /// The broker serves: `READY=1` with a status line.
    pub(crate) fn ready(&mut self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
        self.last = Some(Instant::now());
    }

    /// The loop ends.
    pub(crate) fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping");
    }

    /// Called on every tick: `WATCHDOG=1` when half the manager's interval
    /// has passed since the last one.
    pub(crate) fn tick(&mut self, now: Instant) {
        let Some(every) = self.every else {
            return;
        };
        if self.last.is_none_or(|t| now.duration_since(t) >= every) {
            self.send("WATCHDOG=1");
            self.last = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_and_the_watchdog_are_read_as_systemd_writes_them() {
        assert!(address("/run/systemd/notify").is_some());
        assert!(address("@/org/freedesktop/systemd1/notify/1").is_some());
        assert!(address("relative/path").is_none());
        assert_eq!(
            watchdog_every(Some("30000000"), None, 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            watchdog_every(Some("30000000"), Some("7"), 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            watchdog_every(Some("30000000"), Some("8"), 7),
            None,
            "another pid's"
        );
        assert_eq!(watchdog_every(Some("0"), None, 7), None);
        assert_eq!(watchdog_every(Some("soon"), None, 7), None);
        assert_eq!(watchdog_every(None, None, 7), None);
    }

    #[test]
    fn states_arrive_as_datagrams_and_the_watchdog_keeps_its_rhythm() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::DGRAM, None).unwrap();
        let mut n = Notifier {
            target: Some((fd, SocketAddrUnix::new(&path).unwrap())),
            every: Some(Duration::from_millis(100)),
            last: None,
        };
        let recv = || {
            let mut b = [0u8; 256];
            let k = rx.recv(&mut b).unwrap();
            String::from_utf8_lossy(&b[..k]).into_owned()
        };
        let t0 = Instant::now();
        n.ready("2 cells");
        assert_eq!(recv(), "READY=1\nSTATUS=2 cells");
        n.tick(t0 + Duration::from_millis(50));
        n.tick(t0 + Duration::from_millis(150));
        assert_eq!(
            recv(),
            "WATCHDOG=1",
            "one, at the first tick past the interval"
        );
        n.stopping();
        assert_eq!(
            recv(),
            "STOPPING=1\nSTATUS=stopping",
            "and nothing in between"
        );
        // No socket: nothing happens, nothing fails.
        let mut quiet = Notifier::default();
        quiet.ready("x");
        quiet.tick(Instant::now());
        quiet.stopping();
    }
}
