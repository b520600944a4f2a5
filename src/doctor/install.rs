//! The install: which OpenCode config names the plugin, where OpenCode installed it, and which
//! binary the plugin will run.
//!
//! OpenCode 1.18 installs a plugin named by npm package into
//! `$XDG_CACHE_HOME/opencode/packages/<spec>/node_modules/<name>` (a bare name is
//! `<name>@latest`), with npm's installer and install scripts off; the platform package sits
//! beside it. The plugin looks for its binary in this order: `DCP_BIN`, the platform package
//! resolved from the plugin's own location (as Node resolves a package), then `PATH`. This
//! module follows the same order, so what it reports is what the plugin will do.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{Check, CheckStatus, CheckedSetup};

/// The main npm package: the plugin, with the platform packages as optional dependencies.
pub const PACKAGE: &str = "dcp-opencode";
/// The name of `plugin/package.json` in a clone, for a `file://` plugin.
const CLONE_PACKAGE: &str = "dcp-opencode-plugin";
/// The published DCP plugin, which prunes too.
const PUBLISHED_DCP: &str = "@tarquinen/opencode-dcp";

/// This machine's platform as the npm packages name it (`linux-x64`, `darwin-arm64`, …).
pub fn platform() -> Option<&'static str> {
    let musl = cfg!(target_env = "musl");
    Some(match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") if musl => "linux-x64-musl",
        ("linux", "x86_64") => "linux-x64",
        ("linux", "aarch64") => "linux-arm64",
        ("macos", "x86_64") => "darwin-x64",
        ("macos", "aarch64") => "darwin-arm64",
        ("windows", "x86_64") => "win32-x64",
        _ => return None,
    })
}

fn exe_name() -> &'static str {
    if cfg!(windows) {
        "dcp.exe"
    } else {
        "dcp"
    }
}

/// How a config names the plugin.
#[derive(Debug)]
enum Source {
    /// By npm spec, as written (`dcp-opencode@0.1.0`).
    Npm(String),
    /// By path, to a clone's `plugin/` dir.
    Dir(PathBuf),
}

/// Runs the install checks: this binary, the configs, each named plugin and its binary.
pub fn check(inputs: &CheckedSetup, checks: &mut Vec<Check>) {
    let exe = inputs.current_exe.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "?".into());
    checks.push(Check::new("binary", CheckStatus::Ok, format!("dcp {} at {exe}", env!("CARGO_PKG_VERSION"))));
    let named = named_plugins(inputs, checks);
    if named.is_empty() {
        let config = inputs.env.config_dir().join("opencode.json");
        let message = format!(
            "no OpenCode config names the dcp plugin: add \"plugin\": [\"{PACKAGE}@{}\"] to {}",
            env!("CARGO_PKG_VERSION"),
            config.display()
        );
        checks.push(Check::new("opencode.json", CheckStatus::Fail, message));
        return;
    }
    for source in &named {
        let dir = plugin_dir(inputs, source, checks);
        // OpenCode installs an npm plugin with its platform package, the binary: until it has,
        // a missing binary is not a fault, unless the user named one (DCP_BIN).
        if dir.is_none() && matches!(source, Source::Npm(_)) && inputs.dcp_bin.is_none() && on_path(inputs).is_none() {
            let message = "not checked yet: OpenCode installs the plugin with its dcp binary when it next starts; \
                           run dcp doctor again then";
            checks.push(Check::new("plugin runs", CheckStatus::Warn, message.to_string()));
            continue;
        }
        checks.push(plugin_binary(inputs, dir.as_deref()));
    }
}

/// The config files OpenCode reads, in its order: the global dir, `OPENCODE_CONFIG`,
/// `$OPENCODE_CONFIG_DIR`, then the project and its parents up to the git root.
fn config_files(inputs: &CheckedSetup) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        ["config.json", "opencode.json", "opencode.jsonc"].iter().map(|n| inputs.env.config_dir().join(n)).collect();
    files.extend(inputs.opencode_config.clone());
    if let Some(dir) = &inputs.env.opencode_config_dir {
        files.extend(["opencode.json", "opencode.jsonc"].iter().map(|n| dir.join(n)));
    }
    if let Some(project) = &inputs.project {
        for dir in project.ancestors() {
            for name in ["opencode.json", "opencode.jsonc", ".opencode/opencode.json", ".opencode/opencode.jsonc"] {
                files.push(dir.join(name));
            }
            if dir.join(".git").exists() {
                break;
            }
        }
    }
    let mut seen = Vec::new();
    files.retain(|f| {
        f.is_file() && !seen.contains(f) && {
            seen.push(f.clone());
            true
        }
    });
    files
}

/// Every place a config names dcp's plugin. Reports each config that names it, and any that
/// cannot be read.
fn named_plugins(inputs: &CheckedSetup, checks: &mut Vec<Check>) -> Vec<Source> {
    let mut named = Vec::new();
    for file in config_files(inputs) {
        let parsed = std::fs::read_to_string(&file).map_err(|e| e.to_string()).and_then(|t| {
            jsonc_parser::parse_to_serde_value::<Option<Value>>(&t, &Default::default()).map_err(|e| e.to_string())
        });
        let value = match parsed {
            Ok(v) => v.unwrap_or(Value::Null),
            Err(e) => {
                let message = format!("{} cannot be read as JSONC: {e}", file.display());
                checks.push(Check::new("opencode.json", CheckStatus::Fail, message));
                continue;
            }
        };
        let base = file.parent().unwrap_or(Path::new("."));
        for spec in plugin_specs(&value) {
            if npm_name(&spec) == PUBLISHED_DCP {
                let message =
                    format!("{} also loads the published DCP ({spec}): both would prune; keep one", file.display());
                checks.push(Check::new("opencode.json", CheckStatus::Warn, message));
            }
            let Some(source) = dcp_source(&spec, base) else { continue };
            checks.push(Check::new("opencode.json", CheckStatus::Ok, format!("{} names \"{spec}\"", file.display())));
            named.push(source);
        }
    }
    named
}

/// The `plugin` entries of a config: strings, or `[spec, options]` pairs.
fn plugin_specs(config: &Value) -> Vec<String> {
    let Some(list) = config.get("plugin").and_then(Value::as_array) else { return Vec::new() };
    list.iter()
        .filter_map(|item| match item {
            Value::String(s) => Some(s.clone()),
            Value::Array(pair) => pair.first().and_then(Value::as_str).map(str::to_string),
            _ => None,
        })
        .collect()
}

/// The package name of an npm spec: `name@range` or `@scope/name@range`.
fn npm_name(spec: &str) -> &str {
    let at = if let Some(rest) = spec.strip_prefix('@') { rest.find('@').map(|i| i + 1) } else { spec.find('@') };
    at.map_or(spec, |i| &spec[..i])
}

/// Whether `spec` names dcp's plugin, and how. A path counts when its `package.json` is the
/// plugin's.
fn dcp_source(spec: &str, base: &Path) -> Option<Source> {
    let path = if let Some(rest) = spec.strip_prefix("file://") {
        Some(PathBuf::from(rest))
    } else if spec.starts_with('.') || Path::new(spec).is_absolute() {
        Some(base.join(spec))
    } else {
        None
    };
    let Some(path) = path else {
        return (npm_name(spec) == PACKAGE).then(|| Source::Npm(spec.to_string()));
    };
    let dir = if path.is_dir() { path } else { path.parent()?.to_path_buf() };
    let name = read_package(&dir).and_then(|p| p.get("name").and_then(Value::as_str).map(str::to_string));
    matches!(name.as_deref(), Some(PACKAGE | CLONE_PACKAGE)).then_some(Source::Dir(dir))
}

fn read_package(dir: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(dir.join("package.json")).ok()?).ok()
}

/// Where the plugin named by `source` is, if it is there, with its version checked.
fn plugin_dir(inputs: &CheckedSetup, source: &Source, checks: &mut Vec<Check>) -> Option<PathBuf> {
    let dir = match source {
        Source::Dir(dir) => dir.clone(),
        Source::Npm(spec) => {
            let spec =
                if spec.contains('@') && !spec.starts_with('@') { spec.clone() } else { format!("{spec}@latest") };
            inputs.env.opencode_cache_dir().join("packages").join(spec).join("node_modules").join(PACKAGE)
        }
    };
    let Some(package) = read_package(&dir) else {
        let message = match source {
            Source::Npm(spec) => format!(
                "\"{spec}\" is not installed yet ({} is missing): OpenCode installs it when it next starts",
                dir.display()
            ),
            Source::Dir(_) => format!("{}: no package.json; is this dcp's plugin/ dir?", dir.display()),
        };
        checks.push(Check::new("plugin", CheckStatus::Warn, message));
        return None;
    };
    let version = package.get("version").and_then(Value::as_str).unwrap_or("?");
    let mine = env!("CARGO_PKG_VERSION");
    let (status, message) = if version == mine {
        (CheckStatus::Ok, format!("plugin {version} at {}", dir.display()))
    } else {
        (CheckStatus::Warn, format!("plugin {version} at {} differs from this binary ({mine})", dir.display()))
    };
    checks.push(Check::new("plugin", status, message));
    Some(dir)
}

/// The binary the plugin will run, in the plugin's order, with its version.
fn plugin_binary(inputs: &CheckedSetup, plugin: Option<&Path>) -> Check {
    const NAME: &str = "plugin runs";
    let plugin_version = plugin.and_then(read_package).and_then(|p| p.get("version")?.as_str().map(str::to_string));
    let found = if let Some(bin) = &inputs.dcp_bin {
        if !bin.is_file() {
            let message = format!("DCP_BIN is {} but there is no file there; pruning is off", bin.display());
            return Check::new(NAME, CheckStatus::Fail, message);
        }
        Some((bin.clone(), "DCP_BIN"))
    } else {
        let packaged = plugin.and_then(platform_binary).map(|b| (b, "the platform package"));
        packaged.or_else(|| on_path(inputs).map(|b| (b, "PATH")))
    };
    let Some((bin, how)) = found else {
        let package = platform().map(|p| format!("{PACKAGE}-{p}")).unwrap_or_else(|| "a platform package".into());
        let mut message = format!(
            "the plugin finds no dcp binary (no DCP_BIN, no {package} next to the plugin, no dcp on PATH); pruning is off"
        );
        // A plugin OpenCode installed: `packages/<spec>/node_modules/dcp-opencode`.
        if let Some(install) =
            plugin.and_then(Path::parent).filter(|d| d.ends_with("node_modules")).and_then(Path::parent)
        {
            message.push_str(&format!("; to install both again, remove {} and restart OpenCode", install.display()));
        }
        return Check::new(NAME, CheckStatus::Fail, message);
    };
    match binary_version(inputs, &bin) {
        Err(e) => Check::new(
            NAME,
            CheckStatus::Fail,
            format!("{} (from {how}) does not run: {e}; pruning is off", bin.display()),
        ),
        Ok(v) if plugin_version.as_deref().is_some_and(|p| p != v) => Check::new(
            NAME,
            CheckStatus::Warn,
            format!(
                "{} (from {how}) is dcp {v}, the plugin is {}: install one version of both",
                bin.display(),
                plugin_version.unwrap_or_default()
            ),
        ),
        Ok(v) => Check::new(NAME, CheckStatus::Ok, format!("{} (from {how}), dcp {v}", bin.display())),
    }
}

/// The platform package's binary, found from the plugin's dir as Node resolves a package:
/// `node_modules/<package>` in the dir and in each parent.
fn platform_binary(plugin: &Path) -> Option<PathBuf> {
    let package = format!("{PACKAGE}-{}", platform()?);
    plugin
        .ancestors()
        .filter(|dir| dir.file_name().is_none_or(|n| n != "node_modules"))
        .map(|dir| dir.join("node_modules").join(&package).join("bin").join(exe_name()))
        .find(|bin| bin.is_file())
}

fn on_path(inputs: &CheckedSetup) -> Option<PathBuf> {
    let path = inputs.path.as_ref()?;
    std::env::split_paths(path).filter(|d| !d.as_os_str().is_empty()).map(|d| d.join(exe_name())).find(|b| b.is_file())
}

/// The version a dcp binary reports (`dcp 0.1.0`), this one's without running it.
fn binary_version(inputs: &CheckedSetup, bin: &Path) -> Result<String, String> {
    let same = |a: &Path, b: &Path| a.canonicalize().ok().is_some_and(|a| b.canonicalize().is_ok_and(|b| a == b));
    if inputs.current_exe.as_deref().is_some_and(|me| same(me, bin)) {
        return Ok(env!("CARGO_PKG_VERSION").to_string());
    }
    let out = Command::new(bin).arg("--version").output().map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "it is not executable (permission denied): `chmod +x` it, or install it again".to_string()
        }
        _ => e.to_string(),
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.trim().strip_prefix("dcp ") {
        Some(v) if out.status.success() => Ok(v.to_string()),
        _ => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let first = stderr.lines().next().unwrap_or("").trim().to_string();
            Err(if first.is_empty() { format!("`--version` printed {:?}", stdout.trim()) } else { first })
        }
    }
}
