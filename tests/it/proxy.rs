//! `dcp proxy`: the gateway run as a process between a client and a fake upstream, and the
//! proof that a proxied conversation is pruned as `dcp serve` prunes the same history.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `dcp proxy`, stopped (SIGTERM, so that it saves) when dropped.
pub struct ProxyProcess {
    child: Child,
    pub port: u16,
}

impl ProxyProcess {
    /// Starts `dcp proxy` on a free port of 127.0.0.1 in front of `upstream`, with `env`.
    pub fn start<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        upstream: &str,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> ProxyProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dcp"))
            .args(["proxy", "--listen", "127.0.0.1:0", "--upstream", upstream])
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start dcp proxy");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line
            .split("http://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("dcp proxy did not say where it listens: {line:?}"));
        ProxyProcess { child, port }
    }

    /// Stops the proxy as Ctrl-C would, and waits for it to save and exit; returns whether it
    /// exited normally.
    pub fn stop(mut self) -> bool {
        self.terminate()
    }

    fn terminate(&mut self) -> bool {
        // SAFETY: kill only sends a signal to the child this test started.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        self.child.wait().is_ok_and(|s| s.success())
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
    }
}
