//! Where OpenCode keeps its data and configuration, and where dcp keeps its own files.
//!
//! OpenCode uses XDG-style paths on every OS, macOS and Windows included: data in
//! `$XDG_DATA_HOME/opencode` (else `~/.local/share/opencode`), config in
//! `$XDG_CONFIG_HOME/opencode` (else `~/.config/opencode`). Only the home directory comes from
//! `directories`; its per-OS application paths would point somewhere OpenCode never looks.
//! The environment is captured once in [`Env`] so tests can pass their own.

use std::path::{Path, PathBuf};

/// The environment variables that decide OpenCode's paths.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub home: Option<PathBuf>,
    pub xdg_data_home: Option<PathBuf>,
    pub xdg_config_home: Option<PathBuf>,
    pub xdg_cache_home: Option<PathBuf>,
    pub opencode_db: Option<PathBuf>,
    pub opencode_config_dir: Option<PathBuf>,
}

impl Env {
    /// Reads the process environment. Empty variables count as unset, as in the XDG spec.
    pub fn from_process() -> Env {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        Env {
            home: directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf()),
            xdg_data_home: var("XDG_DATA_HOME"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            xdg_cache_home: var("XDG_CACHE_HOME"),
            opencode_db: var("OPENCODE_DB"),
            opencode_config_dir: var("OPENCODE_CONFIG_DIR"),
        }
    }

    fn home(&self) -> PathBuf {
        self.home.clone().unwrap_or_else(|| PathBuf::from("."))
    }

    /// OpenCode's data directory, which holds `opencode.db` and `storage/`.
    pub fn data_dir(&self) -> PathBuf {
        match &self.xdg_data_home {
            Some(d) => d.join("opencode"),
            None => self.home().join(".local/share/opencode"),
        }
    }

    /// OpenCode's global config directory.
    pub fn config_dir(&self) -> PathBuf {
        match &self.xdg_config_home {
            Some(d) => d.join("opencode"),
            None => self.home().join(".config/opencode"),
        }
    }

    /// dcp's own cache directory: `$XDG_CACHE_HOME/dcp`, else `~/.cache/dcp`. (Not under
    /// OpenCode's cache dir, which OpenCode empties when its version changes.)
    pub fn cache_dir(&self) -> PathBuf {
        match &self.xdg_cache_home {
            Some(d) => d.join("dcp"),
            None => self.home().join(".cache/dcp"),
        }
    }

    /// OpenCode's cache directory: `$XDG_CACHE_HOME/opencode`, else `~/.cache/opencode`.
    /// OpenCode installs plugins named by npm package under its `packages/` dir.
    pub fn opencode_cache_dir(&self) -> PathBuf {
        match &self.xdg_cache_home {
            Some(d) => d.join("opencode"),
            None => self.home().join(".cache/opencode"),
        }
    }

    /// The SQLite database of `data_dir`: `OPENCODE_DB` if set (absolute, or relative to the
    /// data dir), else `opencode.db` inside it.
    pub fn db_path(&self, data_dir: &Path) -> PathBuf {
        match &self.opencode_db {
            Some(p) if p.is_absolute() => p.clone(),
            Some(p) => data_dir.join(p),
            None => data_dir.join("opencode.db"),
        }
    }
}

/// The directory of dcp's per-session state files under an OpenCode data dir.
pub fn state_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("storage").join("plugin").join("dcp")
}

/// The directory of dcp's debug logs under an OpenCode config dir.
pub fn log_dir(config_dir: &Path) -> PathBuf {
    config_dir.join("logs").join("dcp")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_variables_win_over_home() {
        let env = Env { home: Some("/home/u".into()), xdg_data_home: Some("/xdg/data".into()), ..Env::default() };
        assert_eq!(env.data_dir(), PathBuf::from("/xdg/data/opencode"));
        assert_eq!(env.config_dir(), PathBuf::from("/home/u/.config/opencode"));
    }

    #[test]
    fn opencode_db_is_absolute_or_relative_to_the_data_dir() {
        let data = PathBuf::from("/d");
        let mut env = Env::default();
        assert_eq!(env.db_path(&data), PathBuf::from("/d/opencode.db"));
        env.opencode_db = Some("other.db".into());
        assert_eq!(env.db_path(&data), PathBuf::from("/d/other.db"));
        env.opencode_db = Some("/abs/x.db".into());
        assert_eq!(env.db_path(&data), PathBuf::from("/abs/x.db"));
    }
}
