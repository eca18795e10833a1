//! The policy library by name: [`PolicyKind`] (which policy) and
//! [`PolicySpec`] (a kind with its options), parsed from and printed as
//! one string — the form `Builder::policy`, the C ABI and
//! `ALLOT_POOL_POLICY` accept:
//!
//! ```text
//! KIND[:OPTION=VALUE[,OPTION=VALUE]…]
//! KIND     local-lifo (alias lifo) | local-fifo | global-fifo (alias fifo) | global-lifo
//! levels   1 | 2 | 3            priority queues per structure (default 3)
//! victims  random | round-robin | nearest | most-loaded
//!                               order in which idle workers steal
//!                               (default random; `victims.rs`)
//! place    local | round-robin | random | least-loaded | overflow
//!                               where a worker's spawned tasks go (local
//!                               policies only; default local)
//! overflow N                    with place=overflow: a worker's own
//!                               queue holds at most N spawned tasks, the
//!                               rest go to the shared queue (default 64)
//! quantum  N(us|ms|s)           the pool's quantum for `yield_now`
//!                               (default none)
//! ```
//!
//! For example `local-fifo:levels=2,victims=round-robin`. Printing a spec
//! gives its full form, which parses back to the same spec.

use std::fmt;
use std::str::FromStr;

use super::Victims;
use super::levels::{MAX_LEVELS, SpawnPlacement};
use super::{Global, Local, PoolInfo, ThreadPolicy};

/// The shipped thread policies (Sting's standard library of policy
/// managers), one file each pair: `local.rs` and `global.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum PolicyKind {
    /// Per-worker LIFO deques, stealing of the oldest task, and a shared
    /// FIFO queue for tasks from outside the pool (the Cilk/rayon
    /// discipline: depth-first locally, breadth-first steals). Best for
    /// fork/join and nested parallelism.
    #[default]
    LocalLifo,
    /// Per-worker FIFO deques with stealing: a worker runs its own tasks
    /// in creation order (fair among siblings, breadth-first), thieves
    /// take the oldest too.
    LocalFifo,
    /// One shared FIFO queue for independent tasks (`spawn`, `install`):
    /// they start in submission order, no locality; contention grows with
    /// the number of workers. Structured work (`join` halves, scoped
    /// tasks) stays with the worker that created it (stealable), so waits
    /// never nest unrelated tasks.
    GlobalFifo,
    /// As `GlobalFifo`, but the shared queue is a stack: the newest
    /// independent task starts first.
    GlobalLifo,
}

impl PolicyKind {
    /// Every shipped policy.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::LocalLifo,
        PolicyKind::LocalFifo,
        PolicyKind::GlobalFifo,
        PolicyKind::GlobalLifo,
    ];

    /// Every name [`PolicyKind`] parses, aliases last.
    pub const NAMES: [&'static str; 6] = [
        "local-lifo",
        "local-fifo",
        "global-fifo",
        "global-lifo",
        "lifo",
        "fifo",
    ];

    /// Its name as parsed.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::LocalLifo => "local-lifo",
            PolicyKind::LocalFifo => "local-fifo",
            PolicyKind::GlobalFifo => "global-fifo",
            PolicyKind::GlobalLifo => "global-lifo",
        }
    }

    /// Whether its main structure hands out the newest task first.
    pub fn is_lifo(self) -> bool {
        matches!(self, PolicyKind::LocalLifo | PolicyKind::GlobalLifo)
    }

    /// Whether it keeps a worker's tasks in that worker's deques.
    pub fn is_local(self) -> bool {
        matches!(self, PolicyKind::LocalLifo | PolicyKind::LocalFifo)
    }

    /// Builds the policy with default options for a pool.
    pub fn build(self, info: &PoolInfo) -> Box<dyn ThreadPolicy> {
        PolicySpec::new(self).build(info)
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name or option that does not parse; says what would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnknownPolicy(String);

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "local-lifo" | "lifo" => Ok(PolicyKind::LocalLifo),
            "local-fifo" => Ok(PolicyKind::LocalFifo),
            "global-fifo" | "fifo" => Ok(PolicyKind::GlobalFifo),
            "global-lifo" => Ok(PolicyKind::GlobalLifo),
            other => Err(UnknownPolicy(format!(
                "unknown thread policy {other:?}; known: {}",
                PolicyKind::NAMES.join(", ")
            ))),
        }
    }
}

/// [`PolicySpec::overflow`] unless the spec says otherwise.
pub const DEFAULT_OVERFLOW: u32 = 64;

/// A policy of the library with its options. See the module docs for the
/// string form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicySpec {
    /// Which shipped policy; the other fields tune it.
    pub kind: PolicyKind,
    levels: u8,
    /// Steal order of idle workers.
    pub victims: Victims,
    /// Where spawned tasks go (local policies only).
    pub placement: SpawnPlacement,
    /// With [`SpawnPlacement::Overflow`]: the most spawned tasks a worker
    /// keeps queued before new ones go to the shared queue.
    pub overflow: u32,
    /// The pool's quantum (see `Builder::quantum`), if the spec sets one.
    pub quantum: Option<std::time::Duration>,
}

impl Default for PolicySpec {
    fn default() -> Self {
        PolicySpec::new(PolicyKind::default())
    }
}

impl From<PolicyKind> for PolicySpec {
    fn from(kind: PolicyKind) -> Self {
        PolicySpec::new(kind)
    }
}

impl PolicySpec {
    /// `kind` with the default options (three levels, random victims,
    /// local placement).
    pub fn new(kind: PolicyKind) -> PolicySpec {
        PolicySpec {
            kind,
            levels: MAX_LEVELS as u8,
            victims: Victims::Random,
            placement: SpawnPlacement::Local,
            overflow: DEFAULT_OVERFLOW,
            quantum: None,
        }
    }

    /// Priority levels (1 to 3; other values are clamped).
    pub fn levels(&self) -> usize {
        usize::from(self.levels)
    }

    /// With `n` priority levels, clamped to 1..=3.
    pub fn with_levels(mut self, n: usize) -> PolicySpec {
        self.levels = n.clamp(1, MAX_LEVELS) as u8;
        self
    }

    /// With the steal order `v`.
    pub fn with_victims(mut self, v: Victims) -> PolicySpec {
        self.victims = v;
        self
    }

    /// With the placement `p` (ignored by global policies, which share
    /// one queue).
    pub fn with_placement(mut self, p: SpawnPlacement) -> PolicySpec {
        self.placement = p;
        self
    }

    /// Builds the policy for a pool.
    pub fn build(self, info: &PoolInfo) -> Box<dyn ThreadPolicy> {
        if self.kind.is_local() {
            Box::new(Local::new(info, self))
        } else {
            Box::new(Global::new(info, self))
        }
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:levels={},victims={}",
            self.kind,
            self.levels,
            self.victims.name()
        )?;
        if self.kind.is_local() {
            write!(f, ",place={}", self.placement.name())?;
            if self.placement == SpawnPlacement::Overflow {
                write!(f, ",overflow={}", self.overflow)?;
            }
        }
        if let Some(q) = self.quantum {
            write!(f, ",quantum={}us", q.as_micros())?;
        }
        Ok(())
    }
}

fn choose<T: Copy>(
    option: &str,
    value: &str,
    names: &[&str],
    of: impl Fn(usize) -> T,
) -> Result<T, UnknownPolicy> {
    names
        .iter()
        .position(|n| n.eq_ignore_ascii_case(value))
        .map(of)
        .ok_or_else(|| {
            UnknownPolicy(format!(
                "policy option {option}={value:?}: known values: {}",
                names.join(", ")
            ))
        })
}

/// `N` followed by `us`, `ms` or `s` (at least 10 µs, at most 10 s).
fn parse_quantum(v: &str) -> Result<std::time::Duration, UnknownPolicy> {
    use std::time::Duration;
    let bad = || {
        UnknownPolicy(format!(
            "policy option quantum={v:?}: a whole number with us, ms or s, from 10us to 10s"
        ))
    };
    let (num, unit) = v
        .find(|c: char| !c.is_ascii_digit())
        .map_or((v, ""), |i| v.split_at(i));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let d = match unit {
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        _ => return Err(bad()),
    };
    if d < Duration::from_micros(10) || d > Duration::from_secs(10) {
        return Err(bad());
    }
    Ok(d)
}

impl FromStr for PolicySpec {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, options) = s.split_once(':').unwrap_or((s, ""));
        let mut spec = PolicySpec::new(kind.parse()?);
        for opt in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, value) = opt.split_once('=').ok_or_else(|| {
                UnknownPolicy(format!(
                    "policy option {opt:?} is not OPTION=VALUE (options: levels, victims, place, overflow, quantum)"
                ))
            })?;
            let value = value.trim();
            match key.trim().to_ascii_lowercase().as_str() {
                "levels" => {
                    spec.levels = match value {
                        "1" | "2" | "3" => value.as_bytes()[0] - b'0',
                        _ => {
                            return Err(UnknownPolicy(format!(
                                "policy option levels={value:?}: 1, 2 or 3"
                            )));
                        }
                    }
                }
                "victims" => {
                    spec.victims = choose("victims", value, &Victims::NAMES, |i| Victims::ALL[i])?
                }
                "place" => {
                    spec.placement = choose("place", value, &SpawnPlacement::NAMES, |i| {
                        [
                            SpawnPlacement::Local,
                            SpawnPlacement::RoundRobin,
                            SpawnPlacement::Random,
                            SpawnPlacement::LeastLoaded,
                            SpawnPlacement::Overflow,
                        ][i]
                    })?
                }
                "overflow" => {
                    spec.overflow = match value.parse::<u32>() {
                        Ok(n) if n >= 1 => n,
                        _ => {
                            return Err(UnknownPolicy(format!(
                                "policy option overflow={value:?}: a number of tasks, at least 1"
                            )));
                        }
                    }
                }
                "quantum" => spec.quantum = Some(parse_quantum(value)?),
                other => {
                    return Err(UnknownPolicy(format!(
                        "unknown policy option {other:?}; options: levels, victims, place, overflow, quantum"
                    )));
                }
            }
        }
        Ok(spec)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_print() {
        for k in PolicyKind::ALL {
            assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
            assert_eq!(k.to_string(), k.name());
        }
        assert_eq!(" FIFO ".parse::<PolicyKind>(), Ok(PolicyKind::GlobalFifo));
        assert_eq!("lifo".parse::<PolicyKind>(), Ok(PolicyKind::LocalLifo));
        let e = "round-robin".parse::<PolicyKind>().unwrap_err().to_string();
        assert!(e.contains("local-fifo") && e.contains("round-robin"), "{e}");
    }

    #[test]
    fn specs_round_trip_through_their_string_form() {
        for kind in PolicyKind::ALL {
            for levels in 1..=3 {
                for victims in Victims::ALL {
                    for placement in [
                        SpawnPlacement::Local,
                        SpawnPlacement::LeastLoaded,
                        SpawnPlacement::Overflow,
                    ] {
                        let mut spec = PolicySpec::new(kind)
                            .with_levels(levels)
                            .with_victims(victims)
                            .with_placement(placement);
                        let back: PolicySpec = spec.to_string().parse().unwrap();
                        if !kind.is_local() {
                            // Global policies do not print a placement.
                            spec.placement = SpawnPlacement::Local;
                        }
                        assert_eq!(back, spec, "{spec}");
                    }
                }
            }
        }
        let spec: PolicySpec = "local-fifo: levels=2 , victims=Round-Robin,place=random"
            .parse()
            .unwrap();
        assert_eq!(spec.kind, PolicyKind::LocalFifo);
        assert_eq!(spec.levels(), 2);
        assert_eq!(spec.victims, Victims::RoundRobin);
        assert_eq!(spec.placement, SpawnPlacement::Random);
        let o: PolicySpec = "lifo:victims=nearest,place=overflow,overflow=8"
            .parse()
            .unwrap();
        assert_eq!(o.victims, Victims::Nearest);
        assert_eq!((o.placement, o.overflow), (SpawnPlacement::Overflow, 8));
        assert_eq!(o.to_string().parse::<PolicySpec>(), Ok(o));
        let q: PolicySpec = "global-lifo:quantum=2ms".parse().unwrap();
        assert_eq!(q.quantum, Some(std::time::Duration::from_millis(2)));
        assert_eq!(q.to_string().parse::<PolicySpec>(), Ok(q));
    }

    #[test]
    fn bad_specs_say_what_would_parse() {
        for (bad, want) in [
            ("stack", "known: local-lifo"),
            ("lifo:levels=4", "1, 2 or 3"),
            (
                "lifo:victims=closest",
                "random, round-robin, nearest, most-loaded",
            ),
            ("lifo:place=overflow,overflow=0", "at least 1"),
            ("lifo:place=far", "least-loaded"),
            ("lifo:levels", "OPTION=VALUE"),
            (
                "lifo:speed=3",
                "options: levels, victims, place, overflow, quantum",
            ),
            ("lifo:quantum=5", "us, ms or s"),
            ("lifo:quantum=1us", "from 10us"),
            ("lifo:quantum=2min", "us, ms or s"),
        ] {
            let e = bad.parse::<PolicySpec>().unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
