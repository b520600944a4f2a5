//! `system`, `turn` and `describe`: what dcp adds in front of a session's prompt, and from when.
//!
//! dcp's head is its agent tools' definitions alone, as short as keeps the tools usable
//! ([`crate::texts::tool_definitions`]): what would be instructions in the system prompt is
//! folded into the tools' descriptions, so `system` adds no line. The head sits before the
//! whole history, so adding it to a session whose cache is warm re-bills its cached prompt,
//! and once there it costs a cached read on every request. By default
//! (`tools.settings.offer = "always"`) a session has them from its first request, whose cache
//! is cold anyway. With `"paid"` a session is offered them
//! only from the first user turn on a cold cache at which its ledger has banked that cost
//! (`crate::policy::offer`); until then its requests carry neither the tools, nor the
//! `<prunable-tools>` list, nor the message id tags. OpenCode decides a turn's tools when its
//! user message is created: the plugin asks `turn` then, and sets the message's `tools` map
//! to leave dcp's out.

use super::edits::sent::ResentEdits;
use super::protocol::{
    self, code, Described, Descriptions, InitializeParams, Initialized, RpcError, SessionParams, System, ToolsOffered,
    TurnAnswer, TurnParams,
};
use super::request::head_tokens;
use super::{in_force, internal, now_ms, refetch, validate_session_id, LiveSession, Server};
use crate::config;
use crate::policy;
use crate::state::trial::Arm;
use crate::strategies::incremental::Index;
use crate::strategies::Rules;
use crate::texts;

impl Server {
    /// `initialize`: the protocol's version, and the agent tools dcp offers, with their
    /// descriptions and arguments (its head).
    pub(super) fn initialize(&mut self, p: InitializeParams) -> Result<Initialized, RpcError> {
        self.resent = match p.protocol {
            None => ResentEdits::default(),
            Some(1) => ResentEdits::Whole,
            Some(v) if v == protocol::PROTOCOL_VERSION => ResentEdits::KeepBefore,
            Some(v) => {
                return Err(RpcError::new(
                    code::INVALID_REQUEST,
                    format!("protocol {v} is not supported; this sidecar speaks 1 and {}", protocol::PROTOCOL_VERSION),
                ))
            }
        };
        if let Some(plugin) = p.plugin_version.as_deref().filter(|v| *v != env!("CARGO_PKG_VERSION")) {
            // The plugin tells the user; this line is for the log.
            tracing::warn!("the plugin is {plugin} but this binary is {}", env!("CARGO_PKG_VERSION"));
        }
        if let Some(dir) = p.directory {
            self.options.project = Some(dir);
            let loaded = config::load(&config::Locations::standard(&self.options.env, self.options.project.as_deref()))
                .map_err(|e| internal(crate::error_chain(&e)))?;
            for w in &loaded.warnings {
                tracing::warn!("{w}");
            }
            self.rules = Rules::new(loaded.config).map_err(internal)?;
            self.backed_off = refetch::backed_off_rules(&self.rules).map_err(internal)?;
            self.config_warnings = loaded.warnings;
            self.head = None;
            // What the indexes read was judged by the old rules.
            for session in self.sessions.values_mut() {
                session.history.index = Index::default();
                session.caches.in_force = in_force::InForce::default();
            }
        }
        let tools = &self.rules.config().tools;
        Ok(Initialized {
            protocol: protocol::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            enabled: self.rules.config().enabled,
            // Not `TokenCounter::estimator`: that would wait for the pre-tokenizer's pattern,
            // which compiles in the background (a few ms) while `initialize` is answered.
            estimator: crate::tokens::expected_estimator().name(),
            tools: ToolsOffered {
                discard: tools.discard.enabled,
                extract: tools.extract.enabled,
                compress: tools.compress.enabled,
                restore: tools.restore.enabled,
            },
            commands: self.rules.config().commands.enabled,
            descriptions: Descriptions {
                discard: texts::DISCARD_DESCRIPTION,
                extract: texts::EXTRACT_DESCRIPTION,
                compress: texts::compress_description(false, false),
                restore: texts::restore::DESCRIPTION,
                command: texts::COMMAND_DESCRIPTION,
            },
            args: texts::tool_args(),
            required: texts::tool_required(),
        })
    }

    /// A request's system prompt is being built. dcp adds no line to it (the tools'
    /// descriptions say when to call them); the call still sees the session first, so its
    /// title and ledger are at hand before its first `transform`.
    pub(super) fn system(&mut self, p: SessionParams) -> System {
        if let Some(sid) = p.session_id.as_deref() {
            self.with_session(sid, |server, session| {
                server.look_up_session(session, sid);
                server.load_state(session, sid);
            });
        }
        System { system: Vec::new() }
    }

    /// A user turn starts: whether its requests carry dcp's head. A session not offered it
    /// yet gets it when the policy says its ledger has paid for it; the charge is taken from
    /// the bank and the decision kept in the state file.
    pub(super) fn turn(&mut self, p: TurnParams) -> Result<TurnAnswer, RpcError> {
        let sid = p.session_id.clone();
        validate_session_id(&sid)?;
        let offer = self.with_session(&sid, |server, session| {
            if let Some(parent) = p.parent_id {
                session.about.parent = Some(parent.is_some());
            }
            // No look-up in `opencode.db` here: the session is being titled as its first
            // message is created, and the state file keeps the title the first look-up finds.
            if server.skips(Some(session)) || server.arm(session, &sid) == Some(Arm::Unpruned) {
                return false;
            }
            server.load_state(session, &sid);
            if session.offered(&server.rules, server.store.loaded(&sid).map(|slot| slot.ledger())) {
                return true;
            }
            let tools = &server.rules.config().tools;
            if !(tools.discard.enabled || tools.extract.enabled || tools.compress.enabled || tools.restore.enabled) {
                return false;
            }
            server.offer_when_paid(session, &sid, p.now.unwrap_or_else(now_ms))
        });
        Ok(TurnAnswer { offer })
    }

    fn offer_when_paid(&mut self, session: &mut LiveSession, sid: &str, now: i64) -> bool {
        let rewrite = &self.rules.config().rewrite;
        let Ok(slot) = self.store.slot(sid) else { return false };
        let (idle, banked) = (slot.ledger().idle_seconds(now), slot.ledger().banked);
        let sheet = session.priced_by(&self.rules);
        let turn = policy::Turn {
            head: head_tokens(&mut self.head, &self.rules, &slot.tokens),
            cold: idle.is_none_or(|s| s >= rewrite.cold_after(sheet)),
            banked,
            rates: sheet.rates,
        };
        if !policy::offer(rewrite, &turn) {
            return false;
        }
        tracing::debug!(session = sid, banked, "offering the agent tools from this turn on");
        slot.offer_head(policy::offer_charge(&turn));
        self.save(session, sid);
        true
    }
}

impl Server {
    /// `describe`: `compress`'s description as the session's requests can use it, naming only
    /// the id tags they carry ([`super::describe`]).
    pub(super) fn describe(&mut self, p: TurnParams) -> Result<Described, RpcError> {
        let sid = p.session_id;
        validate_session_id(&sid)?;
        let cold_after = self.rules.config().rewrite.cold_after(self.rules.sheet());
        let now = p.now.unwrap_or_else(now_ms);
        let tags = self.with_session(&sid, |server, session| {
            let idle = server.store.loaded(&sid).and_then(|slot| slot.ledger().idle_seconds(now));
            let cold = idle.is_none_or(|s| s >= cold_after);
            let tags = super::describe::described(session.about.described, session.about.present, cold);
            session.about.described = Some(tags);
            tags
        });
        Ok(Described { compress: texts::compress_description(tags.messages, tags.ranges) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::tokens::{EstimatorChoice, TokenCounter};

    fn head_of(config: Config) -> u64 {
        let rules = Rules::new(config).unwrap();
        head_tokens(&mut None, &rules, &TokenCounter::new(EstimatorChoice::Auto))
    }

    #[test]
    fn the_default_head_of_discard_compress_and_restore_stays_at_most_150_tokens() {
        // The tools' definitions are in every request of a session offered them: the head must
        // not grow unnoticed. At 180 tokens (with discard's `distillation`), short agent runs
        // that dcp never rewrites paid more than 1.02 of no pruning for the head alone; at 149
        // they do not (docs/results/head.md).
        let head = head_of(Config::default());
        assert!(head <= 150, "the head is {head} tokens");
        assert!(head >= 140, "the head is {head} tokens: are discard, compress and restore all defined?");
    }

    #[test]
    fn extract_is_off_by_default_and_enabling_it_adds_its_definition() {
        let mut config = Config::default();
        assert!(!config.tools.extract.enabled);
        config.tools.extract.enabled = true;
        let with_extract = head_of(config);
        let added = with_extract - head_of(Config::default());
        assert!((50..=80).contains(&added), "extract adds {added} tokens");
    }

    #[test]
    fn the_head_counts_only_the_tools_enabled() {
        let mut config = Config::default();
        config.tools.compress.enabled = false;
        let without_compress = head_of(config.clone());
        assert!(without_compress < head_of(Config::default()) && without_compress > 0, "{without_compress}");
        config.tools.discard.enabled = false;
        config.tools.restore.enabled = false;
        assert_eq!(head_of(config), 0);
    }
}
