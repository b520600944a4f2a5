//! The `dcp.jsonc` layers: where they are, how each is read and checked against the schema
//! (every key, with its type), and how they merge into one [`Config`].

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::Config;

#[cfg(test)]
mod prices_tests;
mod suggest;

/// What a value of the schema must be.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Bool,
    Count,
    Ratio,
    Text,
    Strings,
    OneOf(&'static [&'static str]),
    /// A price per million tokens: a number >= 0.
    Price,
    /// A price sheet: a family or a model of `crate::prices`' table.
    Sheet,
}

/// Every key dcp understands, as a dotted path, with its kind.
const SCHEMA: &[(&str, Kind)] = &[
    ("$schema", Kind::Text),
    ("enabled", Kind::Bool),
    ("debug", Kind::Bool),
    ("pruneNotification", Kind::OneOf(&["off", "minimal", "detailed"])),
    ("commands.enabled", Kind::Bool),
    ("commands.protectedTools", Kind::Strings),
    ("turnProtection.enabled", Kind::Bool),
    ("turnProtection.turns", Kind::Count),
    ("protectedFilePatterns", Kind::Strings),
    ("tools.settings.nudgeEnabled", Kind::Bool),
    ("tools.settings.nudgeFrequency", Kind::Count),
    ("tools.settings.protectedTools", Kind::Strings),
    ("tools.settings.minTokens", Kind::Count),
    ("tools.settings.offer", Kind::OneOf(&["always", "paid"])),
    ("tools.discard.enabled", Kind::Bool),
    ("tools.extract.enabled", Kind::Bool),
    ("tools.extract.showDistillation", Kind::Bool),
    ("tools.compress.enabled", Kind::Bool),
    ("tools.compress.tagsFrom", Kind::Count),
    ("tools.restore.enabled", Kind::Bool),
    ("strategies.deduplication.enabled", Kind::Bool),
    ("strategies.deduplication.protectedTools", Kind::Strings),
    ("strategies.supersedeWrites.enabled", Kind::Bool),
    ("strategies.purgeErrors.enabled", Kind::Bool),
    ("strategies.purgeErrors.turns", Kind::Count),
    ("strategies.purgeErrors.protectedTools", Kind::Strings),
    ("strategies.masking.enabled", Kind::Bool),
    ("strategies.masking.keepLast", Kind::Count),
    ("strategies.masking.keepUserTurns", Kind::Count),
    ("strategies.masking.keepTokens", Kind::Count),
    ("strategies.masking.onRewrite.keepLast", Kind::Count),
    ("strategies.masking.onRewrite.keepTokens", Kind::Count),
    ("strategies.masking.inputs", Kind::Bool),
    ("strategies.masking.collapseTurns", Kind::Bool),
    ("strategies.masking.workingCalls", Kind::Count),
    ("strategies.masking.workingFiles", Kind::Count),
    ("strategies.masking.keepNamed", Kind::Count),
    ("strategies.masking.keepQuoted", Kind::Count),
    ("strategies.masking.protectedTools", Kind::Strings),
    ("strategies.masking.backoff", Kind::Bool),
    ("pruneSubagents", Kind::Bool),
    ("rewrite.mode", Kind::OneOf(&["immediate", "batched"])),
    ("rewrite.expectedRequests", Kind::Count),
    ("rewrite.maxHorizon", Kind::Count),
    ("rewrite.pressureRatio", Kind::Ratio),
    ("rewrite.coldCacheSeconds", Kind::Count),
    ("rewrite.spendBanked", Kind::Ratio),
    ("rewrite.spendMinShare", Kind::Ratio),
    ("rewrite.lossBound", Kind::Ratio),
    ("proxy.upstream", Kind::Text),
    ("proxy.upstreams.anthropic", Kind::Text),
    ("proxy.upstreams.chat", Kind::Text),
    ("proxy.upstreams.responses", Kind::Text),
    ("proxy.upstreamCa", Kind::Text),
    ("prices.sheet", Kind::Sheet),
    ("prices.input", Kind::Price),
    ("prices.output", Kind::Price),
    ("prices.cacheRead", Kind::Price),
    ("prices.cacheWrite", Kind::Price),
    ("prices.currency", Kind::Text),
    ("prices.ttlSeconds", Kind::Count),
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path} is not valid JSONC: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config {path}: `{key}` {message}")]
    Value { path: PathBuf, key: String, message: String },
    /// Something is at a config file's name that cannot be read as one.
    #[error("config {path} is {what}; fix or remove it")]
    NotAFile { path: PathBuf, what: String },
}

/// What is at a config file's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Missing,
    /// A plain file, or a link to one.
    File,
    /// Something that cannot be read as a config file; says what.
    Bad(String),
}

/// What is at `path`: nothing, a file to read, or something else, named.
pub fn entry(path: &Path) -> Entry {
    if std::fs::symlink_metadata(path).is_err() {
        return Entry::Missing;
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Entry::File,
        Ok(meta) if meta.is_dir() => Entry::Bad("a directory, not a file".to_string()),
        Ok(_) => Entry::Bad("not a regular file (a FIFO, a socket or a device)".to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Entry::Bad("a symbolic link to nothing".to_string()),
        Err(e) if e.raw_os_error() == Some(LOOP) => Entry::Bad("a symbolic link loop".to_string()),
        Err(e) => Entry::Bad(format!("unreadable ({e})")),
    }
}

/// `ELOOP`: too many levels of symbolic links.
#[cfg(unix)]
const LOOP: i32 = libc::ELOOP;
#[cfg(not(unix))]
const LOOP: i32 = -1;

/// The merged configuration, with where it came from and what was odd about it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub sources: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

/// Where to look for `dcp.jsonc`, in the order layers apply.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    pub global: Option<PathBuf>,
    pub config_dir: Option<PathBuf>,
    pub project: Option<PathBuf>,
}

impl Locations {
    /// The standard locations: the global config dir, `$OPENCODE_CONFIG_DIR` and the
    /// project's `.opencode/`.
    pub fn standard(env: &crate::host::paths::Env, project: Option<&Path>) -> Locations {
        Locations {
            global: Some(env.config_dir()),
            config_dir: env.opencode_config_dir.clone(),
            project: project.map(|p| p.join(".opencode")),
        }
    }

    /// The layer files, in order: in each dir, `dcp.jsonc`, else `dcp.json`. Something at
    /// either name that is not a file (a directory, a FIFO, a link loop) is an error, not a
    /// layer silently missing.
    fn files(&self) -> Result<Vec<PathBuf>, ConfigError> {
        let dirs = [&self.global, &self.config_dir, &self.project];
        let mut out: Vec<PathBuf> = Vec::new();
        for dir in dirs.into_iter().flatten() {
            for path in ["dcp.jsonc", "dcp.json"].iter().map(|n| dir.join(n)) {
                match entry(&path) {
                    Entry::Missing => continue,
                    Entry::Bad(what) => return Err(ConfigError::NotAFile { path, what }),
                    Entry::File if out.contains(&path) => {}
                    Entry::File => out.push(path),
                }
                break;
            }
        }
        Ok(out)
    }
}

/// Reads and merges every layer that exists.
pub fn load(locations: &Locations) -> Result<Loaded, ConfigError> {
    let mut merged = Value::Object(Map::new());
    let mut warnings = Vec::new();
    let sources = locations.files()?;
    // The last layer that sets `prices`, which a bad combination of its keys is named by.
    let mut prices_from = None;
    for path in &sources {
        let text = read_file(path)?;
        let text = String::from_utf8(text)
            .map_err(|_| ConfigError::Syntax { path: path.clone(), message: "not UTF-8".to_string() })?;
        let layer = parse_layer(&text, path, &mut warnings)?;
        if layer.get("prices").is_some() {
            prices_from = Some(path.clone());
        }
        merge(&mut merged, layer, "");
    }
    let config: Config = serde_json::from_value(merged).map_err(|e| ConfigError::Value {
        path: sources.last().cloned().unwrap_or_default(),
        key: String::new(),
        message: e.to_string(),
    })?;
    config.check_prices(prices_from)?;
    Ok(Loaded { config, sources, warnings })
}

/// Reads a layer file, opened without blocking (it may have become a FIFO since it was
/// looked at) and checked to be a plain file on the open handle.
fn read_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use std::io::Read;
    let read = |source| ConfigError::Read { path: path.to_path_buf(), source };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let mut file = options.open(path).map_err(read)?;
    if !file.metadata().map_err(read)?.is_file() {
        return Err(ConfigError::NotAFile { path: path.to_path_buf(), what: "not a regular file".to_string() });
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read)?;
    Ok(bytes)
}

/// Parses one layer's text and checks it against the schema. Unknown keys are dropped with a
/// warning; a bad value is an error naming `path` and the key.
pub fn parse_layer(text: &str, path: &Path, warnings: &mut Vec<String>) -> Result<Value, ConfigError> {
    let syntax = |message: String| ConfigError::Syntax { path: path.to_path_buf(), message };
    // Editors on Windows start UTF-8 files with a byte order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if nesting_depth(text) > 64 {
        return Err(syntax("nested more than 64 levels deep".to_string()));
    }
    let value: Option<Value> =
        jsonc_parser::parse_to_serde_value(text, &Default::default()).map_err(|e| syntax(e.to_string()))?;
    let value = value.unwrap_or_else(|| Value::Object(Map::new()));
    let Value::Object(map) = value else {
        return Err(syntax("the top level must be an object".to_string()));
    };
    let mut out = Map::new();
    check_object(map, "", path, warnings, &mut out)?;
    Ok(Value::Object(out))
}

fn check_object(
    map: Map<String, Value>,
    prefix: &str,
    path: &Path,
    warnings: &mut Vec<String>,
    out: &mut Map<String, Value>,
) -> Result<(), ConfigError> {
    for (key, value) in map {
        let dotted = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        if let Some((_, kind)) = SCHEMA.iter().find(|(k, _)| *k == dotted) {
            check_value(&value, *kind)
                .and_then(|()| check_globs(&dotted, &value))
                .map_err(|message| ConfigError::Value { path: path.to_path_buf(), key: dotted.clone(), message })?;
            if dotted != "$schema" {
                out.insert(key, value);
            }
            continue;
        }
        let is_section = SCHEMA.iter().any(|(k, _)| k.starts_with(&format!("{dotted}.")));
        match value {
            Value::Object(inner) if is_section => {
                let mut section = Map::new();
                check_object(inner, &dotted, path, warnings, &mut section)?;
                out.insert(key, Value::Object(section));
            }
            _ if is_section => {
                return Err(ConfigError::Value {
                    path: path.to_path_buf(),
                    key: dotted,
                    message: "must be an object".to_string(),
                })
            }
            _ => {
                let keys: Vec<&'static str> = SCHEMA.iter().map(|(k, _)| *k).collect();
                let hint =
                    suggest::meant(&dotted, &keys).map(|key| format!(" (did you mean `{key}`?)")).unwrap_or_default();
                warnings.push(format!("{}: unknown key `{dotted}` ignored{hint}", path.display()));
            }
        }
    }
    Ok(())
}

fn check_value(value: &Value, kind: Kind) -> Result<(), String> {
    let ok = match kind {
        Kind::Bool => value.is_boolean(),
        Kind::Count => value.as_u64().is_some_and(|n| n <= u32::MAX as u64),
        Kind::Ratio => value.as_f64().is_some_and(|f| (0.0..=1.0).contains(&f)),
        Kind::Text => value.is_string(),
        Kind::Strings => value.as_array().is_some_and(|items| items.iter().all(Value::is_string)),
        Kind::OneOf(options) => value.as_str().is_some_and(|s| options.contains(&s)),
        Kind::Price => value.as_f64().is_some_and(|f| f.is_finite() && f >= 0.0),
        Kind::Sheet => value.as_str().is_some_and(|s| crate::prices::named(s).is_some()),
    };
    if ok {
        return Ok(());
    }
    let expected = match kind {
        Kind::Bool => "true or false".to_string(),
        Kind::Count => "a whole number >= 0".to_string(),
        Kind::Ratio => "a number between 0 and 1".to_string(),
        Kind::Text => "a string".to_string(),
        Kind::Strings => "a list of strings".to_string(),
        Kind::OneOf(options) => format!("one of {}", options.join(", ")),
        Kind::Price => "a price per million tokens, a number >= 0".to_string(),
        Kind::Sheet => format!("a price sheet ({}) or a known model's id", crate::prices::FAMILIES.join(", ")),
    };
    Err(format!("must be {expected}, not {}", crate::format::excerpt(value)))
}

/// For `protectedFilePatterns`: each pattern is a glob (as `crate::strategies::Rules` compiles
/// them), so that a bad one is named with its file and key.
fn check_globs(key: &str, value: &Value) -> Result<(), String> {
    if key != "protectedFilePatterns" {
        return Ok(());
    }
    for (i, pattern) in value.as_array().into_iter().flatten().filter_map(Value::as_str).enumerate() {
        if let Err(e) = globset::Glob::new(pattern) {
            let shown = crate::format::excerpt(&Value::String(pattern.to_string()));
            return Err(format!("item {i}, {shown}, is not a valid glob: {}", e.kind()));
        }
    }
    Ok(())
}

/// Merges `layer` into `base`: objects key by key, protected lists unioned, anything else
/// replaced.
fn merge(base: &mut Value, layer: Value, key: &str) {
    match (base, layer) {
        (Value::Object(base), Value::Object(layer)) => {
            for (k, v) in layer {
                match base.get_mut(&k) {
                    Some(existing) => merge(existing, v, &k),
                    None => {
                        base.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(base), Value::Array(layer)) if is_protected_list(key) => {
            for item in layer {
                if !base.contains(&item) {
                    base.push(item);
                }
            }
        }
        (base, layer) => *base = layer,
    }
}

fn is_protected_list(key: &str) -> bool {
    key == "protectedTools" || key == "protectedFilePatterns"
}

/// The deepest nesting of brackets in `text`, ignoring strings; a guard against stack
/// exhaustion in the recursive parser.
fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for c in text.chars() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                depth += 1;
                max = max.max(depth);
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Notification;

    fn layer(text: &str) -> Result<(Value, Vec<String>), ConfigError> {
        let mut warnings = Vec::new();
        let v = parse_layer(text, Path::new("/cfg/dcp.jsonc"), &mut warnings)?;
        Ok((v, warnings))
    }

    #[test]
    fn comments_and_trailing_commas_are_allowed() {
        let (v, w) = layer("// top\n{ \"debug\": true, /* x */ \"turnProtection\": {\"turns\": 2,},\n}").unwrap();
        assert_eq!(v["debug"], Value::Bool(true));
        assert_eq!(v["turnProtection"]["turns"], 2);
        assert!(w.is_empty());
    }

    #[test]
    fn unknown_keys_warn_with_their_path() {
        let (v, w) =
            layer(r#"{"autoUpdate": false, "strategies": {"deduplication": {"enabled": false, "x": 1}}}"#).unwrap();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("`autoUpdate`"));
        assert!(w[1].contains("`strategies.deduplication.x`"));
        assert_eq!(v["strategies"]["deduplication"]["enabled"], Value::Bool(false));
        assert!(v.get("autoUpdate").is_none());
    }

    #[test]
    fn a_bad_value_names_the_file_and_key() {
        let err = layer(r#"{"strategies": {"purgeErrors": {"turns": "four"}}}"#).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/cfg/dcp.jsonc"), "{text}");
        assert!(text.contains("`strategies.purgeErrors.turns` must be a whole number"), "{text}");
        let err = layer(r#"{"pruneNotification": "loud"}"#).unwrap_err().to_string();
        assert!(err.contains("one of off, minimal, detailed"), "{err}");
        let err = layer(r#"{"tools": 3}"#).unwrap_err().to_string();
        assert!(err.contains("`tools` must be an object"), "{err}");
    }

    #[test]
    fn a_huge_bad_value_is_cut_in_the_error() {
        let text = format!("{{\"debug\": \"{}\"}}", "y".repeat(100_000));
        let err = layer(&text).unwrap_err().to_string();
        assert!(err.len() < 200, "{}", err.len());
        assert!(err.ends_with('…'), "{err}");
    }

    #[test]
    fn syntax_errors_and_deep_nesting_are_errors() {
        assert!(matches!(layer("{\"debug\": tru"), Err(ConfigError::Syntax { .. })));
        assert!(matches!(layer("[1]"), Err(ConfigError::Syntax { .. })));
        let deep = "[".repeat(10_000);
        assert!(layer(&deep).unwrap_err().to_string().contains("nested"));
        let (v, _) = layer("  // only a comment\n").unwrap();
        assert_eq!(v, Value::Object(Map::new()));
    }

    #[test]
    fn later_layers_override_but_protected_lists_union() {
        let dir = tempfile::tempdir().unwrap();
        let global = dir.path().join("global");
        let project = dir.path().join("proj");
        std::fs::create_dir_all(&global).unwrap();
        std::fs::create_dir_all(project.join(".opencode")).unwrap();
        std::fs::write(
            global.join("dcp.jsonc"),
            r#"{"debug": true, "pruneNotification": "minimal",
                "strategies": {"deduplication": {"protectedTools": ["bash"]}, "purgeErrors": {"turns": 2}},
                "protectedFilePatterns": ["**/.env"]}"#,
        )
        .unwrap();
        std::fs::write(
            project.join(".opencode/dcp.jsonc"),
            r#"{"pruneNotification": "off",
                "strategies": {"deduplication": {"protectedTools": ["grep", "bash"]}},
                "protectedFilePatterns": ["secrets/**"]}"#,
        )
        .unwrap();
        let locations = Locations { global: Some(global), config_dir: None, project: Some(project.join(".opencode")) };
        let loaded = load(&locations).unwrap();
        let c = loaded.config;
        assert_eq!(loaded.sources.len(), 2);
        assert!(c.debug);
        assert_eq!(c.prune_notification, Notification::Off);
        assert_eq!(c.strategies.purge_errors.turns, 2);
        assert_eq!(c.strategies.deduplication.protected_tools, vec!["bash", "grep"]);
        assert_eq!(c.protected_file_patterns, vec!["**/.env", "secrets/**"]);
        assert!(c.dedup_protects("grep") && c.dedup_protects("task") && !c.dedup_protects("read"));
    }

    #[test]
    fn no_files_means_dcp_12_defaults() {
        let loaded = load(&Locations::default()).unwrap();
        assert_eq!(loaded.config, Config::default());
        assert!(loaded.config.strategies.supersede_writes.enabled);
        assert_eq!(loaded.config.strategies.purge_errors.turns, 4);
    }
}
