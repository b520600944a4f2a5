//! The index's working set: the calls the agent works from now, kept incrementally as
//! `masking::working` finds them over a whole history, and what the next steps need
//! (`crate::strategies::keep`: the views of files the latest follow-up prompt names, and the
//! outputs in use).

use super::rewind::Undo;
use super::Index;
use crate::session::{CallFacts, ToolCall, ToolStatus};
use crate::strategies::{keep, masking, Rules};

impl Index {
    /// Sets the prompt cache of the session's provider, which the rules that keep a text for
    /// long need (`crate::strategies::keep`, "Without a prompt cache"): each request, after
    /// [`Index::sync`], since a rebuilt index starts from [`keep::PromptCache::On`].
    pub fn set_prompt_cache(&mut self, cache: keep::PromptCache) {
        self.signals.set_cache(cache);
    }

    /// Notes the file call `at` read or changed, for the working set.
    pub(super) fn note_files(&mut self, at: usize, call: &ToolCall<'_>, facts: &CallFacts) {
        if let Some(key) = facts.key.as_ref().filter(|_| call.status == ToolStatus::Completed) {
            let old = self.latest_view.insert((facts.tool.clone(), key.clone()), at);
            self.note(|| Undo::LatestView((facts.tool.clone(), key.clone()), old));
        }
        let Some(path) = call.file_path().filter(|_| call.status == ToolStatus::Completed) else { return };
        if call.tool == "read" || call.tool == "write" {
            let view = masking::FileView::after(self.file_views.get(path), at, call);
            let old = self.file_views.insert(path.to_string(), view);
            self.note(|| Undo::FileView(path.to_string(), old));
        }
        if masking::EDIT_TOOLS.contains(&call.tool) {
            let old = self.last_edit.insert(path.to_string(), at);
            self.note(|| Undo::LastEdit(path.to_string(), old));
        } else if call.tool != "read" {
            return;
        }
        self.recent_files.retain(|f| f != path);
        self.recent_files.insert(0, path.to_string());
        self.recent_files.truncate(masking::MAX_WORKING_FILES);
    }

    /// Whether call `at` is the agent's working material now ([`masking::working`]).
    pub(super) fn working(&self, at: usize, rules: &Rules) -> bool {
        let m = &rules.config().strategies.masking;
        let recent = self.calls.len().saturating_sub(m.working_calls as usize);
        let facts = &self.calls[at].facts;
        if self.signals.in_use(at, &facts.tool, m.keep_quoted) || self.named_view(at, rules) {
            return true;
        }
        let Some(path) = facts.file_path.as_deref().filter(|_| &*facts.tool == "read") else { return false };
        let files = (m.working_files as usize).min(masking::MAX_WORKING_FILES);
        self.file_views.get(path).is_some_and(|view| view.at == at)
            && (self.last_edit.get(path).is_some_and(|&e| e >= recent && self.calls[e].prompts == self.prompts)
                || self.recent_files[..files.min(self.recent_files.len())].iter().any(|f| f == path))
    }

    /// Whether call `call_id` shows a file the latest follow-up prompt names, as the agent
    /// knows it ([`masking::shows_file`]): a finished turn's line leaves it
    /// (`crate::strategies::turns`).
    pub fn keeps_named(&self, call_id: &str, rules: &Rules) -> bool {
        self.by_call_id.get(call_id).is_some_and(|&at| self.named_view(at, rules))
    }

    /// Whether call `at` shows a file the latest follow-up prompt names.
    fn named_view(&self, at: usize, rules: &Rules) -> bool {
        let facts = &self.calls[at].facts;
        let Some(path) = facts.file_path.as_deref() else { return false };
        self.signals.named_call(at, path, rules.config().strategies.masking.keep_named)
            && masking::shows_file(self.file_views.get(path), at, &facts.tool)
    }

    /// Whether a newer completed call of the same tool on the same key argument exists (a file
    /// read again, a command run again): call `at`'s view is superseded.
    pub(super) fn superseded(&self, at: usize) -> bool {
        let facts = &self.calls[at].facts;
        let Some(key) = facts.key.as_ref() else { return false };
        self.latest_view.get(&(facts.tool.clone(), key.clone())).is_some_and(|&latest| latest != at)
    }
}
