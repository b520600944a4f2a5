//! End-to-end tests: the real OpenCode binary (npm `opencode-ai@1.18.33`) with the dcp plugin
//! loaded, against the scripted fake model of [`fake_llm`].
//!
//! OpenCode is taken from `DCP_E2E_OPENCODE` if set, else from `target/e2e/node_modules`,
//! where it is installed with npm on first use (`.ci/run` installs it up front). Each test
//! gets its own XDG dirs, project and fake model; the `@opencode-ai/plugin` package OpenCode
//! installs into its config dir is cached in `target/e2e/plugin-deps` so later runs stay on
//! loopback. The machine's programs they drive (tmux, Chromium, ripgrep) are found on `PATH`,
//! or installed from Debian's packages on first use ([`system`]).

mod clients;
mod compress;
mod fake_llm;
mod meter;
mod money;
mod offer;
mod opencode_queued;
mod prompt_cache;
mod proxy;
mod proxy_restore;
mod proxy_sessions;
mod proxy_upstream;
mod registry;
mod restore;
mod rewind;
mod savings;
mod scenarios;
mod system;
mod tui;
mod tui_corrupt;
mod tui_discard;
mod tui_newer;
mod tui_refetch;
mod tui_state_dir;
mod tui_turns;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use fake_llm::FakeLlm;
use serde_json::Value;

pub const OPENCODE_VERSION: &str = "1.18.33";
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

pub(crate) fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/e2e")
}

/// The OpenCode binary, installing it with npm if needed.
pub fn opencode() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // OpenCode's grep and glob tools run ripgrep, which it cannot download offline.
        system::program(system::Program::Ripgrep);
        if let Some(p) = std::env::var_os("DCP_E2E_OPENCODE") {
            return PathBuf::from(p);
        }
        let dir = e2e_dir();
        let bin = dir.join("node_modules/opencode-linux-x64/bin/opencode");
        let fallback = dir.join("node_modules/.bin/opencode");
        if !bin.exists() && !fallback.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            let status = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg(format!("opencode-ai@{OPENCODE_VERSION}"))
                .status()
                .expect("npm is needed to install opencode-ai for the end-to-end tests");
            assert!(status.success(), "npm install opencode-ai@{OPENCODE_VERSION} failed");
        }
        if bin.exists() {
            bin
        } else {
            fallback
        }
    })
    .clone()
}

/// The dcp binary under test.
pub fn dcp_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dcp"))
}

fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("plugin")
}

/// OpenCode installs `@opencode-ai/plugin` into a fresh config dir on first start; only one
/// test at a time may do that and fill the cache.
static PLUGIN_DEPS: Mutex<()> = Mutex::new(());

/// How a lab's OpenCode gets dcp.
pub enum Plugin {
    /// `file://` to this clone's `plugin/`, the binary under test through `DCP_BIN`.
    Clone,
    /// `dcp-opencode@<version>` from the npm registry at this URL (named in the lab's
    /// `~/.npmrc`), with no `DCP_BIN` and no `dcp` on `PATH`: OpenCode installs the package.
    Registry(String),
}

/// One OpenCode installation: XDG dirs, a project, a fake model, and dcp's config.
pub struct Lab {
    pub dir: tempfile::TempDir,
    pub llm: FakeLlm,
    pub dcp_bin: PathBuf,
    pub plugin: Plugin,
}

impl Lab {
    pub fn new(dcp_config: &str) -> Lab {
        Lab::with_plugin(dcp_config, Plugin::Clone)
    }

    pub fn with_plugin(dcp_config: &str, plugin: Plugin) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["xdg/data", "xdg/config/opencode", "xdg/cache", "xdg/state", "proj", "home"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        scenarios::write_project(&root.join("proj"));
        let llm = FakeLlm::start(&root.join("proj").display().to_string());
        let config = root.join("xdg/config/opencode");
        std::fs::write(config.join("dcp.jsonc"), dcp_config).unwrap();
        let opencode_json = serde_json::json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "model": "fake/fake-model",
            "small_model": "fake/fake-model",
            "plugin": [match &plugin {
                Plugin::Clone => format!("file://{}", plugin_dir().display()),
                Plugin::Registry(_) => format!("{}@{}", dcp::doctor::PACKAGE, env!("CARGO_PKG_VERSION")),
            }],
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny", "external_directory": "deny"},
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake LLM",
                "options": {"baseURL": format!("http://127.0.0.1:{}/v1", llm.port), "apiKey": "sk-fake"},
                "models": {"fake-model": {"name": "Fake Model", "tool_call": true, "limit": {"context": 128000, "output": 8192}}}
            }}
        });
        std::fs::write(config.join("opencode.json"), serde_json::to_string_pretty(&opencode_json).unwrap()).unwrap();
        let cache = e2e_dir().join("plugin-deps");
        if cache.join("node_modules").is_dir() {
            crate::support::copy_dir(&cache, &config);
        }
        if let Plugin::Registry(url) = &plugin {
            std::fs::write(root.join("home/.npmrc"), format!("registry={url}\n")).unwrap();
        }
        Lab { dir, llm, dcp_bin: dcp_bin(), plugin }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn project(&self) -> PathBuf {
        self.root().join("proj")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root().join("xdg/data/opencode")
    }

    pub fn db(&self) -> PathBuf {
        self.data_dir().join("opencode.db")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.data_dir().join("storage/plugin/dcp")
    }

    /// The environment OpenCode runs in: this lab's XDG dirs, no update checks, and dcp's
    /// binary through `DCP_BIN`, or for [`Plugin::Registry`] a home whose `.npmrc` names the
    /// registry, an empty `DCP_BIN` (the plugin and `dcp doctor` take it as unset) and a
    /// `PATH` without `dcp`. `OPENCODE_CONFIG_DIR` and `OPENCODE_DB` are unset.
    pub fn env(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let root = self.root();
        let mut env = vec![
            ("PWD", self.project().into()),
            ("XDG_DATA_HOME", root.join("xdg/data").into()),
            ("XDG_CONFIG_HOME", root.join("xdg/config").into()),
            ("XDG_CACHE_HOME", root.join("xdg/cache").into()),
            ("XDG_STATE_HOME", root.join("xdg/state").into()),
            ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
            ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
            ("OPENCODE_DISABLE_SHARE", "1".into()),
            ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
            ("DCP_BIN", self.dcp_bin.clone().into()),
            ("DCP_TIMEOUT_MS", "1500".into()),
        ];
        if let Plugin::Registry(_) = &self.plugin {
            env.retain(|(name, _)| *name != "DCP_BIN");
            env.extend([("DCP_BIN", "".into()), ("HOME", root.join("home").into()), ("PATH", path_without_dcp())]);
        }
        env
    }

    /// The variables [`Lab::env`] removes.
    pub const UNSET: [&'static str; 2] = ["OPENCODE_CONFIG_DIR", "OPENCODE_DB"];

    /// The variables to remove besides [`Lab::UNSET`]: for [`Plugin::Registry`], npm's
    /// `npm_config_*`, which would win over the lab's `~/.npmrc`.
    pub fn unset(&self) -> Vec<String> {
        let mut names: Vec<String> = Lab::UNSET.iter().map(|s| s.to_string()).collect();
        if let Plugin::Registry(_) = self.plugin {
            names.extend(
                std::env::vars_os()
                    .filter_map(|(k, _)| k.into_string().ok())
                    .filter(|k| k.to_lowercase().starts_with("npm_config_")),
            );
        }
        names
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(opencode());
        cmd.args(args).current_dir(self.project()).envs(self.env()).stdin(Stdio::null());
        for name in self.unset() {
            cmd.env_remove(name);
        }
        cmd
    }

    /// Runs `opencode ARGS` to completion, within a time limit.
    pub fn opencode(&self, args: &[&str]) -> Output {
        let fresh = !self.root().join("xdg/config/opencode/node_modules").exists();
        let _guard = fresh.then(|| PLUGIN_DEPS.lock().unwrap_or_else(|e| e.into_inner()));
        let mut child =
            self.command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start opencode");
        let start = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if start.elapsed() > RUN_TIMEOUT {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        if fresh {
            self.cache_plugin_deps();
        }
        out
    }

    /// One prompt the fake model answers with `turns`: `opencode run` of `prompt`, continuing
    /// `session` if given; asserts success and that the model was asked for every turn.
    pub fn prompt(&self, session: Option<&str>, prompt: &str, turns: Vec<fake_llm::Turn>) {
        self.llm.push(turns);
        let out = self.run(session, prompt);
        assert_eq!(self.llm.remaining(), 0, "{}", tail(&out.stderr));
    }

    /// `opencode run` of one prompt, continuing `session` if given; asserts success.
    pub fn run(&self, session: Option<&str>, prompt: &str) -> Output {
        let mut args = vec!["run", "--print-logs", "--model", "fake/fake-model"];
        if let Some(s) = session {
            args.extend(["--session", s]);
        }
        args.push(prompt);
        let out = self.opencode(&args);
        assert!(out.status.success(), "opencode run failed: {}\n{}", out.status, tail(&out.stderr));
        out
    }

    fn cache_plugin_deps(&self) {
        let config = self.root().join("xdg/config/opencode");
        let cache = e2e_dir().join("plugin-deps");
        if cache.join("node_modules").is_dir() || !config.join("node_modules").is_dir() {
            return;
        }
        std::fs::create_dir_all(&cache).unwrap();
        crate::support::copy_dir(&config.join("node_modules"), &cache.join("node_modules"));
        for f in ["package.json", "package-lock.json", "bun.lock"] {
            if config.join(f).exists() {
                std::fs::copy(config.join(f), cache.join(f)).unwrap();
            }
        }
    }

    /// Runs one exploring prompt (a read, then an answer) and waits until dcp saved its state:
    /// the session's id and its state file, for tests that replace that file.
    pub fn explored_session(&self) -> (String, PathBuf) {
        let turns = vec![
            scenarios::read("p1.parser", "src/parser.py"),
            fake_llm::Turn::text("p1.answer", "A parser with 12 sections."),
        ];
        self.prompt(None, "Explore the project.", turns);
        let session = self.session_id();
        // The sidecar saves the session as it exits.
        let file = self.state_dir().join(format!("{session}.json"));
        assert!(crate::support::poll(|| file.exists(), Duration::from_secs(30)), "no state file");
        (session, file)
    }

    /// The newest top-level session.
    pub fn session_id(&self) -> String {
        let conn =
            rusqlite::Connection::open_with_flags(&self.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        conn.query_row("SELECT id FROM session WHERE parent_id IS NULL ORDER BY time_created DESC LIMIT 1", [], |r| {
            r.get(0)
        })
        .unwrap()
    }

    /// The session's state file.
    pub fn state(&self, session: &str) -> Value {
        let path = self.state_dir().join(format!("{session}.json"));
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
    }

    /// Every stored part's data, in order: what OpenCode keeps as the session's history.
    pub fn stored_parts(&self, session: &str) -> Vec<String> {
        let conn =
            rusqlite::Connection::open_with_flags(&self.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let mut stmt = conn.prepare("SELECT data FROM part WHERE session_id = ?1 ORDER BY time_created, id").unwrap();
        stmt.query_map([session], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
    }
}

/// This process's `PATH` without the dirs that hold a `dcp`.
fn path_without_dcp() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).filter(|d| !d.join("dcp").exists());
    std::env::join_paths(dirs).unwrap_or_default()
}

/// The end of a process's output, for failure messages.
pub fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
