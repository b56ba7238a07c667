//! How to find the job: `MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`, the token.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::*;
use crate::NetError;

/// How to find the job. `from_env` reads `MASTER_ADDR`, `MASTER_PORT`, `RANK`,
/// `WORLD_SIZE` and `GRADWIRE_TOKEN`.
#[derive(Clone, Debug)]
pub struct RendezvousConfig {
    pub master_addr: String,
    pub master_port: u16,
    pub rank: u32,
    pub world_size: u32,
    /// Shared secret of the job; a process with another token is refused.
    pub token: String,
    /// Give up (with `NetError::Timeout`) if the job is not formed within this time.
    pub timeout: Duration,
    /// Payload bytes per datagram; `None`: from the path MTU (see the module docs).
    pub mss: Option<u32>,
    /// Tag every datagram and control frame with a key derived from the token
    /// ([`crate::auth`]); every rank must agree (`GRADWIRE_AUTH=1`).
    pub authenticated: bool,
}

impl RendezvousConfig {
    /// A configuration given as arguments: empty token, [`DEFAULT_TIMEOUT`].
    pub fn new(master_addr: impl Into<String>, master_port: u16, rank: u32, world_size: u32) -> Self {
        RendezvousConfig {
            master_addr: master_addr.into(),
            master_port,
            rank,
            world_size,
            token: String::new(),
            timeout: DEFAULT_TIMEOUT,
            mss: None,
            authenticated: false,
        }
    }

    /// Read the job from the environment, as torchrun sets it:
    /// - `MASTER_ADDR` (host name or IP of rank 0), `MASTER_PORT` (1..=65535),
    ///   `RANK` (0..WORLD_SIZE), `WORLD_SIZE` (1..=16384): required;
    /// - `GRADWIRE_TOKEN`: the job's shared secret (`gradwire launch` sets a random one).
    ///   Unset: `torchelastic:<TORCHELASTIC_RUN_ID>` under torchrun, else the empty token,
    ///   which only keeps apart jobs that set different tokens; set one per job whenever
    ///   several jobs may share hosts or ports;
    /// - `GRADWIRE_AUTH`: 1 to authenticate every datagram and frame ([`crate::auth`]);
    /// - `GRADWIRE_RENDEZVOUS_TIMEOUT`: seconds (decimals allowed) each rendezvous step may
    ///   take, default 30;
    /// - `GRADWIRE_MSS`: payload bytes per datagram, the same on every rank; unset: from
    ///   the path MTU (see the module docs).
    ///
    /// A missing or garbled variable gives [`NetError::Config`] naming it and its value.
    pub fn from_env() -> Result<Self, NetError> {
        Self::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// [`from_env`](Self::from_env) with another source of variables (tests, launchers).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, NetError> {
        let required = |name: &str, hint: &str| -> Result<String, NetError> {
            match get(name) {
                Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
                Some(_) => Err(NetError::Config(format!("{name} is set but empty: expected {hint}"))),
                None => Err(NetError::Config(format!("{name} is not set: expected {hint}"))),
            }
        };
        let garbled =
            |name: &str, value: &str, hint: &str| NetError::Config(format!("{name} is {value:?}: expected {hint}"));

        let master_addr = required("MASTER_ADDR", "the host name or IP address of rank 0, e.g. 10.0.0.1")?;
        let port_hint = "a TCP port in 1..=65535 that rank 0 listens on, e.g. 29500";
        let port_text = required("MASTER_PORT", port_hint)?;
        let master_port = match port_text.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err(garbled("MASTER_PORT", &port_text, port_hint)),
        };
        let ws_hint = format!("the number of ranks of the job, an integer in 1..={MAX_WORLD_SIZE}");
        let ws_text = required("WORLD_SIZE", &ws_hint)?;
        let world_size = match ws_text.parse::<u32>() {
            Ok(n) if (1..=MAX_WORLD_SIZE).contains(&n) => n,
            _ => return Err(garbled("WORLD_SIZE", &ws_text, &ws_hint)),
        };
        let rank_hint = format!("this process's rank, an integer in 0..{world_size} (WORLD_SIZE is {world_size})");
        let rank_text = required("RANK", &rank_hint)?;
        let rank = match rank_text.parse::<u32>() {
            Ok(r) if r < world_size => r,
            _ => return Err(garbled("RANK", &rank_text, &rank_hint)),
        };
        let token = get("GRADWIRE_TOKEN")
            .or_else(|| get("TORCHELASTIC_RUN_ID").map(|id| format!("torchelastic:{id}")))
            .unwrap_or_default();
        if token.len() > MAX_TOKEN_LEN {
            return Err(NetError::Config(format!(
                "GRADWIRE_TOKEN is {} bytes long: at most {MAX_TOKEN_LEN} bytes are allowed",
                token.len()
            )));
        }
        let timeout = match get("GRADWIRE_RENDEZVOUS_TIMEOUT") {
            None => DEFAULT_TIMEOUT,
            Some(text) => {
                let hint = "a number of seconds > 0, e.g. 30 or 0.5";
                match text.trim().parse::<f64>() {
                    Ok(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Duration::from_secs_f64(s),
                    _ => return Err(garbled("GRADWIRE_RENDEZVOUS_TIMEOUT", &text, hint)),
                }
            }
        };
        let mss = match get("GRADWIRE_MSS") {
            None => None,
            Some(text) => {
                let hint = format!("payload bytes per datagram in {MIN_MSS}..={MAX_MSS} (1440 for 1500-byte packets), the same on every rank");
                match text.trim().parse::<u32>() {
                    Ok(m) if (MIN_MSS..=MAX_MSS).contains(&m) => Some(m),
                    _ => return Err(garbled("GRADWIRE_MSS", &text, &hint)),
                }
            }
        };
        let authenticated = match get("GRADWIRE_AUTH").as_deref().map(str::trim) {
            None | Some("" | "0" | "false" | "no") => false,
            Some("1" | "true" | "yes") => true,
            Some(text) => {
                return Err(garbled(
                    "GRADWIRE_AUTH",
                    text,
                    "1 to authenticate every datagram and control frame, 0 not to",
                ))
            }
        };
        let cfg = RendezvousConfig { master_addr, master_port, rank, world_size, token, timeout, mss, authenticated };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check a configuration built by hand (what `from_lookup` checks).
    pub fn validate(&self) -> Result<(), NetError> {
        let bad = |m: String| Err(NetError::Config(m));
        if self.master_addr.trim().is_empty() {
            return bad("MASTER_ADDR is empty: expected the host name or IP address of rank 0".into());
        }
        if self.master_port == 0 {
            return bad("MASTER_PORT is 0: expected a TCP port in 1..=65535".into());
        }
        if !(1..=MAX_WORLD_SIZE).contains(&self.world_size) {
            return bad(format!("WORLD_SIZE is {}: expected an integer in 1..={MAX_WORLD_SIZE}", self.world_size));
        }
        if self.rank >= self.world_size {
            return bad(format!(
                "RANK is {} but WORLD_SIZE is {}: ranks are 0..{}",
                self.rank, self.world_size, self.world_size
            ));
        }
        if self.token.len() > MAX_TOKEN_LEN {
            return bad(format!("GRADWIRE_TOKEN is {} bytes long: at most {MAX_TOKEN_LEN} allowed", self.token.len()));
        }
        if self.timeout.is_zero() {
            return bad("GRADWIRE_RENDEZVOUS_TIMEOUT is 0: expected a number of seconds > 0".into());
        }
        // The job key is derived from the token and a session id that every datagram
        // carries in clear: a token anyone can read authenticates nothing.
        let public = if self.token.is_empty() {
            Some("empty")
        } else if self.token.starts_with("torchelastic:") {
            Some("torchrun's run id, which is on its command line")
        } else {
            None
        };
        if let (true, Some(what)) = (self.authenticated, public) {
            return bad(format!(
                "GRADWIRE_AUTH needs a secret job token, and the token is {what}: set GRADWIRE_TOKEN to the same \
                 secret on every rank (e.g. python -c 'import secrets; print(secrets.token_hex(16))'; \
                 `gradwire launch` sets one)"
            ));
        }
        Ok(())
    }

    /// `MASTER_ADDR:MASTER_PORT` as a person writes it (IPv6 literals in brackets).
    pub fn master_display(&self) -> String {
        let a = self.master_addr.trim();
        if a.contains(':') && !a.starts_with('[') {
            format!("[{a}]:{}", self.master_port)
        } else {
            format!("{a}:{}", self.master_port)
        }
    }

    pub(super) fn resolve_master(&self) -> Result<SocketAddr, String> {
        let host = self.master_addr.trim().trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = (host, self.master_port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve MASTER_ADDR {:?}: {e}", self.master_addr))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| format!("MASTER_ADDR {:?} resolves to no address", self.master_addr))
    }
}
