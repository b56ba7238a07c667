//! Communication scheduling as ByteScheduler does it (autobyte.md §II-C/D): gradient
//! tensors larger than the partition size `S_p` are cut into partitions, a credit window
//! of `S_c` bytes bounds what is in flight, and among ready partitions the front layer
//! goes first, because the next forward pass needs it first.
//!
//! Sans-IO: the driver posts a tensor when its gradient is ready ([`Scheduler::post`]),
//! starts whatever [`Scheduler::poll_start`] hands out, and reports each partition's end
//! ([`Scheduler::complete`]). `⟨S_p, S_c⟩` can change at any time
//! ([`Scheduler::reconfigure`]) without losing or re-sending a byte.
//!
//! Two choices differ from ByteScheduler's code, on purpose:
//! - The window is strict: a partition starts only if the bytes in flight stay within the
//!   credit. ByteScheduler starts one whenever any credit is left, so it overshoots by up
//!   to a partition. `S_c ≥ S_p` keeps progress guaranteed.
//! - A tensor is cut when it is posted, with the partition size in force then (as in
//!   ByteScheduler), and queued partitions larger than a new, smaller `S_p` are cut again,
//!   so that no queued partition can outgrow a new, smaller window.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

#[cfg(test)]
mod tests;

/// `⟨S_p, S_c⟩`, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Tensors larger than this are cut into partitions of this size (the last one smaller).
    pub partition_bytes: u64,
    /// At most this many bytes of started, unfinished partitions.
    pub credit_bytes: u64,
}

impl Config {
    /// No scheduling: whole tensors, no window (what a framework does by itself).
    pub const UNSCHEDULED: Config = Config { partition_bytes: u64::MAX, credit_bytes: u64::MAX };
    /// P3's fixed choice (autobyte.md §II-E): 160 KB partitions, credit of one partition.
    pub const P3: Config = Config { partition_bytes: 160_000, credit_bytes: 160_000 };

    /// `S_p` bytes and a credit of `multiple × S_p`, as the paper writes `⟨S_p, k×⟩`.
    pub fn new(partition_bytes: u64, credit_multiple: u64) -> Result<Config, ConfigError> {
        let c = Config { partition_bytes, credit_bytes: partition_bytes.saturating_mul(credit_multiple) };
        c.validate().map(|()| c)
    }

    /// `S_p > 0` and `S_c ≥ S_p`, or the window could never admit a partition.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.partition_bytes == 0 {
            return Err(ConfigError::ZeroPartition);
        }
        if self.credit_bytes < self.partition_bytes {
            return Err(ConfigError::CreditBelowPartition {
                partition_bytes: self.partition_bytes,
                credit_bytes: self.credit_bytes,
            });
        }
        Ok(())
    }
}

/// The most partitions queued at once (about 1 GiB of queue): a bound a caller's tensor
/// sizes or partition size cannot take the scheduler's memory past.
pub const MAX_QUEUED_PARTITIONS: u64 = 1 << 24;

/// A configuration the scheduler cannot run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `S_p` is 0 bytes.
    ZeroPartition,
    /// `S_c < S_p`: no partition could ever fit in the window.
    CreditBelowPartition {
        /// `S_p`, bytes.
        partition_bytes: u64,
        /// `S_c`, bytes.
        credit_bytes: u64,
    },
    /// Re-cutting the queued bytes with the new `S_p` would queue more than
    /// [`MAX_QUEUED_PARTITIONS`].
    TooManyPartitions {
        /// Partitions the new `S_p` would cut.
        partitions: u64,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroPartition => write!(f, "the partition size must be at least 1 byte"),
            ConfigError::CreditBelowPartition { partition_bytes, credit_bytes } => {
                write!(f, "the credit ({credit_bytes} bytes) must be at least one partition ({partition_bytes} bytes)")
            }
            ConfigError::TooManyPartitions { partitions } => write!(
                f,
                "this partition size would cut the queued bytes into {partitions} partitions (at most \
                 {MAX_QUEUED_PARTITIONS} may be queued)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Which ready partition goes next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// In the order tensors were posted (a framework's own order: back layers first).
    Fifo,
    /// Lowest layer index first; ties in posting order (ByteScheduler, P3).
    FrontLayerFirst,
}

/// Names one partition from [`Scheduler::poll_start`] to [`Scheduler::complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(pub u64);

/// A byte range of a posted tensor, to be sent as one unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The handle to pass to [`Scheduler::complete`]; unique within a scheduler.
    pub id: PartitionId,
    /// The caller's tensor id, as posted.
    pub tensor: u64,
    /// The tensor's layer (0 = front, the first one the forward pass needs).
    pub layer: u32,
    /// First byte of the partition within the tensor.
    pub offset: u64,
    /// Partition size, bytes (at most `S_p` in force when it was cut, never 0).
    pub len: u64,
}

/// A call the scheduler refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// `complete` of a partition that is not in flight (never started, or completed twice).
    NotInFlight(PartitionId),
    /// A tensor of zero bytes has nothing to schedule.
    EmptyTensor {
        /// The caller's tensor id.
        tensor: u64,
    },
    /// The tensor would bring the queue past [`MAX_QUEUED_PARTITIONS`] (or its bytes past
    /// `u64`): partitions are cut when posted, so this bounds the scheduler's memory.
    TooManyPartitions {
        /// The caller's tensor id.
        tensor: u64,
        /// Partitions it would add.
        partitions: u64,
    },
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::NotInFlight(id) => write!(f, "partition {} is not in flight", id.0),
            SchedError::EmptyTensor { tensor } => write!(f, "tensor {tensor} has no bytes"),
            SchedError::TooManyPartitions { tensor, partitions } => write!(
                f,
                "tensor {tensor} would add {partitions} partitions to the queue (at most {MAX_QUEUED_PARTITIONS} \
                 may be queued): use a larger partition size"
            ),
        }
    }
}

impl std::error::Error for SchedError {}

/// The partition-and-credit scheduler of one worker's outgoing gradients.
#[derive(Debug)]
pub struct Scheduler {
    config: Config,
    order: Order,
    /// Ready partitions by (layer or 0, the tensor's posting sequence, offset).
    queue: BTreeMap<(u32, u64, u64), Partition>,
    /// Posting sequence of each queued partition's tensor.
    posted: u64,
    in_flight: HashMap<PartitionId, u64>,
    in_flight_bytes: u64,
    queued_bytes: u64,
    next_id: u64,
}

impl Scheduler {
    /// An idle scheduler; fails if `config` does not validate.
    pub fn new(config: Config, order: Order) -> Result<Scheduler, ConfigError> {
        config.validate()?;
        Ok(Scheduler {
            config,
            order,
            queue: BTreeMap::new(),
            in_flight: HashMap::new(),
            in_flight_bytes: 0,
            queued_bytes: 0,
            next_id: 0,
            posted: 0,
        })
    }

    /// The `⟨S_p, S_c⟩` in force.
    pub fn config(&self) -> Config {
        self.config
    }

    /// How ready partitions are ordered.
    pub fn order(&self) -> Order {
        self.order
    }

    /// A tensor's gradient is ready: cut it with the current `S_p` and queue the pieces.
    pub fn post(&mut self, tensor: u64, layer: u32, bytes: u64) -> Result<(), SchedError> {
        if bytes == 0 {
            return Err(SchedError::EmptyTensor { tensor });
        }
        let partitions = bytes.div_ceil(self.config.partition_bytes);
        let queued_bytes = self.queued_bytes.checked_add(bytes);
        if partitions > MAX_QUEUED_PARTITIONS - self.queue.len() as u64 || queued_bytes.is_none() {
            return Err(SchedError::TooManyPartitions { tensor, partitions });
        }
        let seq = self.posted;
        self.posted += 1;
        self.queue_range(seq, tensor, layer, 0, bytes);
        self.queued_bytes += bytes;
        Ok(())
    }

    /// Queue `[offset, offset + bytes)` of a tensor cut with the current `S_p`.
    fn queue_range(&mut self, seq: u64, tensor: u64, layer: u32, mut offset: u64, bytes: u64) {
        let end = offset + bytes;
        let class = match self.order {
            Order::Fifo => 0,
            Order::FrontLayerFirst => layer,
        };
        while offset < end {
            let len = (end - offset).min(self.config.partition_bytes);
            let id = PartitionId(self.next_id);
            self.next_id += 1;
            self.queue.insert((class, seq, offset), Partition { id, tensor, layer, offset, len });
            offset += len;
        }
    }

    /// The next partition to start now, if the credit window admits it.
    pub fn poll_start(&mut self) -> Option<Partition> {
        let (&key, head) = self.queue.first_key_value()?;
        if self.in_flight_bytes.saturating_add(head.len) > self.config.credit_bytes {
            return None;
        }
        let p = self.queue.remove(&key).expect("head exists");
        self.queued_bytes -= p.len;
        self.in_flight_bytes += p.len;
        self.in_flight.insert(p.id, p.len);
        Some(p)
    }

    /// A started partition has been delivered: its bytes return to the window.
    pub fn complete(&mut self, id: PartitionId) -> Result<(), SchedError> {
        let len = self.in_flight.remove(&id).ok_or(SchedError::NotInFlight(id))?;
        self.in_flight_bytes -= len;
        Ok(())
    }

    /// New `⟨S_p, S_c⟩` from now on: the credit applies to the next start (partitions in
    /// flight stay in flight, so a smaller window waits until enough of them complete);
    /// `S_p` applies to tensors posted from now on and to queued partitions larger than it,
    /// which are cut again in place.
    pub fn reconfigure(&mut self, config: Config) -> Result<(), ConfigError> {
        config.validate()?;
        let partitions: u64 = self.queue.values().map(|p| p.len.div_ceil(config.partition_bytes)).sum();
        if partitions > MAX_QUEUED_PARTITIONS {
            return Err(ConfigError::TooManyPartitions { partitions });
        }
        self.config = config;
        let too_big: Vec<_> =
            self.queue.iter().filter(|(_, p)| p.len > config.partition_bytes).map(|(k, _)| *k).collect();
        for key in too_big {
            let p = self.queue.remove(&key).expect("listed above");
            self.queue_range(key.1, p.tensor, p.layer, p.offset, p.len);
        }
        Ok(())
    }

    /// Bytes of started, not yet completed partitions: the credit in use.
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }

    /// Bytes posted and not yet started.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Partitions posted and not yet started.
    pub fn queued_partitions(&self) -> usize {
        self.queue.len()
    }

    /// Nothing queued and nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight.is_empty()
    }
}
