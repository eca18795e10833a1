//! Configuring and starting a [`Pool`]: policies (also from the
//! environment), sizes, the grant's source (a cell by default), and the
//! start-up that waits for the first workers.

use super::*;

/// Default spin budget of an idle worker before it parks: about the cost
/// of one blocking wake-up on the reference VM (10–16 µs), rounded up.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(20);
/// Default period of progress reports to the broker.
pub const DEFAULT_REPORT_PERIOD: Duration = Duration::from_millis(100);

type PolicyFactory = Box<dyn FnOnce(&PoolInfo) -> Box<dyn ThreadPolicy>>;

/// Configures a [`Pool`].
pub struct Builder {
    source: Option<Arc<dyn GrantSource>>,
    policy: PolicyFactory,
    policy_name: &'static str,
    name: String,
    spin: Duration,
    slots: Option<usize>,
    stack_size: Option<usize>,
    report_period: Duration,
    quantum: Option<Duration>,
    vp: Arc<dyn crate::vp::VpPolicy>,
    machine: Option<std::sync::Arc<allot_topo::Machine>>,
    /// Unknown names in the environment (thread policy, VP policy), until
    /// the program chooses that policy itself.
    env_errors: (Option<String>, Option<String>),
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("policy", &self.policy_name)
            .field("vp_policy", &self.vp.name())
            .field("name", &self.name)
            .field("spin", &self.spin)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

/// Why a pool could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct BuildError {
    kind: BuildErrorKind,
}

#[derive(Debug, thiserror::Error)]
enum BuildErrorKind {
    #[error("could not start a worker thread: {0}; check the process's thread limit (ulimit -u)")]
    Spawn(std::io::Error),
    #[error("workers did not start within {0:?}; the machine may be overloaded")]
    Timeout(Duration),
    #[error("{0}")]
    Environment(String),
}

impl Default for Builder {
    /// The defaults, with the thread and virtual-processor policies named
    /// by [`allot_proto::env::POOL_POLICY`] and [`allot_proto::env::POOL_VP`]
    /// when they are set (an unknown name makes [`Builder::build`] fail
    /// unless the program chooses that policy itself).
    fn default() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let b = Builder::with_env(
            var(allot_proto::env::POOL_POLICY).as_deref(),
            var(allot_proto::env::POOL_VP).as_deref(),
        );
        if var(allot_proto::env::POOL_POLL).as_deref() == Some("1") {
            b.poll()
        } else {
            b
        }
    }
}

impl Builder {
    /// The defaults with the policies named by the environment's values
    /// (`None`: unset).
    fn with_env(policy: Option<&str>, vp: Option<&str>) -> Builder {
        let mut b = Builder::plain();
        if let Some(p) = policy {
            match p.parse::<PolicySpec>() {
                Ok(k) => b = b.policy(k),
                Err(e) => b.env_errors.0 = Some(format!("{}: {e}", allot_proto::env::POOL_POLICY)),
            }
        }
        if let Some(v) = vp {
            match crate::vp::by_name(v) {
                Ok(p) => b = b.vp_policy(p),
                Err(e) => b.env_errors.1 = Some(format!("{}: {e}", allot_proto::env::POOL_VP)),
            }
        }
        b
    }

    /// The defaults, ignoring the environment.
    fn plain() -> Builder {
        Builder {
            env_errors: (None, None),
            source: None,
            policy: Box::new(|i| PolicyKind::LocalLifo.build(i)),
            policy_name: "local-lifo",
            quantum: None,
            name: "allot".into(),
            spin: DEFAULT_SPIN,
            slots: None,
            stack_size: None,
            report_period: DEFAULT_REPORT_PERIOD,
            vp: Arc::new(crate::vp::MoveFewest),
            machine: None,
        }
    }
}

impl Builder {
    /// The cell whose grant the pool follows (default `Cell::auto(name)`).
    #[cfg(feature = "cell")]
    pub fn cell(self, cell: allot_client::Cell) -> Self {
        self.source(Arc::new(cell))
    }

    /// Where the pool's grant comes from, when it is not a cell of its own
    /// (a [`ManualGrants`](crate::ManualGrants), a cell shared with other
    /// pools, a source of the program's own).
    pub fn source(mut self, source: Arc<dyn GrantSource>) -> Self {
        self.source = Some(source);
        self
    }

    /// A policy of the library: a [`PolicyKind`] with its default
    /// options, or a [`PolicySpec`] (default `local-lifo`).
    pub fn policy(mut self, spec: impl Into<PolicySpec>) -> Self {
        let spec = spec.into();
        if let Some(q) = spec.quantum {
            self = self.quantum(q);
        }
        self.policy = Box::new(move |i| spec.build(i));
        self.policy_name = spec.kind.name();
        self.env_errors.0 = None;
        self
    }

    /// The quantum: how long a task runs before [`yield_now`](crate::yield_now)
    /// lets another ready task of its priority or higher run (default:
    /// none, `yield_now` does nothing). Quanta are cooperative: a task that
    /// never calls `yield_now` is never interrupted.
    pub fn quantum(mut self, q: Duration) -> Self {
        self.quantum = Some(q.max(Duration::from_micros(10)));
        self
    }

    /// The virtual-processor policy: which worker serves which granted
    /// CPU after a grant change (default [`MoveFewest`](crate::MoveFewest)).
    pub fn vp_policy(mut self, p: impl crate::vp::VpPolicy + 'static) -> Self {
        self.vp = Arc::new(p);
        self.env_errors.1 = None;
        self
    }

    /// The machine model the policies measure distances on (`victims =
    /// nearest`); default: the machine this process runs on. Tests give a
    /// fixture machine (`allot_topo::fixture`).
    pub fn machine(mut self, m: allot_topo::Machine) -> Self {
        self.machine = Some(std::sync::Arc::new(m));
        self
    }

    /// A custom thread policy, built once the pool's size is known.
    pub fn policy_with(
        mut self,
        make: impl FnOnce(&PoolInfo) -> Box<dyn ThreadPolicy> + 'static,
    ) -> Self {
        self.policy = Box::new(make);
        self.policy_name = "custom";
        self.env_errors.0 = None;
        self
    }

    /// Thread-name prefix and cell name (default `"allot"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How long an idle worker spins before parking (default
    /// [`DEFAULT_SPIN`]; zero parks at once).
    pub fn spin(mut self, budget: Duration) -> Self {
        self.spin = budget;
        self
    }

    /// Workers that poll and never park: for a pool that owns its CPUs (a
    /// partition, `allot run --partition`, which sets
    /// [`allot_proto::env::POOL_POLL`]). A task pushed from anywhere is
    /// picked up within a few hundred nanoseconds with no system call,
    /// at the price of every worker's CPU kept busy. Workers still sleep
    /// when their CPU is taken away.
    pub fn poll(mut self) -> Self {
        self.spin = Duration::MAX;
        self
    }

    /// Maximum number of workers (default: the machine's CPU count, or
    /// the grant's size if larger). CPUs beyond it are left unused.
    pub fn max_workers(mut self, n: usize) -> Self {
        self.slots = Some(n.max(1));
        self
    }

    /// Worker stack size in bytes (default: the platform's).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Period of `Cell::report` calls (default [`DEFAULT_REPORT_PERIOD`]).
    pub fn report_period(mut self, period: Duration) -> Self {
        self.report_period = period.max(Duration::from_millis(1));
        self
    }

    /// Starts the workers for the current grant and the monitor.
    pub fn build(self) -> Result<Pool, BuildError> {
        if let Some(e) = self.env_errors.0.or(self.env_errors.1) {
            return Err(BuildError {
                kind: BuildErrorKind::Environment(e),
            });
        }
        let source = self.source.unwrap_or_else(|| default_source(&self.name));
        let grant = source.grant();
        let slots = self
            .slots
            .unwrap_or_else(|| machine_cpus().max(grant.cpus.len()))
            .max(1);
        let mut info = PoolInfo::new(slots);
        info.machine = self.machine.clone();
        let policy = (self.policy)(&info);
        let reg = Arc::new(Registry {
            info,
            policy,
            sleep: Sleep::new(slots),
            slots: (0..slots)
                .map(|_| CachePadded::new(Slot::default()))
                .collect(),
            stats: (0..slots)
                .map(|_| CachePadded::new(crate::stats::WorkerCounters::default()))
                .collect(),
            terminate: AtomicBool::new(false),
            spin: self.spin,
            name: self.name.clone(),
            stack_size: self.stack_size,
            plan: Mutex::new(PlanState {
                handles: (0..slots).map(|_| None).collect(),
                ..PlanState::default()
            }),
            escaped_panics: AtomicU64::new(0),
            vp: self.vp.clone(),
            vp_errors: AtomicU64::new(0),
            pin_errors: AtomicU64::new(0),
            quantum: self.quantum,
            gate: SuspendGate::default(),
            windows: Default::default(),
        });
        monitor::apply(&reg, &grant);
        let pool = Pool {
            reg: reg.clone(),
            source: source.clone(),
        };
        if !reg
            .plan
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .handles
            .iter()
            .any(Option::is_some)
        {
            return Err(BuildError {
                kind: BuildErrorKind::Spawn(std::io::Error::other("no worker thread started")),
            });
        }
        let limit = Duration::from_secs(5);
        if !pool.wait_resized(grant.generation, limit) {
            return Err(BuildError {
                kind: BuildErrorKind::Timeout(limit),
            });
        }
        if source.follows() {
            let period = self.report_period;
            let r = reg.clone();
            std::thread::Builder::new()
                .name(format!("{}-monitor", self.name))
                .spawn(move || monitor::monitor_main(r, source, grant.generation, period))
                .map_err(|e| BuildError {
                    kind: BuildErrorKind::Spawn(e),
                })?;
        }
        Ok(pool)
    }
}

/// CPUs present on the machine (the most workers a grant can ask for).
/// A pool's source when the program names none: a cell of its own
/// (`Cell::auto`: the cell `allot run` made, else a registration, else
/// standalone), or without the `cell` feature the CPUs the process may
/// use.
fn default_source(name: &str) -> Arc<dyn GrantSource> {
    #[cfg(feature = "cell")]
    {
        Arc::new(allot_client::Cell::auto(name))
    }
    #[cfg(not(feature = "cell"))]
    {
        let _ = name;
        Arc::new(crate::source::Allowed::now())
    }
}

fn machine_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/present")
        .ok()
        .and_then(|s| CpuSet::parse_list(s.trim()).ok())
        .map(|s| s.len())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
}

#[cfg(test)]
mod env_tests {
    use super::*;

    #[test]
    fn the_environment_names_the_policies_and_a_bad_name_is_an_error_unless_overridden() {
        let b = Builder::with_env(Some("fifo"), Some("in-order"));
        assert_eq!(b.policy_name, "global-fifo");
        assert_eq!(b.vp.name(), "in-order");
        assert_eq!(b.env_errors, (None, None));
        let b = Builder::with_env(None, None);
        assert_eq!((b.policy_name, b.vp.name()), ("local-lifo", "move-fewest"));

        let e = Builder::with_env(Some("nope"), None).build().unwrap_err();
        assert!(
            e.to_string().contains("ALLOT_POOL_POLICY") && e.to_string().contains("local-fifo"),
            "{e}"
        );
        let e = Builder::with_env(None, Some("nope")).build().unwrap_err();
        assert!(e.to_string().contains("ALLOT_POOL_VP"), "{e}");
        // The program's own choice wins over a bad environment.
        let b = Builder::with_env(Some("nope"), Some("nope"))
            .policy(PolicyKind::LocalLifo)
            .vp_policy(crate::vp::MoveFewest);
        assert_eq!(b.env_errors, (None, None));
    }
}
