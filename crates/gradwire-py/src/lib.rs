//! `gradwire._core`: the Rust engine behind the `gradwire` Python package.
//!
//! A thin layer over `gradwire-sim`: scenarios are loaded and validated in Rust (so the
//! Python CLI reports exactly the same errors as the `gradwire-sim` binary), each run stays
//! a typed, validated scenario inside a [`PyRun`] that Python reads (`name`, `params`,
//! `config()`) and hands back to [`PySimulation`], which is stepped from Python in slices
//! so a progress bar can be drawn between them.

mod bytesched;
mod runtime;
mod sched;

/// mimalloc instead of glibc's malloc for everything Rust allocates here, as polars sets
/// its own allocator. A simulation allocates both endpoints of every flow (10^5 at 144
/// hosts) and then misses the cache on them. With mimalloc the same runs took 4 % less CPU
/// at the median of 10 pairs (docs/performance.md), and mimalloc puts its heap
/// on transparent huge pages by itself. Output is unchanged.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use gradwire_sim::scenario::expand;
use gradwire_sim::{load, Run, Runner, Scenario, ScenarioError as SimError};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

create_exception!(
    _core,
    ScenarioError,
    PyValueError,
    "A scenario is invalid. `key` is the dotted key at fault (empty for file-level errors), \
     `message` says what is wrong; str(e) names both and the bad value."
);

/// The message of a keyed error on one line: the TOML deserializer appends its own
/// "in `key`" context on separate lines, which only repeats the key.
fn one_line(key: &str, message: &str) -> String {
    if key.is_empty() {
        return message.trim_end().to_string();
    }
    message
        .lines()
        .map(str::trim)
        .filter(|l| !(l.is_empty() || l.starts_with("in `") && l.ends_with('`')))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Build a Python `ScenarioError`: `str(e)` is "`key`: message" (naming the key and the bad
/// value), `e.args == (str(e),)`, and `e.key` / `e.message` hold the two parts.
fn scenario_err(py: Python<'_>, e: &SimError) -> PyErr {
    let message = one_line(&e.key, &e.message);
    let text = SimError::new(e.key.clone(), message.clone()).to_string();
    let err = ScenarioError::new_err(text);
    let value = err.value(py);
    let _ = value.setattr("key", e.key.clone());
    let _ = value.setattr("message", message);
    err
}

fn json_loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

fn to_py_json<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| PyValueError::new_err(e.to_string()))?;
    json_loads(py, &text)
}

/// Parse a scenario (TOML text), apply `key=value` overrides, expand its `[sweep]`, and
/// validate every run. Returns one [`PyRun`] per run.
#[pyfunction]
#[pyo3(signature = (text, overrides = Vec::new()))]
fn load_scenario(py: Python<'_>, text: &str, overrides: Vec<String>) -> PyResult<Vec<PyRun>> {
    let runs = load(text, &overrides).map_err(|e| scenario_err(py, &e))?;
    Ok(runs.into_iter().map(|run| PyRun { run }).collect())
}

/// A point of a sweep as Python gets it: its name (`None` without a sweep), the sweep's
/// (dotted key, value, label, value as a TOML literal for `--set`) per axis, and the whole
/// TOML tree as a dict.
type PyPoint<'py> = (Option<String>, Vec<(String, Bound<'py, PyAny>, String, String)>, Bound<'py, PyAny>);

/// Parse a scenario (TOML text), apply `key=value` overrides and expand its `[sweep]`
/// without typing it: the emulator's front end reads its `[job]` from each point, so
/// `--set` and sweeps are the simulator's own there too.
#[pyfunction]
#[pyo3(signature = (text, overrides = Vec::new()))]
fn expand_scenario<'py>(py: Python<'py>, text: &str, overrides: Vec<String>) -> PyResult<Vec<PyPoint<'py>>> {
    let points = expand(text, &overrides).map_err(|e| scenario_err(py, &e))?;
    points
        .into_iter()
        .map(|p| {
            let name = p.name();
            let params = p
                .params
                .into_iter()
                .map(|(k, v, label)| Ok((k, to_py_json(py, &v)?, label, v.to_string())))
                .collect::<PyResult<Vec<_>>>()?;
            Ok((name, params, to_py_json(py, &p.tree)?))
        })
        .collect()
}

/// A run as `__reduce__` pickles it: name, sweep parameters, the typed scenario as JSON.
type RunParts = (String, Vec<(String, String)>, String);

/// One validated run of a scenario (a point of its sweep): the typed scenario stays in
/// Rust; Python reads it and passes the run to `Simulation`.
#[pyclass(name = "Run", module = "gradwire._core", frozen)]
struct PyRun {
    run: Run,
}

#[pymethods]
impl PyRun {
    /// Directory-safe run name: the scenario name, or `key=value,...` of the sweep point.
    #[getter]
    fn name(&self) -> &str {
        &self.run.name
    }

    /// The sweep point, dotted key -> value as a string (empty without a sweep).
    #[getter]
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.run.params {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The typed scenario, every default filled in, as a dict (a copy to read).
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py_json(py, &self.run.scenario)
    }

    /// Raise `ScenarioError` for what building the simulation would refuse beyond
    /// validation (the fast mode's refusals, by key), without building its workload; a
    /// fast run's sample as (servers kept, of the job's), else `None`.
    fn check(&self, py: Python<'_>) -> PyResult<Option<(u32, u32)>> {
        Runner::check(&self.run.scenario).map_err(|e| scenario_err(py, &e))
    }

    /// Pickling (a run crosses to worker processes): the typed scenario as JSON, read back
    /// by [`PyRun::_from_json`].
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, RunParts)> {
        let run = &slf.get().run;
        let json = serde_json::to_string(&run.scenario).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok((slf.get_type().getattr("_from_json")?, (run.name.clone(), run.params.clone(), json)))
    }

    /// A run from its parts as `__reduce__` gives them; the scenario is validated again.
    #[staticmethod]
    fn _from_json(py: Python<'_>, name: String, params: Vec<(String, String)>, json: &str) -> PyResult<PyRun> {
        let de = &mut serde_json::Deserializer::from_str(json);
        let scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let key = if key == "." { String::new() } else { key };
            scenario_err(py, &SimError::new(key, e.inner().to_string()))
        })?;
        scenario.validate().map_err(|e| scenario_err(py, &e))?;
        Ok(PyRun { run: Run { name, params, scenario } })
    }

    fn __repr__(&self) -> String {
        format!("Run(name={:?}, params={:?})", self.run.name, self.run.params)
    }
}

/// One simulation run, built from a [`PyRun`] of `load_scenario` (with `fast.cover`,
/// every sample of a fast run: `gradwire_sim::cover`). `unsendable`: a simulation is
/// `Send` (stepped with the GIL released) but not `Sync`.
#[pyclass(name = "Simulation", module = "gradwire._core", unsendable)]
struct PySimulation {
    sim: Runner,
}

#[pymethods]
impl PySimulation {
    #[new]
    fn new(py: Python<'_>, run: &PyRun) -> PyResult<Self> {
        let sim = Runner::new(&run.run.scenario).map_err(|e| scenario_err(py, &e))?;
        Ok(PySimulation { sim })
    }

    /// Process up to `max_events` events (without holding the GIL); returns True once the
    /// run is over.
    #[pyo3(signature = (max_events = 200_000))]
    fn step(&mut self, py: Python<'_>, max_events: u64) -> bool {
        let sim = &mut self.sim;
        py.allow_threads(move || sim.step(max_events))
    }

    /// Run to the end (without holding the GIL).
    fn run(&mut self, py: Python<'_>) {
        let sim = &mut self.sim;
        py.allow_threads(move || sim.run())
    }

    /// `now_ns, stop_ns, flows_done, flows_total, events, finished`.
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py_json(py, &self.sim.progress())
    }

    /// The run's summary (the same dict as `summary.json`).
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py_json(py, &self.sim.summary())
    }

    /// Packet accounting: `sent, delivered, dropped, in_flight, holds`.
    fn conservation<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.sim.conservation();
        let d = PyDict::new(py);
        d.set_item("sent", c.sent)?;
        d.set_item("delivered", c.delivered)?;
        d.set_item("dropped", c.dropped)?;
        d.set_item("in_flight", c.in_flight)?;
        d.set_item("holds", c.holds())?;
        Ok(d)
    }

    /// Write `flows.csv`, `summary.json` and (if ports were sampled) `queues.csv` into
    /// `dir` (created if needed); returns the summary.
    fn write_outputs<'py>(&self, py: Python<'py>, dir: PathBuf) -> PyResult<Bound<'py, PyAny>> {
        let summary =
            self.sim.write_outputs(&dir).map_err(|e| PyOSError::new_err(format!("writing {}: {e}", dir.display())))?;
        to_py_json(py, &summary)
    }

    /// The typed scenario of this run, as a dict.
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py_json(py, self.sim.scenario())
    }

    fn __repr__(&self) -> String {
        let p = self.sim.progress();
        format!(
            "Simulation(name={:?}, now_ns={}, flows={}/{}, finished={})",
            self.sim.scenario().name,
            p.now_ns,
            p.flows_done,
            p.flows_total,
            p.finished
        )
    }
}

/// The emulator's switch: `gradwire-emu`'s command line (`run | check | sweep`, `argv`
/// without the program name) in this process, returning its exit code. `gradwire emulate`
/// runs it in a child process (`python -m gradwire.emu.switch`), so the switch comes with
/// the extension: no second binary to build, install or find. A run installs its own
/// SIGINT/SIGTERM/SIGHUP handlers and never returns to Python until it has torn its
/// namespaces down.
#[pyfunction]
fn emu_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.allow_threads(|| gradwire_emu::cli::main(&argv))
}

/// The simulator's embedded DNN profiles as {name: JSON text} (`gradwire.models` parses
/// them): one copy of the data, in the Rust crate, for both languages.
#[pyfunction]
fn model_profiles() -> std::collections::BTreeMap<&'static str, &'static str> {
    gradwire_sim::models::PROFILES.iter().copied().collect()
}

/// The minimum RTO (µs) the runtime's control connections get from this kernel
/// (`gradwire_net::control::recover_fast` on a loopback connection), `None` where the kernel
/// lacks the option (they keep Linux's 200 ms).
#[pyfunction]
fn control_rto_min_us() -> PyResult<Option<u32>> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
    Ok(gradwire_net::control::recover_fast(&stream))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add_function(wrap_pyfunction!(load_scenario, m)?)?;
    m.add_function(wrap_pyfunction!(expand_scenario, m)?)?;
    m.add_function(wrap_pyfunction!(emu_main, m)?)?;
    m.add_function(wrap_pyfunction!(model_profiles, m)?)?;
    m.add_function(wrap_pyfunction!(control_rto_min_us, m)?)?;
    m.add_class::<PyRun>()?;
    m.add_class::<PySimulation>()?;
    m.add_class::<bytesched::PyBytesJob>()?;
    m.add_class::<sched::PyScheduler>()?;
    runtime::register(m)?;
    Ok(())
}
