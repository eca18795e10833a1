//! `allot._allot`: the native half of the Python package.
//!
//! It wraps `allot_client` and adds nothing of its own: [`Cell`] is
//! `allot_client::Cell` (registered, joined from `allot run`, or
//! standalone), [`Grant`] a copy of one grant page reading, and
//! [`Require`] a `require` scope entered and left by a Python `with`
//! block. The Python half (`allot/__init__.py`) builds the decorator, the
//! BLAS follower and the executor on top.
//!
//! Every call that can block (registering, waiting for a grant change,
//! entering a scope) releases the GIL, so other Python threads run
//! meanwhile. `wait_change` waits in slices, so Ctrl-C is seen within a
//! fifth of a second; a queued registration (`wait=True`) and a `require`
//! block waiting for its resources are not interruptible.

use allot_client::{CellSpec, Goal, Mode, Options, Term, TimeContract, TimeTerms};
use allot_proto::window::{Phase, monotonic_ns};
use allot_require::{self as require, Block, Blocks, Need, policy};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a blocking wait runs before Python's signals are checked.
const SLICE: Duration = Duration::from_millis(200);

/// One reading of a cell's grant.
#[pyclass(frozen, module = "allot")]
#[derive(Clone)]
struct Grant {
    /// The cell's id (0 without a broker).
    #[pyo3(get)]
    cell: u64,
    /// Grows by one at every change.
    #[pyo3(get)]
    generation: u64,
    /// Threads the cell should run.
    #[pyo3(get)]
    threads: u32,
    /// CPUs the cell may use.
    #[pyo3(get)]
    cpus: Vec<usize>,
    /// Of which lent by idle cells (given back when they need them).
    #[pyo3(get)]
    lent: Vec<usize>,
    /// Whether the cell shares a pool of CPUs with other cells.
    #[pyo3(get)]
    stacked: bool,
    /// The cell's fair share of the machine, in CPUs.
    #[pyo3(get)]
    share: f64,
}

impl From<allot_client::Grant> for Grant {
    fn from(g: allot_client::Grant) -> Grant {
        Grant {
            cell: g.cell,
            generation: g.generation,
            threads: g.threads.max(1),
            cpus: g.cpus.iter().collect(),
            lent: g.lent.iter().collect(),
            stacked: g.flags & allot_client::FLAG_STACKED != 0,
            share: f64::from(g.share_milli) / 1000.0,
        }
    }
}

#[pymethods]
impl Grant {
    fn __repr__(&self) -> String {
        format!(
            "Grant(cell={}, generation={}, threads={}, cpus={:?}, lent={:?}, stacked={}, share={:.3})",
            self.cell,
            self.generation,
            self.threads,
            self.cpus,
            self.lent,
            if self.stacked { "True" } else { "False" },
            self.share
        )
    }
}

/// A time-triggered cell's windows, read at one moment: window k opens at
/// `origin_ns + k * period` (`CLOCK_MONOTONIC`, as `time.monotonic_ns()`)
/// and lasts `budget` seconds.
#[pyclass(frozen, module = "allot")]
#[derive(Clone)]
struct Window {
    /// When window 0 opens, ns (0 without windows).
    #[pyo3(get)]
    origin_ns: u64,
    /// Seconds between openings (0.0 without windows).
    #[pyo3(get)]
    period: f64,
    /// Seconds each window lasts.
    #[pyo3(get)]
    budget: f64,
    /// At the reading: inside a window (always without windows).
    #[pyo3(get)]
    open: bool,
    /// At the reading: when this window closes (open) or the next opens
    /// (closed), ns; `None` without windows.
    #[pyo3(get)]
    edge_ns: Option<u64>,
}

impl Window {
    fn at(w: &allot_proto::Window, now_ns: u64) -> Window {
        if !w.is_set() {
            return Window {
                origin_ns: 0,
                period: 0.0,
                budget: 0.0,
                open: true,
                edge_ns: None,
            };
        }
        let (open, edge) = match w.phase(now_ns) {
            Phase::Open { closes_ns } => (true, closes_ns),
            Phase::Closed { opens_ns } => (false, opens_ns),
        };
        Window {
            origin_ns: w.origin_ns,
            period: f64::from(w.period_us) / 1e6,
            budget: f64::from(w.budget_us) / 1e6,
            open,
            edge_ns: Some(edge),
        }
    }
}

#[pymethods]
impl Window {
    fn __repr__(&self) -> String {
        format!(
            "Window(period={}, budget={}, open={}, edge_ns={:?})",
            self.period,
            self.budget,
            if self.open { "True" } else { "False" },
            self.edge_ns
        )
    }
}

/// Seconds as whole microseconds, for a contract argument.
fn micros(what: &str, seconds: f64) -> PyResult<u32> {
    let us = seconds * 1e6;
    if !(us.is_finite() && us >= 1.0 && us <= f64::from(u32::MAX)) {
        return Err(PyValueError::new_err(format!(
            "{what}={seconds} is not a duration in seconds between 1e-6 and about 4000 \
             (for example {what}=0.01 for 10 ms)"
        )));
    }
    Ok(us.round() as u32)
}

/// What the keyword arguments are called (no message-triggered cells here).
fn keyword(t: Term) -> Option<&'static str> {
    match t {
        Term::Period => Some("period"),
        Term::Budget => Some("budget"),
        Term::Fraction => Some("fraction"),
        Term::Slice => Some("slice"),
        Term::MessageIdle => None,
    }
}

/// The time contract the keyword arguments ask for (durations in seconds;
/// which contract they name is [`TimeTerms::contract`]'s to decide).
fn contract(
    period: Option<f64>,
    budget: Option<f64>,
    fraction: Option<f64>,
    slice: Option<f64>,
) -> PyResult<TimeContract> {
    let terms = TimeTerms {
        period_us: period.map(|p| micros("period", p)).transpose()?,
        budget_us: budget.map(|b| micros("budget", b)).transpose()?,
        fraction,
        slice_us: slice.map(|s| micros("slice", s)).transpose()?,
        message_idle_us: None,
    };
    terms.contract().map_err(|e| {
        PyValueError::new_err(
            e.describe(keyword, |t, v| format!("{}={v}", keyword(t).unwrap_or("?"))),
        )
    })
}

/// A size given as an int of bytes or as text (`"512M"`, `"2G"`); None
/// is 0 (none).
fn size_arg(what: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    let Some(v) = value.filter(|v| !v.is_none()) else {
        return Ok(0);
    };
    if let Ok(n) = v.extract::<u64>() {
        return Ok(n);
    }
    let text: String = v.extract().map_err(|_| {
        PyValueError::new_err(format!(
            "{what}: give bytes as an int, or text such as \"2G\""
        ))
    })?;
    allot_client::parse_size(&text).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// The goal `text` names, or a `ValueError` that says how to write one.
fn parse_goal(text: &str) -> PyResult<Goal> {
    text.parse::<Goal>()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A cell: this process's share of the machine.
#[pyclass(module = "allot")]
struct Cell {
    /// Locked only to clone or take the handle, never across a wait: a
    /// thread waiting for the GIL while holding it would deadlock with one
    /// holding the GIL and waiting for it.
    inner: Mutex<Option<Arc<allot_client::Cell>>>,
}

impl Cell {
    fn handle(&self) -> PyResult<Arc<allot_client::Cell>> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.clone()
            .ok_or_else(|| PyRuntimeError::new_err("the cell was closed"))
    }

    fn with<R>(&self, f: impl FnOnce(&allot_client::Cell) -> R) -> PyResult<R> {
        let c = self.handle()?;
        Ok(f(&c))
    }

    /// Takes the handle out and drops it without the GIL: the last drop
    /// joins the cell's watcher and tells the broker, which may take a
    /// while, and other Python threads run meanwhile.
    fn release(&self, py: Python<'_>) {
        let c = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(c) = c {
            c.interrupt_waits();
            py.allow_threads(move || drop(c));
        }
    }

    fn wrap(c: allot_client::Cell) -> Cell {
        Cell {
            inner: Mutex::new(Some(Arc::new(c))),
        }
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Registered => "registered",
        Mode::Joined => "joined",
        Mode::Standalone => "standalone",
        Mode::Manual => "manual",
    }
}

#[pymethods]
impl Cell {
    /// Registers a cell with the broker (at `socket`, `$ALLOT_SOCKET` or
    /// the default path). Without a broker and with `fallback`, the cell is
    /// standalone (`mode == "standalone"`, `reason` says why); a refusal
    /// raises `RuntimeError` with the broker's reason.
    ///
    /// A time contract (seconds): `period` and `budget` for a
    /// time-triggered cell (the budget every period, all threads in the
    /// same window), or `fraction` (and `slice`) for a time-fraction cell,
    /// on `cpus` CPUs (default 1).
    ///
    /// A goal (`goal="rate=200/s"` or `goal="p99=5ms"`, the text form of
    /// `allot run --goal`): what the cell wants to achieve, counted with
    /// `heartbeat` and `report_latency`.
    #[new]
    #[pyo3(signature = (name = "python", *, min = 0, max = 0, weight = 1, exclusive = false, wait = false, socket = None, fallback = true, cpus = None, period = None, budget = None, fraction = None, slice = None, goal = None, memory_min = None, memory_max = None, cache_ways = 0, mem_bandwidth = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: &str,
        min: u32,
        max: u32,
        weight: u32,
        exclusive: bool,
        wait: bool,
        socket: Option<PathBuf>,
        fallback: bool,
        cpus: Option<u32>,
        period: Option<f64>,
        budget: Option<f64>,
        fraction: Option<f64>,
        slice: Option<f64>,
        goal: Option<&str>,
        memory_min: Option<&Bound<'_, PyAny>>,
        memory_max: Option<&Bound<'_, PyAny>>,
        cache_ways: u32,
        mem_bandwidth: u32,
    ) -> PyResult<Cell> {
        let time = contract(period, budget, fraction, slice)?;
        let memory = allot_client::Memory {
            min: size_arg("memory_min", memory_min)?,
            max: size_arg("memory_max", memory_max)?,
        };
        let goal = match goal {
            Some(text) => parse_goal(text)?,
            None => Goal::None,
        };
        let mut spec = CellSpec {
            min,
            max,
            weight,
            exclusive,
            time,
            goal,
            memory,
            cache: allot_client::Cache {
                ways: cache_ways,
                bandwidth: mem_bandwidth,
            },
            ..CellSpec::default()
        };
        match (time.is_time(), cpus) {
            (true, _) if min != 0 || max != 0 => {
                return Err(PyValueError::new_err(
                    "a time contract covers `cpus` CPUs: use cpus= instead of min/max",
                ));
            }
            (true, c) => spec.min = c.unwrap_or(1),
            (false, Some(_)) => {
                return Err(PyValueError::new_err(
                    "cpus= sets how many CPUs a time contract covers: add period/budget or \
                     fraction, or use min/max for whole CPUs",
                ));
            }
            (false, None) => {}
        }
        spec.validate()
            .map_err(|e| PyValueError::new_err(format!("invalid cell: {e}")))?;
        let mut o = Options::new(name);
        o.spec = spec;
        o.socket = socket;
        o.wait = wait;
        o.fallback = fallback;
        let c = py
            .allow_threads(|| allot_client::Cell::register(&o))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(Cell::wrap(c))
    }

    /// The cell `allot run` put this process in if there is one, else a
    /// registered cell, else a standalone one: what a library that just
    /// wants "the CPUs I should use" calls.
    #[staticmethod]
    #[pyo3(signature = (name = "python"))]
    fn auto(py: Python<'_>, name: &str) -> Cell {
        Cell::wrap(py.allow_threads(|| allot_client::Cell::auto(name)))
    }

    /// A cell without a broker: the CPUs this process may use, fixed.
    #[staticmethod]
    fn standalone() -> Cell {
        Cell::wrap(allot_client::Cell::standalone())
    }

    /// `registered`, `joined` (from `allot run`), `standalone` or `manual`.
    #[getter]
    fn mode(&self) -> PyResult<&'static str> {
        self.with(|c| mode_name(c.mode()))
    }

    /// Why the cell is standalone, if it fell back to it.
    #[getter]
    fn reason(&self) -> PyResult<Option<String>> {
        self.with(|c| c.fallback_reason().map(str::to_string))
    }

    /// The cell's id (0 without a broker).
    #[getter]
    fn id(&self) -> PyResult<u64> {
        self.with(|c| c.id())
    }

    /// Whether the broker answers now.
    #[getter]
    fn broker_up(&self) -> PyResult<bool> {
        self.with(|c| c.broker_up())
    }

    /// The current grant (a memory read, no system call).
    fn grant(&self) -> PyResult<Grant> {
        self.with(|c| c.grant().into())
    }

    /// The cell's windows now (a time-triggered cell under a broker that
    /// can suspend it; otherwise no windows and `open` is always true).
    fn window(&self) -> PyResult<Window> {
        self.with(|c| Window::at(&c.grant().window, monotonic_ns()))
    }

    /// Blocks (without the GIL) until the cell's next window opens, inside
    /// a window the one after it, and returns the windows then (`open`
    /// true). Returns at once for a cell without windows. A periodic loop
    /// does its work, then calls this: it returns at the opening itself,
    /// and the cell's suspension between windows cannot make it miss one.
    fn wait_window(&self, py: Python<'_>) -> PyResult<Window> {
        let c = self.handle()?;
        py.allow_threads(|| {
            c.wait_window();
            Ok(Window::at(&c.grant().window, monotonic_ns()))
        })
    }

    /// Counts `n` units of work done (the unit of a rate goal): one atomic
    /// add to the cell's report page, no system call.
    #[pyo3(signature = (n = 1))]
    fn heartbeat(&self, n: u64) -> PyResult<()> {
        self.with(|c| c.heartbeat(n))
    }

    /// Records one request's latency, in seconds (for a p99 goal): three
    /// atomic adds to the cell's report page, no system call.
    fn report_latency(&self, seconds: f64) -> PyResult<()> {
        let d = Duration::try_from_secs_f64(seconds).map_err(|_| {
            PyValueError::new_err("latency must be a finite number of seconds >= 0")
        })?;
        self.with(|c| c.report_latency(d))
    }

    /// Sets the cell's goal (`"rate=200/s"`, `"p99=5ms"` or `"none"`) and
    /// waits for the broker to accept it.
    fn set_goal(&self, py: Python<'_>, goal: &str) -> PyResult<()> {
        let goal = parse_goal(goal)?;
        let c = self.handle()?;
        py.allow_threads(|| c.set_goal(goal))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Sets the cell's memory guarantee and limit (bytes as an int, or
    /// text such as `"2G"`; None: none) and waits for the broker to accept
    /// them; a refused change leaves the cell as it was.
    #[pyo3(signature = (min = None, max = None))]
    fn set_memory(
        &self,
        py: Python<'_>,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let memory = allot_client::Memory {
            min: size_arg("min", min)?,
            max: size_arg("max", max)?,
        };
        let c = self.handle()?;
        py.allow_threads(|| c.set_memory(memory))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Sets the cell's L3 cache ways of its own and memory bandwidth
    /// ceiling (percent; 0: none) and waits for the broker to accept them.
    #[pyo3(signature = (ways = 0, bandwidth = 0))]
    fn set_cache(&self, py: Python<'_>, ways: u32, bandwidth: u32) -> PyResult<()> {
        let c = self.handle()?;
        py.allow_threads(|| c.set_cache(allot_client::Cache { ways, bandwidth }))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The number of threads the cell should run now.
    fn threads(&self) -> PyResult<u32> {
        self.with(|c| c.threads())
    }

    /// Waits until the grant's generation differs from `seen` (default:
    /// the current one) or `timeout` seconds pass; returns the grant then.
    #[pyo3(signature = (seen = None, timeout = None))]
    fn wait_change(
        &self,
        py: Python<'_>,
        seen: Option<u64>,
        timeout: Option<f64>,
    ) -> PyResult<Grant> {
        let seen = match seen {
            Some(s) => s,
            None => self.with(|c| c.generation())?,
        };
        if timeout.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
            return Err(PyValueError::new_err(
                "timeout must be a finite number >= 0",
            ));
        }
        // A timeout too large to represent waits without a deadline.
        let deadline = timeout.and_then(|t| {
            Duration::try_from_secs_f64(t)
                .ok()
                .and_then(|d| Instant::now().checked_add(d))
        });
        loop {
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
                None => SLICE,
            };
            let c = self.handle()?;
            let g = py.allow_threads(|| c.wait_change(seen, Some(slice)));
            if g.generation != seen || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(g.into());
            }
            py.check_signals()?;
        }
    }

    /// Tells the broker how the cell is doing: `busy` threads working,
    /// `wanted` threads it could use, `progress` units of work done so far.
    fn report(&self, busy: u32, wanted: u32, progress: u64) -> PyResult<()> {
        self.with(|c| c.report(busy, wanted, progress))?
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Makes every `wait_change` in progress return now.
    fn interrupt_waits(&self) -> PyResult<()> {
        self.with(|c| c.interrupt_waits())
    }

    /// Releases the cell (also done when it is garbage-collected).
    fn close(&self, py: Python<'_>) {
        self.release(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        match self.with(|c| (c.id(), mode_name(c.mode()), c.threads())) {
            Ok((id, mode, threads)) => format!("Cell(id={id}, mode={mode:?}, threads={threads})"),
            Err(_) => "Cell(closed)".into(),
        }
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        // Collected by Python (the GIL is held): release it without.
        if self.inner.get_mut().map(|c| c.is_some()).unwrap_or(false) {
            Python::with_gil(|py| self.release(py));
        }
    }
}

/// What a `require` block was given.
#[pyclass(frozen, module = "allot")]
struct Outcome {
    /// Whole CPUs the block may use.
    #[pyo3(get)]
    ncores: u32,
    /// Which CPUs.
    #[pyo3(get)]
    cpus: Vec<usize>,
    /// NUMA nodes its memory is placed on.
    #[pyo3(get)]
    nodes: Vec<u32>,
}

#[pymethods]
impl Outcome {
    fn __repr__(&self) -> String {
        format!(
            "Outcome(ncores={}, cpus={:?}, nodes={:?})",
            self.ncores, self.cpus, self.nodes
        )
    }
}

/// A scope held across the GIL release: it never leaves the thread that
/// entered it (the closure given to `allow_threads` runs on the calling
/// thread).
struct Held(Block<'static>);
// SAFETY: `allow_threads` runs its closure on the current thread, so the
// scope is created and handed back on the thread that owns it; `Require`
// is `unsendable`, so Python never moves it to another thread either.
unsafe impl Send for Held {}

/// A `require` block: `with Require(...) as outcome:`.
#[pyclass(unsendable, module = "allot")]
struct Require {
    requests: Vec<Need>,
    scope: Option<Block<'static>>,
}

#[pymethods]
impl Require {
    /// Asks for whole CPUs (`cores=N`), the fair share of the CPUs
    /// (`fair=True`), a fraction of one CPU (`cpu_fraction=0.5`, device
    /// `cpu_device`), or NUMA nodes (`numa_nodes=N`).
    #[new]
    #[pyo3(signature = (*, cores = None, fair = false, cpu_fraction = None, cpu_device = 0, numa_nodes = None))]
    fn new(
        cores: Option<u32>,
        fair: bool,
        cpu_fraction: Option<f64>,
        cpu_device: u32,
        numa_nodes: Option<u32>,
    ) -> PyResult<Require> {
        let mut requests = Vec::new();
        if let Some(n) = cores {
            if n == 0 {
                return Err(PyValueError::new_err("cores must be at least 1"));
            }
            requests.push(Need::policy(policy::cores(n)));
        }
        if fair {
            requests.push(Need::policy(policy::fair_cores()));
        }
        if let Some(f) = cpu_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(PyValueError::new_err(
                    "cpu_fraction must be in (0, 1]: a share of one CPU",
                ));
            }
            requests.push(Need::device("cpu", cpu_device, f));
        }
        if let Some(n) = numa_nodes {
            requests.push(Need::policy(policy::numa_nodes(n)));
        }
        if requests.is_empty() {
            return Err(PyValueError::new_err(
                "require needs something to ask for: cores=, fair=True, cpu_fraction= or numa_nodes=",
            ));
        }
        Ok(Require {
            requests,
            scope: None,
        })
    }

    fn __enter__(&mut self, py: Python<'_>) -> PyResult<Outcome> {
        if self.scope.is_some() {
            return Err(PyRuntimeError::new_err(
                "this require block is already entered; create one per with-statement",
            ));
        }
        let reqs = self.requests.clone();
        let held = py
            .allow_threads(|| Blocks::global().enter(reqs).map(Held))
            .map_err(|e: require::RequireError| PyRuntimeError::new_err(e.to_string()))?;
        let scope = held.0;
        let o = scope.outcome();
        let out = Outcome {
            ncores: o.ncores,
            cpus: o.cpus.iter().collect(),
            nodes: o.nodes.clone(),
        };
        self.scope = Some(scope);
        Ok(out)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.scope = None;
        false
    }
}

/// The CPUs this process may run on (its affinity), sorted.
#[pyfunction]
fn allowed_cpus() -> PyResult<Vec<usize>> {
    allot_topo::allowed_cpus()
        .map(|s| s.iter().collect())
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Chooses the waits during which the calling thread gives its `require`
/// allocation back (with the preload shim: `allot run`): `"paper"` (every
/// wait but I/O, the default), `"all"`, `"none"`, or kinds joined by
/// commas (`"sync,sleep,io"`). Returns the previous choice in the same
/// form.
#[pyfunction]
fn release_on(waits: &str) -> PyResult<String> {
    let set = allot_require::Waits::parse(waits).map_err(PyValueError::new_err)?;
    Ok(allot_require::release_on(set).to_string())
}

/// How many times the calling thread gave its `require` allocation back
/// while waiting: compare two readings to know whether what a block held
/// was someone else's in between.
#[pyfunction]
fn given_back() -> u64 {
    allot_require::given_back()
}

#[pymodule]
fn _allot(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Cell>()?;
    m.add_class::<Grant>()?;
    m.add_class::<Window>()?;
    m.add_class::<Require>()?;
    m.add_class::<Outcome>()?;
    m.add_function(wrap_pyfunction!(allowed_cpus, m)?)?;
    m.add_function(wrap_pyfunction!(release_on, m)?)?;
    m.add_function(wrap_pyfunction!(given_back, m)?)?;
    m.add("PROTOCOL_VERSION", allot_proto::PROTOCOL_VERSION)?;
    Ok(())
}
