//! What the agent reads about bringing back what dcp hid: the handle each placeholder names,
//! the `restore` tool's description, and what a restore answers.
//!
//! Every hidden output (masked, pruned, a finished turn's calls, an agent's compressed range)
//! names a short handle in its placeholder: the call's agent-facing number (the one the
//! `<prunable-tools>` list and `discard` use), or `bN` for a range. The agent brings the exact
//! original back in one call: the `restore` tool through the plugin, `dcp restore N` in its
//! own shell through `dcp proxy` ([`Via`]). A handle is a number because a number of up to
//! three digits is one token: the placeholders ride in every request, and a long session
//! carries dozens.

use std::fmt::Write as _;

/// How the agent restores a hidden text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Its `restore` tool (the plugin).
    Tool,
    /// `dcp restore N` in its own shell (`dcp proxy`, whose clients have no dcp tools).
    Shell,
}

/// A hidden text's handle, and how the agent restores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    pub id: u32,
    pub via: Via,
}

/// What a placeholder adds to say how to restore what it stands for: `restore 12`, or
/// `` run `dcp restore 12` ``.
pub fn hint(via: Via, handle: &str) -> String {
    match via {
        Via::Tool => format!("restore {handle}"),
        Via::Shell => format!("run `dcp restore {handle}`"),
    }
}

/// `placeholder` (a `[...]` text) with how to restore what it stands for before its closing
/// bracket, when there is a handle; `placeholder` as it is otherwise.
pub fn with_handle(placeholder: &str, handle: Option<Handle>) -> String {
    match handle {
        Some(h) => inserted(placeholder, &hint(h.via, &h.id.to_string())),
        None => placeholder.to_string(),
    }
}

/// `placeholder` with `hint` before its closing bracket.
fn inserted(placeholder: &str, hint: &str) -> String {
    match placeholder.strip_suffix(']') {
        Some(open) => format!("{open}; {hint}]"),
        None => format!("{placeholder} ({hint})"),
    }
}

/// What a masked output becomes when it can be restored: the call's input is sent right
/// before it, so the placeholder names only how to get the output back.
pub fn masked_output(handle: Handle) -> String {
    format!("[Output masked; {}]", hint(handle.via, &handle.id.to_string()))
}

/// The line that stands for a finished turn's calls when their outputs can be restored: each
/// named call (its tool and key argument) with its number, then the numbers of the rest.
pub fn collapsed_turn(named: &[(u32, String)], rest: &[u32], via: Via) -> String {
    let mut text = format!("[Tool calls of this turn, outputs hidden ({}):", hint(via, "N"));
    for (i, (id, label)) in named.iter().enumerate() {
        let _ = write!(text, "{} {id} {label}", if i == 0 { "" } else { ";" });
    }
    if !rest.is_empty() {
        let numbers: Vec<String> = rest.iter().map(u32::to_string).collect();
        let _ = write!(text, "; and {}", numbers.join(" "));
    }
    text.push(']');
    text
}

/// The head of what stands for an agent's compressed range when its messages can be restored.
pub fn summary_head(head: &str, block: u32, via: Option<Via>) -> String {
    match via {
        Some(via) => inserted(head, &hint(via, &format!("b{block}"))),
        None => head.to_string(),
    }
}

/// The `restore` tool's description: what it gives, in as few words as say it, for it is in
/// every request of a session offered the tools; what it takes (the number a placeholder
/// names, `restore 12`) each placeholder says where it is needed.
pub const DESCRIPTION: &str = "Show what a placeholder hid.";

/// What `restore` answers when the handle names nothing it can bring back.
pub fn unknown(handle: &str) -> String {
    format!("Nothing to restore for {handle:?}: give the number a placeholder names (restore 12), a tool call id, or a range's bN.")
}

/// What `restore` answers when OpenCode's copy of the text cannot be read.
pub fn unreadable(handle: &str, why: &str) -> String {
    format!("Cannot restore {handle}: {why}. Run the call again if you need its output.")
}

/// Why a text cannot be restored when OpenCode's store lacks it, or holds another text.
pub const NOT_STORED: &str = "OpenCode's stored copy of it is not there, or is not what the model was sent";

/// The header of a restored range: its messages, one after the other.
pub fn range_header(block: u32, messages: usize) -> String {
    format!("[b{block}: {messages} messages as they were]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_goes_inside_the_placeholder_s_bracket_and_says_how_to_restore() {
        let tool = Some(Handle { id: 12, via: Via::Tool });
        assert_eq!(
            with_handle("[masked: applied to the file on disk]", tool),
            "[masked: applied to the file on disk; restore 12]"
        );
        let shell = Some(Handle { id: 7, via: Via::Shell });
        assert_eq!(masked_output(shell.unwrap()), "[Output masked; run `dcp restore 7`]");
        assert_eq!(with_handle("[x]", None), "[x]");
        assert_eq!(
            summary_head("[Earlier messages, summarised by the agent]", 3, Some(Via::Tool)),
            "[Earlier messages, summarised by the agent; restore b3]"
        );
        let line = collapsed_turn(&[(4, "read `a.py`".into()), (5, "bash `ls`".into())], &[6, 7], Via::Tool);
        assert_eq!(line, "[Tool calls of this turn, outputs hidden (restore N): 4 read `a.py`; 5 bash `ls`; and 6 7]");
    }
}
