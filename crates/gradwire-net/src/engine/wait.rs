//! Sleeping between turns: a precise wait, and a data socket that wakes the engine once
//! per batch of datagrams rather than once per datagram.
//!
//! - **Precise sleeps.** mio rounds a timeout up to whole milliseconds (`epoll_wait`), so a
//!   pacer's deadline 250 µs away either slept 1 ms or (under 50 µs) was spun for. The
//!   engine waits with `epoll_pwait2` (nanoseconds; Linux 5.11) on mio's epoll instance,
//!   with the thread's timer slack cut from the default 50 µs, and never spins; on older
//!   kernels it falls back to mio's rounding and spins only for deadlines under [`SPIN`].
//! - **Receive moderation** (as NAPI does for a NIC): the data socket is registered
//!   one-shot. A datagram that arrives while the engine sleeps wakes it and disarms the
//!   socket; while reads keep finding datagrams, the engine reads again on its own clock
//!   (every `interval`, and in any turn that runs anyway close to that), and it re-arms the
//!   socket only after a read finds it empty. At 1 Gbit/s a wake per arriving datagram was
//!   a turn every 12 µs per rank; now one turn reads a pacing burst's worth.
//!
//! The engine reads its events only for this: which control links became readable (the
//! others are not read) and whether the data socket woke it.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use gradwire_core::time::Time;

/// Deadlines closer than this are spun for, only where the kernel lacks `epoll_pwait2`.
const SPIN: Duration = Duration::from_micros(50);
/// Between calls, datagrams left in the socket for the next call are looked at this often
/// (at 100 Gbit/s half of a 32 MB socket buffer fills in 1.3 ms).
const SKIPPED_RECHECK: Time = 1_000_000_000; // 1 ms
/// The engine thread's timer slack (the kernel's default is 50 µs).
const TIMER_SLACK_NS: libc::c_ulong = 5_000;

pub(super) struct Waiter {
    epfd: RawFd,
    /// The data socket and its epoll token.
    udp: RawFd,
    udp_token: u64,
    /// The data socket is armed: a datagram wakes the engine.
    armed: bool,
    /// Disarmed: when to read the data socket next.
    pub(super) rx_next: Option<Time>,
    /// How often a disarmed socket is read.
    pub(super) interval: Time,
    /// The data socket woke the engine (it is disarmed now).
    pub(super) rx_woken: bool,
    /// `epoll_pwait2` is there (else: millisecond timeouts, short spins).
    precise: bool,
    events: Vec<libc::epoll_event>,
    /// Waits that returned (wakes), and of them those woken by the data socket.
    pub(super) wakes: u64,
    pub(super) rx_wakes: u64,
}

impl Waiter {
    /// Registers `udp` one-shot (armed) in the epoll instance `epfd` under `udp_token`.
    pub(super) fn new(epfd: RawFd, udp: RawFd, udp_token: u64, interval: Time) -> io::Result<Self> {
        let mut w = Waiter {
            epfd,
            udp,
            udp_token,
            armed: false,
            rx_next: None,
            interval,
            rx_woken: false,
            precise: true,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
            wakes: 0,
            rx_wakes: 0,
        };
        w.ctl(libc::EPOLL_CTL_ADD)?;
        w.armed = true;
        Ok(w)
    }

    fn ctl(&self, op: libc::c_int) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLONESHOT) as u32, u64: self.udp_token };
        // SAFETY: plain syscall on descriptors this engine owns; `ev` outlives the call.
        if unsafe { libc::epoll_ctl(self.epfd, op, self.udp, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Cuts the calling thread's timer slack, so short sleeps end on time.
    pub(super) fn tighten_timer_slack() {
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0) };
    }

    /// The data socket is due a read at `now`: it woke the engine, or it is disarmed and
    /// its next read is less than half an interval away (a turn that runs anyway reads).
    pub(super) fn rx_due(&self, now: Time) -> bool {
        self.rx_woken || self.rx_next.is_some_and(|t| t <= now + self.interval / 2)
    }

    /// A read of the data socket at `now` took `count` datagrams; `more`: it stopped at
    /// its byte budget, so more may be waiting. An empty read re-arms the socket.
    pub(super) fn after_read(&mut self, now: Time, count: usize, more: bool) {
        self.rx_woken = false;
        if more {
            self.rx_next = Some(now);
        } else if count > 0 {
            self.rx_next = Some(now + self.interval);
        } else {
            self.rx_next = None;
            if !self.armed {
                match self.ctl(libc::EPOLL_CTL_MOD) {
                    Ok(()) => self.armed = true,
                    // cannot happen for a registered socket; keep polling it
                    Err(_) => self.rx_next = Some(now + self.interval),
                }
            }
        }
    }

    /// The data socket was due but left unread (between calls, see `should_read`): look
    /// again [`SKIPPED_RECHECK`] later (it is read once half full, or once a call is posted).
    pub(super) fn skipped_read(&mut self, now: Time) {
        self.rx_woken = false;
        if !self.armed {
            self.rx_next = Some(now + SKIPPED_RECHECK);
        }
    }

    /// A call was posted: a disarmed socket (left unread between calls, or still polled
    /// from the last call) is read in the next turn, not up to [`SKIPPED_RECHECK`] later.
    pub(super) fn read_soon(&mut self, now: Time) {
        if !self.armed {
            self.rx_next = Some(now);
        }
    }

    /// The next deadline of the data socket's reads, if it is disarmed.
    pub(super) fn deadline(&self) -> Option<Time> {
        if self.armed {
            None
        } else {
            self.rx_next
        }
    }

    /// Sleeps until an event or `timeout` (`None`: until an event); calls `on_token` with
    /// the token of every event other than the data socket's. `Ok(())` on a wake or a
    /// timeout; `Interrupted` errors are swallowed.
    pub(super) fn wait(&mut self, timeout: Option<Duration>, mut on_token: impl FnMut(u64)) -> io::Result<()> {
        let n = match self.epoll(timeout) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        if n > 0 {
            self.wakes += 1;
        }
        for ev in &self.events[..n] {
            let token = ev.u64;
            if token == self.udp_token {
                // one-shot: the kernel disarmed it
                self.armed = false;
                self.rx_woken = true;
                self.rx_wakes += 1;
            } else {
                on_token(token);
            }
        }
        Ok(())
    }

    fn epoll(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let cap = self.events.len() as libc::c_int;
        let events = self.events.as_mut_ptr();
        if self.precise {
            let ts = timeout.map(|d| libc::timespec {
                tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            });
            let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: `events` has room for `cap` entries; `tsp` is null or points to `ts`,
            // which lives through the call; no signal mask is passed.
            let r = unsafe {
                libc::syscall(libc::SYS_epoll_pwait2, self.epfd, events, cap, tsp, std::ptr::null::<u8>(), 0usize)
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOSYS) {
                return Err(e);
            }
            self.precise = false;
        }
        // No epoll_pwait2: millisecond timeouts, rounded up, and short deadlines spun for.
        let ms = match timeout {
            None => -1,
            Some(d) if d < SPIN => {
                std::thread::yield_now();
                0
            }
            Some(d) => d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int,
        };
        // SAFETY: as above.
        let r = unsafe { libc::epoll_wait(self.epfd, events, cap, ms) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }
}
