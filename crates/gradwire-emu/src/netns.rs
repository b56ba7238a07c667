//! Hosts as network namespaces, built and removed with iproute2's `ip`.
//!
//! Every name carries the owning process's pid (`gwe<pid>h<i>`), so a run can always tell
//! its own namespaces from a crashed run's: [`sweep_stale`] removes those whose process
//! is gone, and every run sweeps before it builds.

use std::io;
use std::process::{Command, Stdio};

pub const PREFIX: &str = "gwe";

pub fn prefix_for(pid: u32) -> String {
    format!("{PREFIX}{pid}")
}

pub fn ns_name(prefix: &str, host: u32) -> String {
    format!("{prefix}h{host}")
}

pub fn tun_name(prefix: &str, host: u32) -> String {
    format!("{prefix}t{host}")
}

fn run(args: &[&str], stdin: Option<&str>) -> io::Result<String> {
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..]).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", args[0])))?;
    if let Some(text) = stdin {
        use std::io::Write;
        child.stdin.take().expect("piped").write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Create host `host`'s namespace and move its TUN device `tun` into it as `eth0` with
/// `addr`/24, IPv6 off (no router solicitations through the switch).
pub fn build_host(ns: &str, tun: &str, addr: &str, mtu: u32) -> io::Result<()> {
    run(&["ip", "netns", "add", ns], None)?;
    let sysctl = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"];
    let mut args = vec!["ip", "netns", "exec", ns, "sysctl", "-q", "-w"];
    args.extend(sysctl);
    run(&args, None)?;
    run(&["ip", "link", "set", "dev", tun, "netns", ns], None)?;
    let mtu = mtu.to_string();
    let batch = format!(
        "link set dev {tun} name eth0\naddr add {addr}/24 dev eth0\nlink set dev eth0 mtu {mtu} txqueuelen 1000 up\nlink set dev lo up\n"
    );
    run(&["ip", "-n", ns, "-batch", "-"], Some(&batch))?;
    Ok(())
}

/// Kill everything running in `ns`, then delete it. Errors are reported, not fatal: a
/// teardown does as much as it can.
pub fn remove(ns: &str) -> Result<(), String> {
    if let Ok(pids) = run(&["ip", "netns", "pids", ns], None) {
        for pid in pids.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            // SAFETY: kill(2) with a pid read from the namespace; harmless if it has exited.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    run(&["ip", "netns", "del", ns], None).map(|_| ()).map_err(|e| e.to_string())
}

pub fn list() -> Vec<String> {
    run(&["ip", "netns", "list"], None)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The pid in an emulator namespace name (`gwe<pid>h<i>`), if it is one.
pub fn owner(ns: &str) -> Option<u32> {
    let rest = ns.strip_prefix(PREFIX)?;
    let (pid, host) = rest.split_once('h')?;
    host.parse::<u32>().ok()?;
    pid.parse().ok()
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Remove every emulator namespace whose owning process is gone; returns their names.
pub fn sweep_stale() -> Vec<String> {
    let mut removed = Vec::new();
    for ns in list() {
        if let Some(pid) = owner(&ns) {
            if !alive(pid) && remove(&ns).is_ok() {
                removed.push(ns);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_owner() {
        let p = prefix_for(4_194_304);
        assert_eq!(owner(&ns_name(&p, 17)), Some(4_194_304));
        assert!(tun_name(&p, 249).len() < 16, "fits IFNAMSIZ");
        assert_eq!(owner("gw123-h0"), None, "the runtime tests' namespaces are not ours");
        assert_eq!(owner("gwe12h"), None);
        assert_eq!(owner("other"), None);
    }
}
