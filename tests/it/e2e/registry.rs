//! The install path users take: dcp's npm packages, packed by `npm/pack.sh` from the binary
//! under test, published to a real npm registry (verdaccio) listening on 127.0.0.1 with no
//! uplinks, and installed by OpenCode itself from `"plugin": ["dcp-opencode@<version>"]`,
//! with no `DCP_BIN` and no `dcp` on `PATH`.
//!
//! `DCP_E2E_PACK_BIN=target/release/dcp` packs that binary instead of the one under test.
//! verdaccio is installed with npm into `target/e2e/verdaccio` on first use, from
//! `tests/it/e2e/registry-package.json` (`.ci/run` installs it up front). Its storage and
//! config live in a temp dir; it is started and stopped by the test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::fake_llm::Turn;
use super::scenarios::{call_id_of, read, result};
use super::{e2e_dir, tail, Lab, Plugin};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Removes npm's `npm_config_*` variables this process inherited, so only what a command is
/// given counts.
fn without_npm_config(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().to_lowercase().starts_with("npm_config_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// The verdaccio executable, installed into `target/e2e/verdaccio` if needed.
fn verdaccio() -> PathBuf {
    static BIN: Mutex<()> = Mutex::new(());
    let _guard = BIN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = e2e_dir().join("verdaccio");
    let bin = dir.join("node_modules/.bin/verdaccio");
    if !bin.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(repo().join("tests/it/e2e/registry-package.json"), dir.join("package.json")).unwrap();
        let out =
            without_npm_config(Command::new("npm").args(["install", "--no-audit", "--no-fund", "--prefix"]).arg(&dir))
                .output()
                .expect("npm is needed to install verdaccio for the registry test");
        assert!(out.status.success(), "npm install verdaccio failed:\n{}", tail(&out.stderr));
    }
    bin
}

/// The tarballs of `bash npm/pack.sh`, packed once from the binary under test, or from
/// `DCP_E2E_PACK_BIN` (to run the test on a release build).
fn tarballs() -> &'static [PathBuf] {
    static PACKED: OnceLock<Vec<PathBuf>> = OnceLock::new();
    PACKED.get_or_init(|| {
        let out_dir = e2e_dir().join("npm");
        let bin = std::env::var_os("DCP_E2E_PACK_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_dcp").into());
        let out = Command::new("bash")
            .arg(repo().join("npm/pack.sh"))
            .env("DCP_BIN_FOR_PACK", bin)
            .env("DCP_NPM_OUT", &out_dir)
            .output()
            .expect("bash npm/pack.sh");
        assert!(out.status.success(), "npm/pack.sh failed:\n{}", tail(&out.stderr));
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        let mut files: Vec<PathBuf> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "tgz"))
            .collect();
        files.sort();
        files
    })
}

/// A verdaccio on 127.0.0.1 with its storage in a temp dir and no uplinks: it serves only
/// what was published to it. Stopped when dropped.
struct Registry {
    child: Child,
    url: String,
    dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        let bin = verdaccio();
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let root = dir.path().display();
        let config = format!(
            "storage: {root}/storage\nauth:\n  htpasswd:\n    file: {root}/htpasswd\n    max_users: -1\n\
             uplinks: {{}}\npackages:\n  '**':\n    access: $all\n    publish: $all\n    unpublish: $all\n\
             listen: 127.0.0.1:{port}\nmax_body_size: 500mb\nweb:\n  enable: false\n\
             log: {{ type: stdout, format: pretty, level: warn }}\n"
        );
        std::fs::write(dir.path().join("config.yaml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("verdaccio.log")).unwrap();
        let child = Command::new(bin)
            .arg("--config")
            .arg(dir.path().join("config.yaml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start verdaccio");
        let registry = Registry { child, url: format!("http://127.0.0.1:{port}/"), dir };
        let start = Instant::now();
        while !registry.ping(port) {
            assert!(start.elapsed() < Duration::from_secs(60), "verdaccio did not start:\n{}", registry.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
    }

    fn ping(&self, port: u16) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let request = "GET /-/ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        let mut answer = String::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_string(&mut answer).is_ok()
            && answer.split_whitespace().nth(1) == Some("200")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("verdaccio.log")).unwrap_or_default()
    }

    /// `npm publish` of one tarball, with a token only this registry sees.
    fn publish(&self, tarball: &Path) {
        let npmrc = self.dir.path().join("publish.npmrc");
        let host = self.url.trim_start_matches("http:");
        std::fs::write(&npmrc, format!("registry={}\n{host}:_authToken=dcp-e2e\n", self.url)).unwrap();
        let out = without_npm_config(&mut Command::new("npm"))
            .arg("publish")
            .arg(tarball)
            .arg("--registry")
            .arg(&self.url)
            .arg("--userconfig")
            .arg(&npmrc)
            .output()
            .unwrap();
        assert!(out.status.success(), "npm publish {}:\n{}\n{}", tarball.display(), tail(&out.stderr), self.log());
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// When OpenCode's npm install of a package began and ended, seen from outside: the
/// package's dir under OpenCode's cache appears, then its `package-lock.json`, which npm
/// writes last.
struct InstallWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Option<Instant>, Option<Instant>)>,
}

impl InstallWatch {
    fn start(dir: PathBuf) -> InstallWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut began, mut ended) = (None, None);
            while !flag.load(Ordering::Relaxed) && ended.is_none() {
                if began.is_none() && dir.exists() {
                    began = Some(Instant::now());
                }
                if began.is_some() && dir.join("package-lock.json").exists() {
                    ended = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (began, ended)
        });
        InstallWatch { stop, thread }
    }

    fn stop(self) -> (Option<Instant>, Option<Instant>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

const CONFIG: &str = r#"{ "rewrite": {"mode": "immediate"}, "pruneNotification": "minimal" }"#;

/// `dcp doctor` as the user runs it in the lab's environment: `program` is the binary, or
/// `npx` with the package first in `args`.
fn doctor(lab: &Lab, program: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(program);
    cmd.args(args).arg("doctor").current_dir(lab.project()).envs(lab.env());
    for name in lab.unset() {
        cmd.env_remove(name);
    }
    cmd.output().unwrap()
}

/// Asserts that `modules` holds `dcp-opencode` of this version and this platform's package
/// with an executable binary, and no other platform's; returns that binary.
fn assert_installed(modules: &Path, platform: &str) -> PathBuf {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(modules.join("dcp-opencode/package.json")).unwrap()).unwrap();
    assert_eq!(manifest["version"], VERSION);
    let bin = modules.join(format!("dcp-opencode-{platform}/bin/dcp"));
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display())).permissions().mode();
        assert!(mode & 0o111 != 0, "{} is not executable", bin.display());
    }
    let platforms: Vec<String> = std::fs::read_dir(modules)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("dcp-opencode-"))
        .collect();
    assert_eq!(platforms, [format!("dcp-opencode-{platform}")]);
    bin
}

#[test]
fn opencode_installs_dcp_from_a_registry_and_it_prunes() {
    let registry = Registry::start();
    for tarball in tarballs() {
        registry.publish(tarball);
    }
    let lab = Lab::with_plugin(CONFIG, Plugin::Registry(registry.url.clone()));
    let install = lab.root().join(format!("xdg/cache/opencode/packages/dcp-opencode@{VERSION}"));
    lab.llm.push(vec![
        read("r.parser", "src/parser.py"),
        read("r.records", "data/records.csv"),
        read("r.parser_again", "src/parser.py"),
        Turn::text("r.answer", "Explored."),
    ]);
    let watch = InstallWatch::start(install.clone());
    let started = Instant::now();
    let out = lab.run(None, "Explore the project.");
    let run = started.elapsed();
    let (began, ended) = watch.stop();
    let (began, ended) = (began.expect("OpenCode installed nothing"), ended.expect("the install did not finish"));
    eprintln!(
        "OpenCode's first run took {run:.1?}; the npm install of dcp-opencode@{VERSION} took {:.1?} (began {:.1?} after OpenCode started)",
        ended - began,
        began - started
    );

    // OpenCode installed the main package and this platform's package, and no other.
    let modules = install.join("node_modules");
    let platform = dcp::doctor::platform().unwrap();
    let bin = assert_installed(&modules, platform);

    // The plugin ran the installed binary (there is no other): pruning reached the model.
    assert_eq!(lab.llm.remaining(), 0, "{}", tail(&out.stderr));
    let answer = lab.llm.request_for("r.answer");
    assert!(crate::restore::is_pruned(Some(&result(&answer, &call_id_of(&lab, "r.parser")))), "{}", tail(&out.stderr));
    assert!(result(&answer, &call_id_of(&lab, "r.parser_again")).contains("def parse_section_12"));

    // /dcp stats answers in the session.
    let session = lab.session_id();
    let stats = lab.opencode(&["run", "--session", &session, "--command", "dcp", "stats"]);
    let stdout = String::from_utf8_lossy(&stats.stdout);
    assert!(stdout.contains("DCP statistics"), "stdout: {stdout}\n{}", tail(&stats.stderr));

    // `npx dcp-opencode doctor` (npm installs the package again, in its own cache, from the
    // lab's registry) finds everything in place.
    let good = doctor(&lab, Path::new("npx"), &["--yes", &format!("dcp-opencode@{VERSION}")]);
    let text = String::from_utf8_lossy(&good.stdout);
    eprintln!("dcp doctor on the installed package:\n{text}");
    assert!(good.status.success(), "{text}\n{}", String::from_utf8_lossy(&good.stderr));
    assert!(text.contains(&format!("{} (from the platform package), dcp {VERSION}", bin.display())), "{text}");

    // Without the platform package, the plugin has no binary, and `dcp doctor` says so.
    std::fs::remove_dir_all(modules.join(format!("dcp-opencode-{platform}"))).unwrap();
    let broken = doctor(&lab, &super::dcp_bin(), &[]);
    let text = String::from_utf8_lossy(&broken.stdout);
    eprintln!("dcp doctor without the platform package:\n{text}");
    assert_eq!(broken.status.code(), Some(1), "{text}");
    assert!(text.contains("the plugin finds no dcp binary"), "{text}");
}

/// A plugin and a binary of different versions still work together, and the user is told,
/// naming both (in OpenCode's log, which `--print-logs` shows on stderr).
#[test]
fn a_plugin_of_another_version_than_its_binary_is_told() {
    let lab = Lab::new(CONFIG);
    let plugin = lab.root().join("old-plugin");
    crate::support::copy_dir(&repo().join("plugin"), &plugin);
    let manifest = std::fs::read_to_string(plugin.join("package.json")).unwrap();
    std::fs::write(plugin.join("package.json"), manifest.replace(&format!("\"{VERSION}\""), "\"0.0.9\"")).unwrap();
    let config_file = lab.root().join("xdg/config/opencode/opencode.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&config_file).unwrap()).unwrap();
    config["plugin"] = serde_json::json!([format!("file://{}", plugin.display())]);
    std::fs::write(&config_file, config.to_string()).unwrap();
    lab.llm.push(vec![
        read("v.parser", "src/parser.py"),
        read("v.again", "src/parser.py"),
        Turn::text("v.answer", "Done."),
    ]);
    let out = lab.run(None, "Read the parser twice.");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let told = format!("the plugin is 0.0.9 but the binary it runs is {VERSION}");
    assert!(stderr.contains(&told), "{}", tail(&out.stderr));
    // It still prunes.
    let answer = lab.llm.request_for("v.answer");
    assert!(crate::restore::is_pruned(Some(&result(&answer, &call_id_of(&lab, "v.parser")))));
}
