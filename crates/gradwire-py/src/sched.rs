//! `gradwire._core.Scheduler`: the core's partition-and-credit scheduler (ByteScheduler),
//! the same code the simulated job runs, for the PyTorch DDP hook.

use gradwire_core::sched::{Config, Order, PartitionId, Scheduler};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

#[pyclass(name = "Scheduler", module = "gradwire._core")]
pub struct PyScheduler {
    inner: Scheduler,
}

#[pymethods]
impl PyScheduler {
    /// Partitions of `partition_bytes` (S_p), at most `credit_bytes` (S_c) of them started
    /// and not completed; front layer first, or in posting order with `front_first=False`.
    #[new]
    #[pyo3(signature = (partition_bytes, credit_bytes, front_first = true))]
    fn new(partition_bytes: u64, credit_bytes: u64, front_first: bool) -> PyResult<Self> {
        let order = if front_first { Order::FrontLayerFirst } else { Order::Fifo };
        Ok(PyScheduler { inner: Scheduler::new(Config { partition_bytes, credit_bytes }, order).map_err(err)? })
    }

    /// A tensor of `bytes` whose gradient is ready; `layer` 0 is the front layer.
    fn post(&mut self, tensor: u64, layer: u32, bytes: u64) -> PyResult<()> {
        self.inner.post(tensor, layer, bytes).map_err(err)
    }

    /// The next partition the credit admits, as (id, tensor, layer, offset, length), or None.
    fn poll_start(&mut self) -> Option<(u64, u64, u32, u64, u64)> {
        self.inner.poll_start().map(|p| (p.id.0, p.tensor, p.layer, p.offset, p.len))
    }

    /// A started partition is done: its bytes return to the credit.
    fn complete(&mut self, id: u64) -> PyResult<()> {
        self.inner.complete(PartitionId(id)).map_err(err)
    }

    /// New ⟨S_p, S_c⟩ from now on, without losing a partition.
    fn reconfigure(&mut self, partition_bytes: u64, credit_bytes: u64) -> PyResult<()> {
        self.inner.reconfigure(Config { partition_bytes, credit_bytes }).map_err(err)
    }

    #[getter]
    fn partition_bytes(&self) -> u64 {
        self.inner.config().partition_bytes
    }

    #[getter]
    fn credit_bytes(&self) -> u64 {
        self.inner.config().credit_bytes
    }

    #[getter]
    fn in_flight_bytes(&self) -> u64 {
        self.inner.in_flight_bytes()
    }

    #[getter]
    fn queued_bytes(&self) -> u64 {
        self.inner.queued_bytes()
    }
}
