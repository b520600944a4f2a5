//! The machine's own programs the end-to-end tests drive: tmux (the TUI tests), Debian's
//! Chromium (the report, rendered headless) and ripgrep (OpenCode's grep and glob tools).
//!
//! A test finds each on `PATH`. On a fresh machine that lacks one, the first test that needs it
//! installs it from Debian's packages, as the tests install OpenCode and the clients from npm,
//! so that the README's `cargo test` passes with nothing installed by hand. Only one install
//! runs at a time, and a program that cannot be found or installed fails the test with what to
//! run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// A program the tests need, and the Debian package that has it.
#[derive(Debug, Clone, Copy)]
pub enum Program {
    Tmux,
    Chromium,
    Ripgrep,
}

impl Program {
    fn binary(self) -> &'static str {
        match self {
            Program::Tmux => "tmux",
            Program::Chromium => "chromium",
            Program::Ripgrep => "rg",
        }
    }

    fn package(self) -> &'static str {
        match self {
            Program::Tmux => "tmux",
            Program::Chromium => "chromium",
            Program::Ripgrep => "ripgrep",
        }
    }
}

/// One apt-get at a time: the tests run in parallel threads.
static INSTALL: Mutex<()> = Mutex::new(());

/// The path of `program`, installing its Debian package first if it is not on `PATH`.
pub fn program(program: Program) -> PathBuf {
    if let Some(path) = on_path(program.binary()) {
        return path;
    }
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = on_path(program.binary()) {
        return path;
    }
    let outcome = apt_install(program.package());
    on_path(program.binary()).unwrap_or_else(|| {
        panic!(
            "{} is needed by this test and is not on PATH; installing Debian's `{}` failed ({outcome}). \
             Install it (apt-get install {}) or run .ci/run, which does.",
            program.binary(),
            program.package(),
            program.package()
        )
    })
}

fn on_path(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(binary)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// Runs `apt-get update` and `apt-get install -y PACKAGE` (through `sudo -n` when not root);
/// says how it ended.
fn apt_install(package: &str) -> String {
    let root = unsafe { libc::geteuid() } == 0;
    let run = |args: &[&str]| {
        let mut cmd = if root { Command::new("apt-get") } else { Command::new("sudo") };
        if !root {
            cmd.args(["-n", "apt-get"]);
        }
        cmd.args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
    };
    eprintln!("e2e: installing Debian's `{package}` (not on PATH)");
    for args in [&["update", "-qq"][..], &["install", "-y", "-qq", package][..]] {
        match run(args) {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                let err = String::from_utf8_lossy(&out.stderr);
                return format!("apt-get {} exited with {}: {}", args[0], out.status, err.trim());
            }
            Err(e) => return format!("apt-get could not run: {e}"),
        }
    }
    "apt-get installed it, yet it is not on PATH".to_string()
}
