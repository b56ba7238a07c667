//! One collective call at one rank: the user's buffer, the schedule, what has finished,
//! and the report.

use std::ops::Range;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use gradwire_core::collective::{Op, RankExec, Schedule, TransferId};

use crate::error::NetError;

/// Element type of the buffer; decides how `Reduce` adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F64,
}

impl Dtype {
    pub fn size(self) -> u32 {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }
}

/// The caller's memory, borrowed for the duration of the call. The caller guarantees it
/// stays valid and untouched until the call's reply is received ([`crate::Communicator`]).
#[derive(Clone, Copy, Debug)]
pub struct RawBuffer {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: the engine thread is the only user of the buffer while the call runs.
unsafe impl Send for RawBuffer {}

impl RawBuffer {
    pub fn from_slice<T: bytemuck::Pod>(s: &mut [T]) -> Self {
        let b = bytemuck::cast_slice_mut::<T, u8>(s);
        RawBuffer { ptr: b.as_mut_ptr(), len: b.len() }
    }

    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: see the type's contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: see the type's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// A range of the buffer that arrived as zeros (lost within the loss bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bubble {
    /// The rank whose data was lost.
    pub src: u32,
    pub transfer: TransferId,
    /// Byte offset in the buffer, and length.
    pub offset: u64,
    pub len: u64,
}

/// What one rank saw of one collective call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub algorithm: String,
    pub seconds: f64,
    /// Payload bytes this rank put on the wire, resends included.
    pub bytes_sent: u64,
    /// Payload bytes placed (each byte once).
    pub bytes_received: u64,
    /// Bytes this rank filled with zeros; the sum of `bubbles`' lengths.
    pub bytes_lost: u64,
    pub bubbles: Vec<Bubble>,
    /// Data packets sent again (resend rounds / loss recovery).
    pub retransmits: u64,
    pub packets_sent: u64,
    pub transfers_sent: u32,
    pub transfers_received: u32,
    /// Smallest delivered share over this rank's receives (1.0 without loss or receives).
    pub min_delivered_fraction: f64,
}

pub type Reply = Sender<Result<Report, NetError>>;

pub struct Job {
    pub call: u16,
    pub schedule: Arc<Schedule>,
    pub exec: RankExec,
    buf: RawBuffer,
    pub dtype: Dtype,
    /// Receive buffers, one per posted receive, 8-byte aligned for the reduction.
    scratch: Vec<Option<Vec<u64>>>,
    /// Receives placed straight into the caller's buffer (see [`Job::post_receive`]).
    direct: Vec<bool>,
    rank: u32,
    pub report: Report,
    started: Instant,
    pub last_progress: Instant,
    /// A packet of this call arrived since `last_progress` was last updated.
    pub progressed: bool,
    pub reply: Reply,
    /// This call as this rank made it ([`crate::descriptor`]).
    pub desc: Option<crate::descriptor::CallDesc>,
    /// Live peers whose descriptor of this call has not arrived yet.
    pub unverified: Vec<u32>,
}

impl Job {
    pub fn new(call: u16, schedule: Arc<Schedule>, rank: u32, buf: RawBuffer, dtype: Dtype, reply: Reply) -> Self {
        let exec = RankExec::new(&schedule, rank);
        let n = schedule.transfers.len();
        let now = Instant::now();
        let report = Report { algorithm: schedule.name.clone(), min_delivered_fraction: 1.0, ..Report::default() };
        Job {
            call,
            schedule,
            exec,
            buf,
            dtype,
            scratch: vec![None; n],
            direct: vec![false; n],
            rank,
            report,
            started: now,
            last_progress: now,
            progressed: false,
            reply,
            desc: None,
            unverified: Vec::new(),
        }
    }

    pub fn range(&self, t: TransferId) -> Range<u64> {
        self.schedule.transfers[t as usize].range.clone()
    }

    /// Payload of a data packet of send `t`: `len` bytes at `offset` of the transfer.
    pub fn payload(&self, t: TransferId, offset: u64, len: u32) -> &[u8] {
        let start = (self.range(t).start + offset) as usize;
        &self.buf.bytes()[start..start + len as usize]
    }

    /// The bytes send `t` carries, as f32 (for importance tagging); `None` for other types.
    pub fn send_f32(&self, t: TransferId) -> Option<&[f32]> {
        let r = self.range(t);
        let b = &self.buf.bytes()[r.start as usize..r.end as usize];
        (self.dtype == Dtype::F32).then(|| bytemuck::try_cast_slice(b).ok()).flatten()
    }

    /// Prepares receive `t`. A receive whose range no other transfer of this rank touches
    /// concurrently works straight on the caller's buffer: a `Copy` lands there (its
    /// bubbles are zeroed when it is applied, so the result is the same as through a
    /// zeroed scratch), a `Reduce` adds each packet's payload in place as it arrives (a
    /// bubble adds nothing, which is adding its zeros). The payload is touched once, from
    /// the receive buffer while it is still in cache, and no scratch is allocated. The
    /// endpoints hand each segment over at most once, so nothing is added twice. The price:
    /// a call that fails leaves a partly reduced buffer (its contents are unspecified then).
    ///
    /// "Concurrently": another send or receive of this rank over an overlapping range is
    /// fine when the two are ordered by the schedule's dependencies (one is among the
    /// other's transitive `after`). If `t` waits for it, it was delivered at its
    /// destination before `t` could start anywhere, and nothing placed or applied after
    /// that uses it (late data for an applied receive is dropped); if it waits for `t`,
    /// it starts after `t` was applied.
    pub fn post_receive(&mut self, t: TransferId) {
        let tr = &self.schedule.transfers[t as usize];
        let r = tr.range.clone();
        if !r.is_empty() && self.alone(t) {
            self.direct[t as usize] = true;
            return;
        }
        let bytes = r.end - r.start;
        self.scratch[t as usize] = Some(vec![0u64; bytes.div_ceil(8) as usize]);
    }

    /// No transfer of this rank overlapping `t`'s range runs concurrently with it.
    fn alone(&self, t: TransferId) -> bool {
        let s = &self.schedule;
        let r = &s.transfers[t as usize].range;
        s.transfers.iter().enumerate().all(|(i, o)| {
            let i = i as TransferId;
            i == t
                || (o.src != self.rank && o.dst != self.rank)
                || !(o.range.start < r.end && r.start < o.range.end)
                || depends(s, t, i)
                || depends(s, i, t)
        })
    }

    /// Puts a received payload at transfer offset `at` of receive `t`: into its scratch,
    /// or, for a direct receive, copied or added into the buffer.
    pub fn place(&mut self, t: TransferId, at: Range<u64>, payload: &[u8]) {
        if self.direct[t as usize] {
            let tr = &self.schedule.transfers[t as usize];
            let (base, op, dtype) = (tr.range.start, tr.op, self.dtype);
            let dst = &mut self.buf.bytes_mut()[(base + at.start) as usize..(base + at.end) as usize];
            match (op, dtype) {
                (Op::Copy, _) => dst.copy_from_slice(payload),
                (Op::Reduce, Dtype::F32) => add::<f32>(dst, payload),
                (Op::Reduce, Dtype::F64) => add::<f64>(dst, payload),
            }
        } else if let Some(s) = self.scratch[t as usize].as_mut() {
            let dst = &mut bytemuck::cast_slice_mut::<u64, u8>(s)[at.start as usize..at.end as usize];
            dst.copy_from_slice(payload);
        }
        self.report.bytes_received += at.end - at.start;
    }

    /// Where a payload for transfer offsets `at` of receive `t` may be read straight into
    /// place: only for a direct `Copy` (a reduce must add, so its payload needs a place
    /// of its own first), and only inside the transfer. Account for it with
    /// [`Job::landed`] once the endpoint has taken the segment.
    pub fn direct_dst(&mut self, t: TransferId, at: Range<u64>) -> Option<&mut [u8]> {
        let tr = &self.schedule.transfers[t as usize];
        if !self.direct[t as usize] || tr.op != Op::Copy || at.end > tr.range.end - tr.range.start || at.start >= at.end
        {
            return None;
        }
        let base = tr.range.start;
        Some(&mut self.buf.bytes_mut()[(base + at.start) as usize..(base + at.end) as usize])
    }

    /// A payload read in place through [`Job::direct_dst`] was taken by the endpoint.
    pub fn landed(&mut self, at: Range<u64>) {
        self.report.bytes_received += at.end - at.start;
    }

    /// Receive `t` is delivered: apply it to the buffer (bubbles are the scratch's zeros).
    pub fn apply(&mut self, t: TransferId, bubbles: &[Range<u64>]) {
        let tr = &self.schedule.transfers[t as usize];
        let (r, op, src) = (tr.range.clone(), tr.op, tr.src);
        let len = (r.end - r.start) as usize;
        if std::mem::take(&mut self.direct[t as usize]) {
            if op == Op::Copy {
                let dst = &mut self.buf.bytes_mut()[r.start as usize..r.end as usize];
                for b in bubbles {
                    dst[b.start as usize..b.end as usize].fill(0);
                }
            }
        } else {
            let Some(scratch) = self.scratch[t as usize].take() else { return };
            let got = &bytemuck::cast_slice::<u64, u8>(&scratch)[..len];
            let dtype = self.dtype;
            let dst = &mut self.buf.bytes_mut()[r.start as usize..r.end as usize];
            match (op, dtype) {
                (Op::Copy, _) => dst.copy_from_slice(got),
                (Op::Reduce, Dtype::F32) => add::<f32>(dst, got),
                (Op::Reduce, Dtype::F64) => add::<f64>(dst, got),
            }
        }
        let lost: u64 = bubbles.iter().map(|b| b.end - b.start).sum();
        for b in bubbles {
            self.report.bubbles.push(Bubble { src, transfer: t, offset: r.start + b.start, len: b.end - b.start });
        }
        self.report.bytes_lost += lost;
        self.report.transfers_received += 1;
        let frac = if len == 0 { 1.0 } else { 1.0 - lost as f64 / len as f64 };
        self.report.min_delivered_fraction = self.report.min_delivered_fraction.min(frac);
    }

    pub fn finish_report(&mut self) -> Report {
        self.report.seconds = self.started.elapsed().as_secs_f64();
        std::mem::take(&mut self.report)
    }
}

/// `a` waits (transitively, through `after`) for `b`. Bounded: a schedule too large to
/// search answers "no" (the receive then simply goes through a scratch buffer).
fn depends(s: &Schedule, a: TransferId, b: TransferId) -> bool {
    const LIMIT: usize = 1 << 16;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![a];
    while let Some(x) = stack.pop() {
        for &y in &s.transfers[x as usize].after {
            if y == b {
                return true;
            }
            if seen.len() >= LIMIT {
                return false;
            }
            if seen.insert(y) {
                stack.push(y);
            }
        }
    }
    false
}

/// `dst += src` elementwise; both are whole elements (ranges are element-aligned). The
/// payload of a datagram sits after its header, so `src` need not be aligned: elements are
/// read as bytes, which compiles to the same vector loads.
fn add<T: Elem>(dst: &mut [u8], src: &[u8]) {
    let n = T::SIZE;
    if let Ok(d) = bytemuck::try_cast_slice_mut::<u8, T>(dst) {
        for (a, s) in d.iter_mut().zip(src.chunks_exact(n)) {
            *a = *a + T::read(s);
        }
    } else {
        for (d, s) in dst.chunks_exact_mut(n).zip(src.chunks_exact(n)) {
            let a = T::read(d) + T::read(s);
            d.copy_from_slice(bytemuck::bytes_of(&a));
        }
    }
}

/// An element type `add` reduces.
trait Elem: bytemuck::Pod + std::ops::Add<Output = Self> {
    const SIZE: usize = std::mem::size_of::<Self>();
    fn read(b: &[u8]) -> Self;
}

impl Elem for f32 {
    fn read(b: &[u8]) -> Self {
        f32::from_ne_bytes(b.try_into().expect("4 bytes"))
    }
}

impl Elem for f64 {
    fn read(b: &[u8]) -> Self {
        f64::from_ne_bytes(b.try_into().expect("8 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use gradwire_core::collective::{ring, CollectiveOptions, Transfer};

    use super::*;

    fn job(s: Schedule, rank: u32, buf: &mut [f32]) -> Job {
        let (tx, _rx) = std::sync::mpsc::channel();
        let mut j = Job::new(0, Arc::new(s), rank, RawBuffer::from_slice(buf), Dtype::F32, tx);
        for t in j.schedule.clone().receives_of(rank) {
            j.post_receive(t);
        }
        j
    }

    #[test]
    fn every_ring_receive_is_direct() {
        for n in [2u32, 4, 5] {
            let s = ring(n, 4000 * n as u64, 4, &CollectiveOptions::default());
            for rank in 0..n {
                let mut buf = vec![0f32; 1000 * n as usize];
                let j = job(s.clone(), rank, &mut buf);
                for t in s.receives_of(rank) {
                    assert!(j.direct[t as usize], "{n} ranks, rank {rank}, transfer {t}");
                    assert!(j.scratch[t as usize].is_none());
                }
            }
        }
    }

    #[test]
    fn concurrent_reduces_into_one_range_use_scratch() {
        // A parameter server: ranks 1 and 2 push the same range to rank 0 at once.
        let push =
            |src| Transfer { src, dst: 0, range: 0..400, op: Op::Reduce, after: vec![], loss_bound: 0.0, priority: 1 };
        let s = Schedule { name: "x".into(), world: 3, bytes: 400, elem_bytes: 4, transfers: vec![push(1), push(2)] };
        let mut buf = vec![0f32; 100];
        let j = job(s, 0, &mut buf);
        assert!(!j.direct[0] && !j.direct[1] && j.scratch[0].is_some() && j.scratch[1].is_some());
    }

    /// Rank 0 sends bytes 8..24 of a 32-byte f32 buffer to rank 1, which may lose half of
    /// them and applies `op`.
    fn half_lossy(op: Op) -> Schedule {
        let a = Transfer { src: 0, dst: 1, range: 8..24, op, after: vec![], loss_bound: 0.5, priority: 1 };
        Schedule { name: "x".into(), world: 2, bytes: 32, elem_bytes: 4, transfers: vec![a] }
    }

    #[test]
    fn a_direct_reduce_adds_in_place_keeps_its_bubbles_and_ignores_late_data() {
        let mut buf = vec![9f32; 8];
        let mut j = job(half_lossy(Op::Reduce), 1, &mut buf);
        assert!(j.direct[0]);
        // The payload sits at an odd address, as after a datagram header.
        let mut wire = vec![0u8; 1];
        wire.extend_from_slice(&1.5f32.to_ne_bytes());
        j.place(0, 0..4, &wire[1..]);
        j.apply(0, &[4..16]);
        j.place(0, 4..8, &2f32.to_ne_bytes()); // after apply: dropped
        assert_eq!(j.report.bubbles, vec![Bubble { src: 0, transfer: 0, offset: 12, len: 12 }]);
        drop(j);
        assert_eq!(buf, vec![9.0, 9.0, 10.5, 9.0, 9.0, 9.0, 9.0, 9.0]);
    }

    #[test]
    fn add_handles_unaligned_sides_and_f64() {
        let mut d = [0u8; 1 + 16];
        let mut s = [0u8; 3 + 16];
        for (i, x) in [1.0f64, 2.0].iter().enumerate() {
            d[1 + 8 * i..9 + 8 * i].copy_from_slice(&x.to_ne_bytes());
            s[3 + 8 * i..11 + 8 * i].copy_from_slice(&(x * 10.0).to_ne_bytes());
        }
        add::<f64>(&mut d[1..], &s[3..]);
        let got: Vec<f64> = d[1..].chunks_exact(8).map(f64::read).collect();
        assert_eq!(got, vec![11.0, 22.0]);
    }

    #[test]
    fn an_unordered_overlapping_send_keeps_the_scratch() {
        // Rank 1 receives a copy of 0..400 while it sends 0..400 to rank 0, unordered.
        let a = Transfer { src: 0, dst: 1, range: 0..400, op: Op::Copy, after: vec![], loss_bound: 0.0, priority: 1 };
        let b = Transfer { src: 1, dst: 0, range: 0..400, op: Op::Copy, after: vec![], loss_bound: 0.0, priority: 1 };
        let s = Schedule { name: "x".into(), world: 2, bytes: 400, elem_bytes: 4, transfers: vec![a, b] };
        let mut buf = vec![0f32; 100];
        let j = job(s, 1, &mut buf);
        assert!(!j.direct[0] && j.scratch[0].is_some());
    }

    #[test]
    fn a_direct_receive_zeroes_its_bubbles_and_ignores_late_data() {
        let mut buf = vec![9f32; 8];
        let mut j = job(half_lossy(Op::Copy), 1, &mut buf);
        assert!(j.direct[0]);
        j.place(0, 0..4, &1f32.to_ne_bytes());
        j.apply(0, &[4..16]);
        j.place(0, 4..8, &2f32.to_ne_bytes()); // after apply: dropped
        drop(j);
        assert_eq!(buf, vec![9.0, 9.0, 1.0, 0.0, 0.0, 0.0, 9.0, 9.0]);
    }
}
