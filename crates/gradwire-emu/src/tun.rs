//! TUN devices: one per emulated host, created in the root namespace by this process and
//! then moved into the host's namespace. The file descriptor stays attached across the
//! move, and the device disappears when the last descriptor closes, so a crash of the
//! switch leaves no interface behind.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO_ECN: libc::c_uint = 0x08;
const TUN_F_USO4: libc::c_uint = 0x20;
const TUN_F_USO6: libc::c_uint = 0x40;

#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

pub struct Tun {
    fd: OwnedFd,
    pub name: String,
}

impl Tun {
    /// A non-blocking layer-3 TUN device (no packet-information prefix) called `name`.
    /// With `offload`, every packet is preceded by a virtio-net header and the kernel may
    /// hand over (and take) TCP super-packets with partial checksums (`crate::offload`).
    pub fn create(name: &str, offload: bool) -> io::Result<Tun> {
        if name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("interface name {name:?} is too long")));
        }
        let path: &CStr = c"/dev/net/tun";
        // SAFETY: a valid NUL-terminated path; the result is checked.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("open /dev/net/tun: {e}")));
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TUN | IFF_NO_PI | if offload { IFF_VNET_HDR } else { 0 },
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is laid out as.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")));
        }
        if offload {
            let tso = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO_ECN;
            // SAFETY: TUNSETOFFLOAD takes the feature bits by value.
            let set = |features: libc::c_uint| unsafe {
                libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, features as libc::c_ulong) >= 0
            };
            // UDP segmentation (kernel >= 6.2 knows it; both families or neither), else TCP only
            if !set(tso | TUN_F_USO4 | TUN_F_USO6) && !set(tso) {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("TUNSETOFFLOAD {name}: {e}")));
            }
        }
        Ok(Tun { fd, name: name.to_string() })
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// One packet into `buf`; `Ok(None)` when none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let n = unsafe { libc::read(self.raw(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        }
    }

    /// Hand one packet, given in parts, to the host's kernel.
    pub fn send_parts(&self, parts: &[std::io::IoSlice<'_>]) -> io::Result<()> {
        // SAFETY: IoSlice is ABI-compatible with iovec; every slice is valid.
        let n = unsafe { libc::writev(self.raw(), parts.as_ptr().cast(), parts.len() as libc::c_int) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Hand one packet to the host's kernel.
    pub fn send(&self, pkt: &[u8]) -> io::Result<()> {
        // SAFETY: `pkt` is valid for `pkt.len()` bytes.
        let n = unsafe { libc::write(self.raw(), pkt.as_ptr().cast(), pkt.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
