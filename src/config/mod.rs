//! Configuration: `dcp.jsonc` layers, validated key by key, with DCP 1.2's keys and defaults.
//!
//! Layers are read in order: the global config dir (`~/.config/opencode/`), then
//! `$OPENCODE_CONFIG_DIR/`, then the project's `.opencode/`. A later layer overrides an
//! earlier one, except that protected lists (`*protectedTools`, `protectedFilePatterns`) are
//! unioned. Comments and trailing commas are allowed. Unknown keys are warned about and
//! ignored; a value of the wrong type is an error that names the file and the key.
//!
//! This module holds the settings and their defaults; [`layers`] finds, reads, checks and
//! merges the files.

mod layers;

use serde::{Deserialize, Serialize};

pub use self::layers::{entry, load, parse_layer, ConfigError, Entry, Loaded, Locations};

/// Tools whose outputs are never pruned, whatever the config says.
pub const DEFAULT_PROTECTED_TOOLS: &[&str] =
    &["task", "todowrite", "todoread", "discard", "extract", "compress", "batch", "write", "edit"];

/// How much a prune notification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Notification {
    Off,
    Minimal,
    Detailed,
}

/// When decided rewrites reach the model (see `crate::policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RewriteMode {
    /// Apply every decision on the next request, as the published DCP does.
    Immediate,
    /// Hold decisions back until rewriting pays for the re-billed prompt tail.
    Batched,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    pub enabled: bool,
    pub debug: bool,
    pub prune_notification: Notification,
    pub commands: Commands,
    pub turn_protection: TurnProtection,
    pub protected_file_patterns: Vec<String>,
    pub tools: Tools,
    pub strategies: Strategies,
    /// dcp's own: prune sessions that have a parent (subagents) too.
    pub prune_subagents: bool,
    /// dcp's own: when decided rewrites are applied.
    pub rewrite: Rewrite,
    /// `dcp proxy`'s upstreams (`crate::proxy`); unused by the plugin.
    #[serde(skip_serializing_if = "Proxy::is_unset")]
    pub proxy: Proxy,
    /// dcp's own: the price sheet, over the one the model's id gives (`crate::prices`).
    #[serde(skip_serializing_if = "crate::prices::Override::is_unset")]
    pub prices: crate::prices::Override,
    /// dcp's own: the share of new sessions sent unpruned, as a control group (0: none).
    pub holdout: f64,
}

/// Where `dcp proxy` forwards: one upstream for every API, one per API, and a CA to trust
/// for an https upstream besides the system's and Mozilla's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Proxy {
    pub upstream: Option<String>,
    pub upstreams: ProxyUpstreams,
    pub upstream_ca: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ProxyUpstreams {
    pub anthropic: Option<String>,
    pub chat: Option<String>,
    pub responses: Option<String>,
}

impl Proxy {
    fn is_unset(&self) -> bool {
        *self == Proxy::default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Commands {
    pub enabled: bool,
    pub protected_tools: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TurnProtection {
    pub enabled: bool,
    pub turns: u32,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Tools {
    pub settings: ToolSettings,
    pub discard: Toggle,
    pub extract: Extract,
    /// Range compression: the agent replaces older messages with its summary.
    pub compress: Compress,
    /// dcp's own: the agent brings back the exact text a placeholder hid (see
    /// `crate::texts::restore`).
    pub restore: Toggle,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ToolSettings {
    pub nudge_enabled: bool,
    pub nudge_frequency: u32,
    pub protected_tools: Vec<String>,
    /// dcp's own: outputs smaller than this many tokens are not offered to the agent.
    pub min_tokens: u32,
    /// dcp's own: from when a session is offered the agent tools (see [`Offer`]).
    pub offer: Offer,
}

/// From when a session's requests carry the agent tools, their instructions, the prunable
/// list and the message id tags (see `crate::policy::offer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Offer {
    /// From the first request, whose cache is cold anyway (the default): an agent told about
    /// its tools has them when it needs them.
    Always,
    /// From the first user turn at which the session's ledger has banked what offering them
    /// costs: until then the session pays nothing for tools it has not used.
    Paid,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Toggle {
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Compress {
    pub enabled: bool,
    /// dcp's own: messages carry the id tags `compress` may name them by once the history
    /// before them reaches this many tokens (characters / 4); 0 tags every message. Below it
    /// a range frees little, and the agent names messages by their tool call ids.
    pub tags_from: u32,
}

/// `extract` as a tool of its own: off by default, for `discard` with a `distillation` does
/// what it does (its schema does not show one: `compress` keeps a summary at no extra head).
/// On, it is registered for agents whose instructions name it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Extract {
    pub enabled: bool,
    pub show_distillation: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Strategies {
    pub deduplication: Deduplication,
    pub supersede_writes: Toggle,
    pub purge_errors: PurgeErrors,
    pub masking: Masking,
}

/// dcp's own: observation masking (see `crate::strategies::masking`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Masking {
    pub enabled: bool,
    /// The most recent tool outputs that are never masked.
    pub keep_last: u32,
    /// Outputs from before the last this many user prompts are masked even among the most
    /// recent (0: user turns do not count).
    pub keep_user_turns: u32,
    /// Approximate tokens (characters / 4) of the kept outputs: an output is masked once the
    /// newer outputs masking could take reach this many, even among the last `keepLast`
    /// (0: no budget). The newest output always stays.
    pub keep_tokens: u32,
    /// The narrower window a rewrite masks down to when it goes anyway (see
    /// `crate::strategies::masking`, "Deeper when the prompt is written again").
    pub on_rewrite: OutputWindow,
    /// The latest read of a file edited or written within this many of the most recent tool
    /// calls, in the current user turn, is the agent's working material: masking leaves it
    /// whole (0: no working set; see `crate::strategies::masking`, "The working set").
    pub working_calls: u32,
    /// The latest read of each of the last this many distinct files the agent read, edited or
    /// wrote is the agent's working material too: a file it is still reading around is one it
    /// may edit next (0: off; see `crate::strategies::masking`, "The working set").
    pub working_files: u32,
    /// For this many steps after a prompt, the latest views of the files it names (by path,
    /// name, or a directory of two or more components; the session's first prompt by a path
    /// alone) stay whole (0: off; see
    /// `crate::strategies::keep`, "Named by the person").
    pub keep_named: u32,
    /// A listing, search or written file that one of the agent's last this many steps quoted
    /// stays whole: it is what the agent works from (0: off; see `crate::strategies::keep`,
    /// "In use").
    pub keep_quoted: u32,
    /// Whether the text arguments of `edit` and `write` calls beyond the window are masked too
    /// (their effect is on disk; see `crate::strategies::masking`).
    pub inputs: bool,
    /// Whether the tool calls of a finished user turn (one the person has answered with a new
    /// prompt) become one line that names them (see `crate::strategies::turns`).
    pub collapse_turns: bool,
    pub protected_tools: Vec<String>,
    /// Whether a session that fetches again what dcp hid keeps more from then on (see
    /// `crate::policy::backoff`).
    pub backoff: bool,
}

/// A window of recent outputs masking leaves whole, beside `keepUserTurns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OutputWindow {
    /// The most recent tool outputs kept.
    pub keep_last: u32,
    /// Approximate tokens (characters / 4) of the kept outputs (0: no budget).
    pub keep_tokens: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Deduplication {
    pub enabled: bool,
    pub protected_tools: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PurgeErrors {
    pub enabled: bool,
    pub turns: u32,
    pub protected_tools: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Rewrite {
    pub mode: RewriteMode,
    /// Requests a rewrite is expected to serve before the session ends or compacts: the
    /// horizon over which offering the agent tools is paid for (see `crate::policy::offer`),
    /// and the most a bet counts on to earn back what the bank does not cover of it (see
    /// `crate::policy::bet_horizon`).
    pub expected_requests: u32,
    /// The most later requests a rewrite's saving is counted over: its horizon is half the
    /// warm run so far, at most this (see `crate::policy::horizon`).
    pub max_horizon: u32,
    /// Apply everything pending once the context passes this share of the window.
    pub pressure_ratio: f64,
    /// After this many idle seconds the provider's cache is cold: rewriting is free. Unset, the
    /// price sheet's TTL ([`Rewrite::cold_after`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold_cache_seconds: Option<u64>,
    /// The most of what the session has banked that a rewrite which does not pay back may
    /// spend on a smaller context (0: never; see `crate::policy`, "Spending the bank").
    pub spend_banked: f64,
    /// Such a rewrite must remove at least this share of the context.
    pub spend_min_share: f64,
    /// The most a session may lose to rewrites against no pruning, as a share of what it has
    /// cost without pruning so far (see `crate::policy`, "The loss bound").
    pub loss_bound: f64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: true,
            debug: false,
            prune_notification: Notification::Detailed,
            commands: Commands::default(),
            turn_protection: TurnProtection::default(),
            protected_file_patterns: Vec::new(),
            tools: Tools::default(),
            strategies: Strategies::default(),
            prune_subagents: true,
            rewrite: Rewrite::default(),
            proxy: Proxy::default(),
            prices: crate::prices::Override::default(),
            holdout: 0.0,
        }
    }
}

impl Default for Commands {
    fn default() -> Self {
        Commands { enabled: true, protected_tools: Vec::new() }
    }
}

impl Default for TurnProtection {
    fn default() -> Self {
        TurnProtection { enabled: false, turns: 4 }
    }
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            nudge_enabled: true,
            nudge_frequency: 10,
            protected_tools: Vec::new(),
            min_tokens: 200,
            offer: Offer::Always,
        }
    }
}

impl Default for Toggle {
    fn default() -> Self {
        Toggle { enabled: true }
    }
}

impl Default for Compress {
    fn default() -> Self {
        Compress { enabled: true, tags_from: 20_000 }
    }
}

impl Default for Deduplication {
    fn default() -> Self {
        Deduplication { enabled: true, protected_tools: Vec::new() }
    }
}

impl Default for PurgeErrors {
    fn default() -> Self {
        PurgeErrors { enabled: true, turns: 4, protected_tools: Vec::new() }
    }
}

/// Masking's default budget of kept outputs (`strategies.masking.keepTokens`), chosen on the
/// corpus's long runs (docs/history/benchmarks-rounds.md).
pub const KEEP_TOKENS: u32 = 10_000;

/// Masking's default count of recent files whose latest read stays whole
/// (`strategies.masking.workingFiles`): none, as keeping them re-bills them with every rewrite
/// behind them (docs/history/benchmarks-rounds.md, "Issue 24, round 3").
pub const WORKING_FILES: u32 = 0;

/// Masking's default window of recent calls whose outputs stay whole
/// (`strategies.masking.keepLast`): six, the middle of the five to seven that send the fewest
/// tokens on the corpus's long runs at the same cost (docs/history/benchmarks-rounds.md,
/// "Issue 24, stop 33: masking keeps the last 6 calls").
pub const KEEP_LAST: u32 = 6;

/// Masking's default window of steps an output stays whole for after it was quoted
/// (`strategies.masking.keepQuoted`): three, chosen on the corpus's interactive and long runs
/// together (docs/results/keep.md).
pub const KEEP_QUOTED: u32 = 3;

/// Masking's default window of steps after a follow-up prompt in which the views of the files
/// it names stay whole (`strategies.masking.keepNamed`): eight, the middle of the six to ten
/// that miss least on the corpus's interactive sessions (docs/results/keep.md).
pub const KEEP_NAMED: u32 = 8;

impl Default for Masking {
    fn default() -> Self {
        Masking {
            enabled: true,
            keep_last: KEEP_LAST,
            keep_user_turns: 1,
            keep_tokens: KEEP_TOKENS,
            on_rewrite: OutputWindow::default(),
            working_calls: 10,
            working_files: WORKING_FILES,
            keep_named: KEEP_NAMED,
            keep_quoted: KEEP_QUOTED,
            inputs: true,
            collapse_turns: true,
            protected_tools: Vec::new(),
            backoff: true,
        }
    }
}

impl Default for OutputWindow {
    fn default() -> Self {
        OutputWindow { keep_last: 4, keep_tokens: 3_000 }
    }
}

impl Default for Rewrite {
    fn default() -> Self {
        Rewrite {
            mode: RewriteMode::Batched,
            expected_requests: 8,
            max_horizon: 30,
            pressure_ratio: 0.6,
            cold_cache_seconds: None,
            spend_banked: 0.5,
            spend_min_share: 0.02,
            loss_bound: 0.05,
        }
    }
}

impl Rewrite {
    /// Idle seconds after which the provider's cache is cold: `coldCacheSeconds` when set,
    /// else the TTL of the session's price sheet (at once for a provider without a cache).
    pub fn cold_after(&self, sheet: &crate::prices::Sheet) -> u64 {
        self.cold_cache_seconds.unwrap_or_else(|| sheet.cold_after())
    }
}

impl Config {
    /// The price sheet of a session whose model gives `base`: `prices` over it.
    pub fn sheet(&self, base: crate::prices::Sheet) -> Result<crate::prices::Sheet, crate::prices::PriceError> {
        self.prices.apply(base)
    }

    /// The `prices` section as a whole, over any sheet: a cache price set without an input price
    /// to be a share of is an error naming its key and the layer that set `prices` last.
    pub(crate) fn check_prices(&self, from: Option<std::path::PathBuf>) -> Result<(), ConfigError> {
        let Err(e) = self.prices.apply(crate::prices::family("none").unwrap_or_default()) else { return Ok(()) };
        let (key, message) = match e {
            crate::prices::PriceError::Needs { key, needs } => (
                key,
                format!(
                    "is a price per million tokens, which needs `prices.{needs}` (the input price it is a share of)"
                ),
            ),
            other => (String::new(), other.to_string()),
        };
        let key = format!("prices.{key}");
        Err(ConfigError::Value { path: from.unwrap_or_default(), key, message })
    }

    fn protected(&self, extra: &[String], tool: &str) -> bool {
        DEFAULT_PROTECTED_TOOLS.contains(&tool) || extra.iter().any(|t| t == tool)
    }

    /// Whether deduplication leaves `tool` alone.
    pub fn dedup_protects(&self, tool: &str) -> bool {
        self.protected(&self.strategies.deduplication.protected_tools, tool)
    }

    /// Whether purge-errors leaves `tool` alone.
    ///
    /// Protection guards a tool's output, and purge-errors only touches the inputs of a call
    /// that failed (its error stays), so only the tools listed in
    /// `strategies.purgeErrors.protectedTools` are left alone: a failed `edit` or `write`
    /// loses its (often large) arguments too.
    pub fn purge_protects(&self, tool: &str) -> bool {
        self.strategies.purge_errors.protected_tools.iter().any(|t| t == tool)
    }

    /// Whether observation masking leaves `tool` alone.
    pub fn masking_protects(&self, tool: &str) -> bool {
        self.protected(&self.strategies.masking.protected_tools, tool)
    }

    /// Whether the agent's discard and extract tools leave `tool` alone.
    pub fn tools_protect(&self, tool: &str) -> bool {
        self.protected(&self.tools.settings.protected_tools, tool)
    }

    /// Whether `/dcp sweep` leaves `tool` alone.
    pub fn sweep_protects(&self, tool: &str) -> bool {
        self.protected(&self.commands.protected_tools, tool)
    }
}
