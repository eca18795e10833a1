//! allot's versioned contract between the broker and its clients.
//!
//! - [`msg`]: control messages (requests and replies) and their documented,
//!   fuzzable decoder; [`PROTOCOL_VERSION`].
//! - [`page`]: the grant page layout, its seqlock and futex protocol.
//! - [`report`]: the report page, where a cell counts its work and its
//!   latencies for the broker.
//! - [`shm`]: the sealed memfd that holds a grant page and a report page.
//! - [`transport`]: the seqpacket socket, with file descriptor passing.
//! - [`wire`]: the primitive field encoding.
//! - [`window`]: when a time-triggered cell runs (its windows).
//! - [`status`]: the broker's status document.
//! - [`dirs`]: the directories allot trusts (socket, journal, installs).
//! - [`env`](mod@env): the environment variables allot sets and reads.
//! - [`gather`]: the rule by which requests arriving together wait for
//!   each other.
//! - [`log`]: the logging facade every Rust component uses (`ALLOT_LOG`).
//!
//! Any change to a message must bump [`PROTOCOL_VERSION`], any change to
//! the page layout [`PAGE_VERSION`]; both sides refuse other versions with a
//! message that says so.

pub mod dirs;
pub mod env;
pub mod gather;
pub mod log;
pub mod msg;
pub mod page;
pub mod report;
pub mod shm;
pub mod status;
pub mod transport;
pub mod window;
pub mod wire;

pub use msg::{
    DeviceDef, DuePlace, ErrorCode, FrameError, LedgerItem, MAX_MESSAGE, PROTOCOL_VERSION,
    PoolStatsWire, Reply, Request,
};
pub use page::{FLAG_RELEASED, FLAG_STACKED, Grant, GrantPage, PAGE_SIZE, PAGE_VERSION, PageError};
pub use report::{ReportPage, Reports};
pub use shm::{MEMFD_SIZE, PageMap, ShmError};
pub use transport::{CallError, Conn};
pub use window::{Phase, Window};

/// Environment variable naming the broker's socket ([`env::SOCKET`]).
pub const ENV_SOCKET: &str = env::SOCKET;
/// Environment variable carrying the cell id ([`env::CELL`]).
pub const ENV_CELL: &str = env::CELL;
/// Environment variable carrying the grant page's descriptor ([`env::GRANT_FD`]).
pub const ENV_GRANT_FD: &str = env::GRANT_FD;

pub use dirs::{default_socket_path, default_state_dir};

/// The exit code of `allot run` when allot itself failed (refused, no
/// broker, cannot start the program), as `env` uses 125: callers tell it
/// from the program's own codes.
pub const EXIT_ALLOT: i32 = 125;
