//! The gathering rule both sides share: requests of policies that divide
//! among concurrent arrivals (`fair_cores`, `fair_numa`) wait a short
//! *window* for each other before their policies run, so that requests
//! arriving together divide what is free instead of the first taking it
//! all. A process alone gathers its own threads (`allot-require`); with a
//! broker, the broker gathers the requests of every process
//! (`KindGather`).

/// A request that arrives when no batch is open and none arrived for this
/// many windows is in a *quiet spell*: it opens a batch but waits only
/// [`PROBE_PART`] of the window for company, the whole window only if a
/// request joins meanwhile. At light load every request is alone, and a
/// whole window paid by each raised the image server's mean latency by a
/// quarter (docs/require.md).
pub const QUIET_WINDOWS: u32 = 10;

/// The part of the window a request in a quiet spell waits for company
/// (one eighth: 125 µs of the default 1 ms).
pub const PROBE_PART: u32 = 8;

/// The longest window a request may ask for: longer ones are cut to it.
pub const MAX_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);
