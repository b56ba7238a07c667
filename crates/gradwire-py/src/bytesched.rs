//! `gradwire._core.BytesJob`: a simulated training job whose gradients go through
//! ByteScheduler's scheduler (`gradwire_sim::bytesched`), stepped iteration by iteration so
//! that a tuner can measure a configuration, change it and go on without restarting.

use gradwire_sim::bytesched::{Job, JobCfg, SchedCfg};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::to_py_json;

#[pyclass(name = "BytesJob", module = "gradwire._core")]
pub struct PyBytesJob {
    job: Job,
}

fn sched(partition_bytes: Option<u64>, credit_bytes: Option<u64>, fifo: bool) -> SchedCfg {
    SchedCfg { partition_bytes, credit_bytes, fifo }
}

#[pymethods]
impl PyBytesJob {
    /// `config_json`: the job (model, workers, pattern, host_gbps, sched, conditions) as JSON.
    #[new]
    fn new(config_json: &str) -> PyResult<Self> {
        let de = &mut serde_json::Deserializer::from_str(config_json);
        let cfg: JobCfg = serde_path_to_error::deserialize(de)
            .map_err(|e| PyValueError::new_err(format!("{}: {}", e.path(), e.inner())))?;
        Ok(PyBytesJob { job: Job::new(cfg).map_err(PyValueError::new_err)? })
    }

    /// ⟨S_p, S_c⟩ from the next iteration on; `partition_bytes=None` turns scheduling off.
    #[pyo3(signature = (partition_bytes, credit_bytes = None, fifo = false))]
    fn set_sched(&mut self, partition_bytes: Option<u64>, credit_bytes: Option<u64>, fifo: bool) -> PyResult<()> {
        self.job.set_sched(sched(partition_bytes, credit_bytes, fifo)).map_err(PyValueError::new_err)
    }

    /// Run `iterations` more iterations (without holding the GIL); returns one dict per
    /// iteration (samples_per_s, duration_s, the configuration, bandwidths, backward times).
    fn run<'py>(&mut self, py: Python<'py>, iterations: u32) -> PyResult<Bound<'py, PyAny>> {
        let job = &mut self.job;
        let stats = py.allow_threads(|| job.run(iterations).map(<[_]>::to_vec)).map_err(PyRuntimeError::new_err)?;
        to_py_json(py, &stats)
    }

    /// Iterations completed so far.
    #[getter]
    fn completed(&self) -> u32 {
        self.job.completed()
    }

    /// The job's configuration (with every default filled in), as JSON.
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(self.job.config()).map_err(|e| PyValueError::new_err(e.to_string()))
    }
}
