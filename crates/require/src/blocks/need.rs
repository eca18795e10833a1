//! What a scope asks for: requests (a device amount or share, or a
//! policy), when each is made, and the errors entering a scope can give.

use super::*;

/// How much of a device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// An absolute amount (1.0 = a whole CPU, bytes for memory, …).
    Abs(f64),
    /// A fraction (0..1) of what is available in the enclosing allocation
    /// when the scope is entered (the paper's `50%` is `Share(0.5)`).
    Share(f64),
}

/// When a request takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timing {
    /// On entering the scope.
    #[default]
    Now,
    /// Just before the scope's first spawned thread is created.
    BeforeSpawn,
    /// Just after the scope's first spawned thread is created.
    AfterSpawn,
    /// Made by each thread spawned in the scope, when it starts.
    ForChild,
    /// Made by every descendant spawned in the scope, when it starts.
    ForDescendants,
}

/// What is requested.
#[derive(Debug, Clone)]
pub enum What {
    /// An amount of one device of a kind.
    Device {
        /// Name of the kind, looked up when the scope is entered.
        kind: String,
        /// Device name or index.
        dev: String,
        /// How much: an absolute amount or a share of what is available.
        amount: Amount,
    },
    /// A policy that chooses the devices and amounts when the scope is entered.
    Policy(Arc<dyn Policy>),
}

/// One request of a `require`.
#[derive(Debug, Clone)]
pub struct Need {
    /// A device amount, or a policy that picks devices.
    pub what: What,
    /// Exclusive (the default), private to the thread, or shared.
    pub own: Ownership,
    /// When the request takes effect (`Timing::Now` by default).
    pub timing: Timing,
}

impl Need {
    /// `kind(dev, amount)`.
    pub fn device(kind: &str, dev: impl ToString, amount: f64) -> Need {
        Need {
            what: What::Device {
                kind: kind.into(),
                dev: dev.to_string(),
                amount: Amount::Abs(amount),
            },
            own: Ownership::Default,
            timing: Timing::Now,
        }
    }
    /// `kind(dev, share%)`: a share of what is available.
    pub fn device_share(kind: &str, dev: impl ToString, share: f64) -> Need {
        Need {
            what: What::Device {
                kind: kind.into(),
                dev: dev.to_string(),
                amount: Amount::Share(share),
            },
            own: Ownership::Default,
            timing: Timing::Now,
        }
    }
    /// A request that runs policy `p`, with the default ownership and timing.
    pub fn policy(p: Arc<dyn Policy>) -> Need {
        Need {
            what: What::Policy(p),
            own: Ownership::Default,
            timing: Timing::Now,
        }
    }
    /// With ownership `own`.
    pub fn owned(mut self, own: Ownership) -> Need {
        self.own = own;
        self
    }
    /// With timing `t`.
    pub fn when(mut self, t: Timing) -> Need {
        self.timing = t;
        self
    }
}

/// Why a require failed.
#[derive(Debug, thiserror::Error)]
pub enum RequireError {
    /// No such kind.
    #[error("{site}: unknown resource kind {kind:?} (known: {known})")]
    UnknownKind {
        /// The kind name as requested.
        kind: String,
        /// Kinds that exist.
        known: String,
        /// Source location of the call that entered the scope.
        site: &'static Location<'static>,
    },
    /// No such device.
    #[error("{site}: resource kind {kind:?} has no device {dev:?} (it has {count})")]
    UnknownDevice {
        /// Name of the kind the device was looked up in.
        kind: String,
        /// The device name or index as requested.
        dev: String,
        /// How many it has.
        count: usize,
        /// Source location of the call that entered the scope.
        site: &'static Location<'static>,
    },
    /// Asked more than the enclosing allocation (a programming error).
    #[error(
        "{site}: requires {asked} of {kind} device {dev} inside a scope that holds {enclosing}: a nested require may not ask for more than its enclosing one"
    )]
    TooLarge {
        /// Name of the device's kind.
        kind: String,
        /// Name of the device.
        dev: String,
        /// The amount asked for, in the kind's unit (a share already resolved).
        asked: f64,
        /// What the enclosing scope holds of the device (0 inside a scope that denied it).
        enclosing: f64,
        /// Source location of the call that entered the scope.
        site: &'static Location<'static>,
    },
    /// A kind that cannot be registered as given.
    #[error("resource kind {0:?} cannot be registered: {1}")]
    BadKind(String, String),
    /// The broker refused a kind's definition (another process defined
    /// the name with other devices, or a limit).
    #[error("resource kind {0:?} cannot be registered: the broker refused it: {1}")]
    KindRefused(String, String),
    /// A non-zero amount on a device whose kind cannot enforce it on this
    /// machine (an I/O weight on a device whose scheduler ignores weights).
    #[error("{site}: {kind} device {dev} cannot be held as asked: {why}")]
    Unenforceable {
        /// Name of the device's kind.
        kind: String,
        /// The device name or index as requested.
        dev: String,
        /// Why, and what to change.
        why: String,
        /// Source location of the call that entered the scope.
        site: &'static Location<'static>,
    },
    /// An amount outside 0..=max, or a share outside 0..=1.
    #[error("{site}: invalid amount {amount} for {kind} device {dev} (0 to {max})")]
    BadAmount {
        /// Name of the device's kind.
        kind: String,
        /// The device name or index as requested.
        dev: String,
        /// The amount asked for (a share resolved against what is available).
        amount: f64,
        /// The largest allocation the device supports, in the kind's unit.
        max: f64,
        /// Source location of the call that entered the scope.
        site: &'static Location<'static>,
    },
    /// A policy that can never be met on this machine did not succeed even
    /// with everything free.
    #[error("{site}: policy {policy} cannot be met on this machine even with every device free")]
    Impossible {
        /// The failing policy's name (`Policy::name`).
        policy: String,
        /// Source location of the call that entered the scope.
        site: &'static Location<'static>,
    },
    /// Registering a kind failed.
    #[error("resource kind {0:?} already exists with other devices")]
    KindExists(String),
}
