//! Known models and their price sheets: a model's id (with or without its provider's prefix,
//! `anthropic/`, `openai/`…, and with or without a date suffix) finds the longest entry it
//! starts with. Money prices are US dollars per million tokens.
//!
//! Where each figure comes from (the docs index, read for this table; "unverified" where only a
//! third party gave it):
//! - Anthropic: Opus 4.5 and 4.6 $5 / $25 (platform.claude.com, the Opus 4.6 model page; Opus
//!   4.5 as listed beside it); Sonnet 4, 4.5 and 4.6 $3 / $15 and Haiku 4.5 $1 / $5 (the
//!   `synaps` and `cogito-claude` crates' tables citing anthropic.com/pricing, November 2025;
//!   Sonnet 4.6 unverified); Opus 4 and 4.1 $15 / $75 (a third-party table, unverified).
//!   Cache reads 0.1x, 5-minute writes 1.25x for every model.
//! - OpenAI: GPT-5, GPT-5 Codex and GPT-5.1 $1.25 / $10, cached 0.1x (the `openai-cost` crate's
//!   table, 2026-Q2); GPT-5.4 $2.50 / $15, cached 0.1x (the `adk-model` crate's table, March
//!   2026, unverified against OpenAI's page); GPT-4.1 cached 0.25x and GPT-4o 0.5x of input
//!   (the same crate). GPT-4 Turbo $10 / $30 with no cache: checked against a recorded run's
//!   cost (`bench/real`, SWE-agent `pydicom-1458-gpt4`: 122,612 tokens sent and 1,369
//!   received for $1.26719).
//! - DeepSeek `deepseek-chat` and `deepseek-reasoner`: miss $0.28, hit $0.028, output $0.42,
//!   checked against the per-message cost the held-out DeepSeek runs recorded (320 hits, 1,209
//!   misses and 73 output tokens for $0.00037814).
//! - Gemini 3 Pro (preview) $2 / $12, cached $0.20, checked against the held-out Gemini runs'
//!   recorded cost; Gemini 2.5 Pro $1.25 / $10, cached 0.1x (unverified).

use super::{family, MoneyPrices, Sheet};

/// One known model: the id it starts with, its family, its money prices and, where it differs
/// from the family's, its cache-read share.
struct Model {
    id: &'static str,
    family: &'static str,
    input: f64,
    output: f64,
    read: Option<f64>,
}

const fn m(id: &'static str, family: &'static str, input: f64, output: f64) -> Model {
    Model { id, family, input, output, read: None }
}

const MODELS: &[Model] = &[
    m("claude-opus-4-5", "anthropic-5m", 5.0, 25.0),
    m("claude-opus-4-6", "anthropic-5m", 5.0, 25.0),
    m("claude-opus-4-1", "anthropic-5m", 15.0, 75.0),
    m("claude-opus-4", "anthropic-5m", 15.0, 75.0),
    m("claude-sonnet-4", "anthropic-5m", 3.0, 15.0),
    m("claude-3-7-sonnet", "anthropic-5m", 3.0, 15.0),
    m("claude-3-5-sonnet", "anthropic-5m", 3.0, 15.0),
    m("claude-haiku-4-5", "anthropic-5m", 1.0, 5.0),
    m("gpt-5-codex", "openai", 1.25, 10.0),
    m("gpt-5.1", "openai", 1.25, 10.0),
    m("gpt-5.4", "openai", 2.5, 15.0),
    m("gpt-5", "openai", 1.25, 10.0),
    Model { read: Some(0.25), ..m("gpt-4.1", "openai", 2.0, 8.0) },
    Model { read: Some(0.5), ..m("gpt-4o", "openai", 2.5, 10.0) },
    m("gpt-4-turbo", "none", 10.0, 30.0),
    m("deepseek-chat", "deepseek", 0.28, 0.42),
    m("deepseek-reasoner", "deepseek", 0.28, 0.42),
    m("gemini-3-pro", "gemini", 2.0, 12.0),
    m("gemini-2.5-pro", "gemini", 1.25, 10.0),
];

/// The sheet of model `id`: its family's, with its money prices, named by the table's id.
/// `None` for a model the table does not know.
pub fn for_model(id: &str) -> Option<Sheet> {
    let id = id.trim().to_ascii_lowercase();
    let bare = id.rsplit('/').next().unwrap_or(&id);
    let model = MODELS.iter().filter(|m| bare.starts_with(m.id)).max_by_key(|m| m.id.len())?;
    let mut sheet = family(model.family)?;
    sheet.name = model.id.to_string();
    sheet.money = Some(MoneyPrices { currency: "USD".into(), input: model.input, output: Some(model.output) });
    if let Some(read) = model.read {
        sheet.rates.read = read;
    }
    Some(sheet)
}

/// The family of a provider's id (`anthropic`, `openai`, `google`, `deepseek`), for a model
/// the table does not know.
pub fn for_provider(provider: &str) -> Option<Sheet> {
    match provider.trim().to_ascii_lowercase().as_str() {
        "anthropic" => family("anthropic-5m"),
        "openai" | "azure" => family("openai"),
        "google" | "gemini" | "google-vertex" => family("gemini"),
        "deepseek" => family("deepseek"),
        _ => None,
    }
}
