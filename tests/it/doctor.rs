//! `dcp doctor` on a good and on a broken install, laid out as OpenCode 1.18 lays out a plugin
//! it installed from npm (the registry end-to-end test checks that layout against the real
//! OpenCode): stdout, stderr and the exit status, snapshotted together.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::copy_dir;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// An OpenCode user's dirs: home, XDG config, cache and data, a project, an empty PATH.
struct Install {
    dir: tempfile::TempDir,
}

impl Install {
    fn new() -> Install {
        let dir = tempfile::tempdir().unwrap();
        for d in ["home", "config/opencode", "cache", "data/opencode", "project/.git", "empty-path"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Install { dir }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn name_plugin(&self, spec: &str) {
        self.write("config/opencode/opencode.json", &format!("{{\n  // dcp\n  \"plugin\": [\"{spec}\"],\n}}\n"));
    }

    /// What OpenCode's installer leaves for `dcp-opencode@VERSION`: the plugin package and,
    /// with `binary`, the platform package beside it.
    fn install_package(&self, plugin_version: &str, binary: bool) -> PathBuf {
        let modules = self.root().join(format!("cache/opencode/packages/dcp-opencode@{VERSION}/node_modules"));
        self.write_abs(
            &modules.join("dcp-opencode/package.json"),
            &format!(
                "{{\"name\": \"dcp-opencode\", \"version\": \"{plugin_version}\", \"main\": \"plugin/index.js\"}}"
            ),
        );
        let platform = dcp::doctor::platform().expect("a platform with npm packages");
        let bin = modules.join(format!("dcp-opencode-{platform}/bin/dcp"));
        if binary {
            std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
            std::fs::hard_link(env!("CARGO_BIN_EXE_dcp"), &bin)
                .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_dcp"), &bin).map(|_| ()))
                .unwrap();
        }
        bin
    }

    fn write_abs(&self, path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Runs `dcp doctor ARGS` as the user would, and renders the result with paths filtered.
    fn doctor(&self, args: &[&str]) -> String {
        let root = self.root();
        let env = [
            ("HOME", root.join("home")),
            ("XDG_CONFIG_HOME", root.join("config")),
            ("XDG_CACHE_HOME", root.join("cache")),
            ("XDG_DATA_HOME", root.join("data")),
            ("PATH", root.join("empty-path")),
        ];
        let args = std::iter::once("doctor").chain(args.iter().copied());
        let out = crate::support::run_dcp(args, &root.join("project"), &env, Duration::from_secs(120));
        let text = crate::support::rendered(&out);
        let platform = dcp::doctor::platform().unwrap_or("?");
        text.replace(&root.display().to_string(), "[HOME]")
            .replace(env!("CARGO_BIN_EXE_dcp"), "[DCP]")
            .replace(&format!("dcp-opencode-{platform}"), "dcp-opencode-[PLATFORM]")
            .replace(VERSION, "[VERSION]")
    }
}

#[test]
fn doctor_on_a_good_install() {
    let i = Install::new();
    i.name_plugin(&format!("dcp-opencode@{VERSION}"));
    i.install_package(VERSION, true);
    copy_dir(&crate::support::fixtures().join("data"), &i.root().join("data/opencode"));
    i.write("config/opencode/dcp.jsonc", "{\n  // quiet\n  \"pruneNotification\": \"minimal\",\n}\n");
    let out = i.doctor(&[]);
    assert!(out.contains("exit_code: 0"), "{out}");
    insta::assert_snapshot!(out);
}

/// Everything a user can get wrong at once: a project config that is not JSONC, a plugin of
/// another version without its platform package and no binary anywhere, bad values and an
/// unknown key in dcp.jsonc, a state dir that cannot be created, a damaged database.
fn broken() -> Install {
    let i = Install::new();
    i.name_plugin(&format!("dcp-opencode@{VERSION}"));
    i.install_package("0.0.1", false);
    i.write("project/opencode.json", "{ \"plugin\": [ }");
    i.write(
        "config/opencode/dcp.jsonc",
        "{ \"debug\": \"yes\", \"colour\": true, \"rewrite\": { \"mode\": \"fast\" }, \"protectedFilePatterns\": [1] }",
    );
    i.write("project/.opencode/dcp.jsonc", "{ \"turnProtection\": { \"turns\": 2, \"when\": 1 } }");
    i.write("data/opencode/storage/plugin", "a file where the dir should be");
    i.write("data/opencode/opencode.db", "not a database, not even close; long enough to have a header page");
    i
}

/// Right after a user named the plugin, before OpenCode had installed it (and its binary with
/// it), the doctor failed on "the plugin finds no dcp binary".
#[test]
fn doctor_before_opencode_installed_the_plugin_warns_instead_of_failing_on_its_binary() {
    let i = Install::new();
    i.name_plugin(&format!("dcp-opencode@{VERSION}"));
    insta::assert_snapshot!(i.doctor(&[]));
}

#[test]
fn doctor_on_a_broken_install() {
    let out = broken().doctor(&[]);
    assert!(out.contains("exit_code: 1"), "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn doctor_json_on_a_broken_install() {
    let i = broken();
    let out = i.doctor(&["--json"]);
    insta::assert_snapshot!(out);
}

#[test]
fn doctor_says_how_to_name_the_plugin() {
    let i = Install::new();
    let out = i.doctor(&[]);
    assert!(out.contains(&format!(
        "no OpenCode config names the dcp plugin: add \"plugin\": [\"dcp-opencode@[VERSION]\"] to [HOME]/config/opencode/opencode.json"
    )), "{out}");
    assert!(out.contains("exit_code: 1"), "{out}");
}

#[test]
fn doctor_follows_a_file_plugin_to_the_binary_on_path() {
    let i = Install::new();
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugin");
    i.name_plugin(&format!("file://{}", plugin.display()));
    let bin_dir = i.root().join("empty-path");
    std::fs::hard_link(env!("CARGO_BIN_EXE_dcp"), bin_dir.join("dcp"))
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_dcp"), bin_dir.join("dcp")).map(|_| ()))
        .unwrap();
    let out = i.doctor(&[]);
    assert!(out.contains(&format!("plugin [VERSION] at {}", plugin.display())), "{out}");
    assert!(out.contains("[HOME]/empty-path/dcp (from PATH), dcp [VERSION]"), "{out}");
}

#[test]
fn doctor_names_a_binary_that_does_not_run() {
    let i = Install::new();
    i.name_plugin(&format!("dcp-opencode@{VERSION}"));
    let bin = i.install_package(VERSION, false);
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::write(&bin, "#!/bin/sh\necho 'dcp: /lib/libc.so.6: version GLIBC_2.99 not found' >&2\nexit 1\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = i.doctor(&[]);
    assert!(
        out.contains("(from the platform package) does not run: dcp: /lib/libc.so.6: version GLIBC_2.99 not found"),
        "{out}"
    );
}

/// The tester's state dir: `storage/plugin/dcp` a plain file. The doctor names it, what to do,
/// and what is lost meanwhile.
#[test]
fn doctor_names_a_file_where_the_state_dir_should_be_with_the_fix() {
    let i = Install::new();
    i.name_plugin(&format!("dcp-opencode@{VERSION}"));
    i.write("data/opencode/storage/plugin/dcp", "a file where the dir should be");
    let out = i.doctor(&[]);
    let line = out.lines().find(|l| l.contains("state dir")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        line,
        "  FAIL  state dir     [HOME]/data/opencode/storage/plugin/dcp: a regular file is there, not a directory; move \
         it away, and dcp creates the dir (until then pruning is not saved, and a restart loses it)"
    );
}
