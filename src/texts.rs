//! What dcp says to the model and in the session: the agent's instructions, tool answers and
//! refusals ([`refusals`]), the prunable list, nudges, notifications ([`notice`]) and the `/dcp`
//! answers.
//! All of it lives here, in Rust; the plugin only carries it (but for the two lines it shows
//! when the sidecar cannot answer). The CLI's and `/dcp`'s reports are tables, drawn by
//! [`crate::report`].
//!
//! It takes plain data (the state's records and blocks, the answers' own structs such as
//! [`ToolDone`]) and imports nothing above [`crate::state`], so the strategies and every
//! surface can speak through it.

use std::fmt::Write as _;

use crate::config::Tools;
use crate::format;
use crate::state::blocks::{Block, Blocks, Origin};

pub mod notice;
pub mod refusals;
pub mod restore;

pub use notice::{notification, Notice};

/// The agent tools' descriptions. They are dcp's whole head (no line is added to the system
/// prompt): what each tool does and, in `discard`'s, when to call it, each in one clear
/// sentence and as few tokens as say it, for they are in every request; what a tool takes its
/// schema names (`ids`, `range`, `id`). It names no `<prunable-tools>` id: the list rides only
/// on the requests it pays on, and names its own lines' ids.
///
/// `discard` shows no `distillation`: at 26 tokens in every request it was the head's most
/// costly part, and `compress` keeps a summary of what it replaces. A discard still reads one
/// (an extract), for models that know the published DCP's `extract`, which
/// `tools.extract.enabled` offers as a tool of its own.
pub const DISCARD_DESCRIPTION: &str = "Drop unneeded tool outputs alongside your next tool call.";

/// `extract`, registered only with `tools.extract.enabled` (for agents told of it): `discard`
/// with a `distillation` does the same.
pub const EXTRACT_DESCRIPTION: &str = "Like discard, but keeps distillation[i], your short summary of ids[i].";

/// The agent tools dcp defines, in the order their definitions go.
pub const AGENT_TOOLS: [&str; 4] = ["discard", "extract", "compress", "restore"];

/// `compress`'s one `range` argument is the `from..to` this names: one argument costs fewer
/// tokens in every request than two. It names the id tags only when the requests carry them
/// (see `crate::sidecar`'s `describe`): `messages`, `<mN>` at the end of messages; `ranges`,
/// `<bN>` at the end of a compressed range.
pub fn compress_description(messages: bool, ranges: bool) -> &'static str {
    match (messages, ranges) {
        (false, false) => COMPRESS_DESCRIPTION,
        (true, false) => "Replace finished messages from..to (tool call ids, or the <mN> ending a message) with your summary.",
        (false, true) => "Replace finished messages from..to (tool call ids, or a range's <bN>) with your summary.",
        (true, true) => {
            "Replace finished messages from..to (tool call ids, the <mN> ending a message, a range's <bN>) with your summary."
        }
    }
}

/// `compress`'s description before the session's requests carry any id tag.
pub const COMPRESS_DESCRIPTION: &str = "Replace finished messages from..to (tool call ids) with your summary.";

/// The agent tools' arguments, in the JSON-Schema form the plugin registers them with (one
/// schema per argument). As small as the tools allow: they are in every request (`compress`
/// takes its range as one `from..to` string). An array keeps its `items` schema, which
/// OpenAI requires of every array. The tools read more forms than these
/// (`crate::strategies::compress`'s `from` and `to`, `startId` and `endId`, its `content`
/// list of ranges and `topic`, discard's `reason`), for models that use them.
pub fn tool_args() -> serde_json::Value {
    let strings = serde_json::json!({"type": "array", "items": {"type": "string"}});
    let string = serde_json::json!({"type": "string"});
    serde_json::json!({
        "discard": {"ids": strings},
        "extract": {"ids": strings, "distillation": strings},
        "compress": {"range": string, "summary": string},
        "restore": {"id": string},
    })
}

/// The arguments each agent tool requires: the rest of [`tool_args`] are optional. OpenCode
/// marks every argument of a plugin's JSON-Schema tool required; the plugin sets this list
/// in the definition OpenCode sends (its `tool.definition` hook).
pub fn tool_required() -> serde_json::Value {
    serde_json::json!({
        "discard": ["ids"],
        "extract": ["ids", "distillation"],
        "compress": ["range", "summary"],
        "restore": ["id"],
    })
}

/// One agent tool's definition as a provider is sent it (the OpenAI function form OpenCode
/// builds from the description, the arguments and the required ones): what the tool adds to
/// every request. Without a list of `required` ones (`null`), every argument is, as OpenCode
/// marks them when nothing says otherwise.
pub fn tool_definition(
    name: &str,
    description: &str,
    args: &serde_json::Value,
    required: &serde_json::Value,
) -> String {
    let every = || serde_json::json!(args.as_object().map(|a| a.keys().collect::<Vec<_>>()).unwrap_or_default());
    let required = if required.is_array() { required.clone() } else { every() };
    let parameters = serde_json::json!({"type": "object", "properties": args, "required": required});
    serde_json::json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
        .to_string()
}

/// The definitions of the agent tools `tools` enables ([`tool_definition`]): dcp's head.
pub fn tool_definitions(tools: &Tools) -> Vec<String> {
    let (args, required) = (tool_args(), tool_required());
    [
        (tools.discard.enabled, "discard", DISCARD_DESCRIPTION),
        (tools.extract.enabled, "extract", EXTRACT_DESCRIPTION),
        (tools.compress.enabled, "compress", COMPRESS_DESCRIPTION),
        (tools.restore.enabled, "restore", restore::DESCRIPTION),
    ]
    .into_iter()
    .filter(|(on, ..)| *on)
    .map(|(_, name, description)| tool_definition(name, description, &args[name], &required[name]))
    .collect()
}

/// The `<prunable-tools>` block appended at the tail of a request.
pub fn prunable_list<'a>(lines: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = String::from("<prunable-tools>\n");
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("</prunable-tools>");
    text
}

/// A reminder to prune, when many tool results piled up since the last one.
pub fn nudge(items: usize, tokens: u64) -> String {
    format!(
        "<dcp-nudge>{items} tool outputs ({} tokens) are in your context. If some are no longer needed, discard them.</dcp-nudge>",
        format::tokens(tokens)
    )
}

/// One call a `discard` or `extract` pruned, as its answer names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunedCall {
    /// The name the agent used (`7`, `call_…`, `m0012`).
    pub name: String,
    pub tool: String,
    pub key: Option<String>,
}

/// What a `discard` or `extract` did, as its answer says it: the tokens and the calls it
/// pruned, and what was wrong with the rest of the request.
pub struct ToolDone<'a> {
    pub verb: &'a str,
    pub tokens: u64,
    pub done: &'a [PrunedCall],
    pub problems: &'a [String],
}

/// The answer to a `discard` or `extract`: what was pruned, and what was not and why.
pub fn tool_done(applied: &ToolDone<'_>) -> String {
    let verb = applied.verb;
    let tokens = applied.tokens;
    let mut text = String::new();
    if applied.done.is_empty() {
        text.push_str("Nothing was pruned.");
    } else {
        let n = applied.done.len() as u64;
        let _ = write!(text, "{verb} {} ({} tokens):", format::count(n, "tool output"), format::tokens(tokens));
        for done in applied.done {
            let _ = write!(text, " {}: {}", done.name, done.tool);
            if let Some(k) = &done.key {
                let _ = write!(text, " {}", format::shorten(k, 80));
            }
            text.push(';');
        }
        text.pop();
        text.push('.');
    }
    if !applied.problems.is_empty() {
        let _ = write!(text, " Not pruned: {}.", applied.problems.join("; "));
        if applied.done.is_empty() {
            text.push_str(" Name calls by their tool call ids, or by the ids of the <prunable-tools> list.");
        }
    }
    text
}

pub const COMMAND_DESCRIPTION: &str =
    "Dynamic context pruning: /dcp stats | context | report | sweep [N] | decompress [ID] | help";

pub const HELP: &str = "DCP commands:
  /dcp stats          what pruning kept out of requests and saved, this session and all-time
  /dcp context        what the model is sent, by category, with the prunes in force
  /dcp report         write the savings report (an HTML page) and say where it is
  /dcp sweep [N]      prune every tool output since your last message, or the last N
  /dcp decompress     the compressed ranges: the agent's and dcp's finished turns
  /dcp decompress ID  send the messages of range ID (b1) again instead of its summary
  /dcp help           this help";

/// `/dcp` and `/dcp help`: the commands, then what dcp ignored in its config files, which
/// the user is otherwise told only in OpenCode's log.
pub fn help(config_warnings: &[String]) -> String {
    let mut text = HELP.to_string();
    if !config_warnings.is_empty() {
        text.push_str("\n\nIgnored in dcp's config (`dcp doctor` checks it):");
        for warning in config_warnings {
            text.push_str("\n  ");
            text.push_str(warning);
        }
    }
    text
}

/// `/dcp decompress` without an id: the compressed ranges, and how to restore one.
pub fn blocks(blocks: &Blocks) -> String {
    let active: Vec<&Block> = blocks.active().collect();
    if active.is_empty() {
        return "No compressed ranges in this session.".to_string();
    }
    let mut text = String::from("Compressed ranges (summaries and finished turns stand in for their messages):");
    let heads: Vec<String> = active
        .iter()
        .map(|b| {
            format!(
                "b{}  {}, saves {} tokens{}",
                b.id,
                format::count(b.effective_messages.len() as u64, "message"),
                format::tokens(b.net_tokens()),
                if b.applied { "" } else { " (waiting for the cache)" },
            )
        })
        .collect();
    // The labels line up in one column after the widest range.
    let width = heads.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    for (b, head) in active.iter().zip(&heads) {
        let label = match b.origin {
            Origin::FinishedTurn => "finished turn (dcp)".to_string(),
            Origin::Agent if b.topic.is_empty() => String::new(),
            Origin::Agent => format::shorten(&b.topic, 60).to_string(),
            Origin::Other => "made by a newer dcp".to_string(),
        };
        let line = if label.is_empty() { head.clone() } else { format!("{head:<width$}  {label}") };
        let _ = write!(text, "\n  {line}");
    }
    text.push_str("\n/dcp decompress ID sends a range's messages again instead of its summary.");
    text
}

/// The answer to `/dcp decompress ID` when `ID` is not an active range.
pub fn not_a_range(id: &str, blocks: &Blocks) -> String {
    format!("{id:?} is not an active compressed range.\n\n{}", self::blocks(blocks))
}

/// The answer to `/dcp decompress ID`: the range, and the older ones it had taken in.
pub fn decompressed(id: u32, restored: &[u32]) -> String {
    let mut text = format!("Restored b{id}: its messages are sent again from the next request on.");
    if !restored.is_empty() {
        let names: Vec<String> = restored.iter().map(|b| format!("b{b}")).collect();
        let _ = write!(text, " The ranges it had taken in stand for theirs again: {}.", names.join(", "));
    }
    text
}

/// The answer to an agent tool that `dcp.jsonc` disabled.
pub fn tool_disabled(tool: &str) -> String {
    format!("{tool} is disabled in dcp.jsonc; nothing was changed.")
}

/// The answer to an agent tool called before the sidecar saw the session's history.
pub const TOOL_BEFORE_HISTORY: &str =
    "dcp has not seen this session's history yet; nothing was changed. Try again on the next step.";

/// The answer to `/dcp` when `commands.enabled` is off.
pub const COMMANDS_DISABLED: &str = "DCP commands are disabled in dcp.jsonc (commands.enabled).";

/// The answer to `/dcp sweep` with an argument that is not a number.
pub fn sweep_not_a_number(arg: &str) -> String {
    format!("/dcp sweep takes a number of tool calls, not {arg:?}.\n\n{HELP}")
}

/// The answer to a `/dcp` command that does not exist.
pub fn unknown_command(arguments: &str) -> String {
    format!("Unknown /dcp command {arguments:?}.\n\n{HELP}")
}

/// The answer to `/dcp sweep` when nothing is left to sweep.
pub const NOTHING_TO_SWEEP: &str = "Nothing to sweep.";

/// The answer to a `/dcp sweep` that pruned `n` outputs.
pub fn swept(n: usize, tokens: u64) -> String {
    format!("Swept {} ({} tokens).", format::count(n as u64, "tool output"), format::tokens(tokens))
}

/// `/dcp report`'s answer: where the page is.
pub fn report_written(file: &std::path::Path) -> String {
    format!("Savings report written to {}\nOpen file://{} in a browser.", file.display(), file.display())
}

/// `/dcp report`'s answer when `dcp report` failed: what it said, on one line.
pub fn report_failed(stderr: &str) -> String {
    let said: String = stderr.trim().chars().filter(|c| !c.is_control()).take(300).collect();
    format!("Cannot write the savings report: {said}")
}

/// The title of `/dcp context`'s report: the session's title, if it has one, and its id.
pub fn context_title(session_id: &str, title: Option<&str>) -> String {
    match title {
        Some(title) => format!("Session \"{}\" ({session_id})", format::title(title)),
        None => format!("Session {session_id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/dcp decompress` listed a range saving ~5.5K tokens and one saving ~176 with their
    /// labels at different columns.
    #[test]
    fn the_labels_of_the_compressed_ranges_line_up() {
        let block = |id: u32, tokens: u64, topic: &str| {
            serde_json::json!({"blockId": id, "active": true, "compressedTokens": tokens, "topic": topic,
                "compressCallId": "c", "effectiveMessageIds": ["m1", "m2"]})
        };
        let value = serde_json::json!({"blocksById": {
            "1": block(1, 5_600, "read the parser"), "2": block(2, 180, "fixed div"), "3": block(3, 90, "")}});
        let text = blocks(&Blocks::parse(&value).unwrap());
        let lines: Vec<&str> = text.lines().collect();
        let column = |line: &str, label: &str| line.find(label).unwrap_or_else(|| panic!("{label} in {text}"));
        assert_eq!(column(lines[1], "read the parser"), column(lines[2], "fixed div"), "{text}");
        assert!(lines[3].ends_with(" tokens"), "no label, no padding: {text}");
    }

    #[test]
    fn each_tool_description_is_one_sentence_naming_what_the_tool_takes() {
        // The descriptions are the only instructions the model has: each says what to pass.
        let described = [
            (DISCARD_DESCRIPTION, &["unneeded tool outputs", "alongside your next tool call"][..]),
            (EXTRACT_DESCRIPTION, &["distillation[i]", "ids[i]", "summary"]),
            (COMPRESS_DESCRIPTION, &["from..to", "tool call ids", "summary"]),
            (compress_description(true, true), &["<mN>", "<bN>", "summary"]),
        ];
        for (description, says) in described {
            assert!(says.iter().all(|s| description.contains(s)), "{description}");
            assert_eq!(description.matches(". ").count(), 0, "one sentence: {description}");
            assert!(description.ends_with('.'), "{description}");
        }
        let args = tool_args();
        // `compress` takes the `from..to` its description names as one argument; `discard`'s
        // schema names what it takes (ids) and no more.
        assert_eq!(args["compress"].as_object().unwrap().keys().collect::<Vec<_>>(), ["range", "summary"]);
        assert_eq!(args["discard"].as_object().unwrap().keys().collect::<Vec<_>>(), ["ids"]);
    }

    #[test]
    fn extract_requires_both_its_arguments_and_a_definition_without_a_list_requires_every_argument() {
        // The lists the plugin has OpenCode send: `discard` requires its ids.
        let (args, required) = (tool_args(), tool_required());
        let sent = |name: &str, required: &serde_json::Value| -> serde_json::Value {
            serde_json::from_str(&tool_definition(name, "", &args[name], required)).unwrap()
        };
        assert_eq!(
            sent("discard", &required["discard"])["function"]["parameters"]["required"],
            serde_json::json!(["ids"])
        );
        let extract = sent("extract", &required["extract"]);
        assert_eq!(extract["function"]["parameters"]["required"], serde_json::json!(["ids", "distillation"]));
        // Without a list (an older binary's answer), OpenCode marks every argument required.
        let compress = sent("compress", &serde_json::Value::Null);
        assert_eq!(compress["function"]["parameters"]["required"], serde_json::json!(["range", "summary"]));
    }
}

/// What stands in a request for what dcp took out of it, one text per kind of prune.
pub mod placeholders {
    /// What a pruned output becomes (the published DCP plugin's text, which models know).
    pub const OUTPUT: &str = "[Output removed to save context - information superseded or no longer needed]";
    /// What the string inputs of a purged errored call become (also DCP's text).
    pub const ERROR_INPUT: &str = "[input removed due to failed tool call]";
    /// What the `content` of a superseded write becomes.
    pub const WRITE_CONTENT: &str = "[content removed to save context - the file was read back later]";
    /// What a masked text argument of an edit or write becomes.
    pub const MASKED_INPUT: &str = "[masked: applied to the file on disk]";
    /// What the repeated error of a masked `invalid` call becomes.
    pub const MASKED_INVALID_INPUT: &str = "[masked]";

    /// What a masked output becomes: the call, by its tool and its key argument when it has
    /// one, and how to get the output back, in as few words as say it (a long session carries
    /// dozens).
    pub fn masked_output(tool: &str, key: Option<&str>) -> String {
        match key {
            Some(key) => format!("[Output masked; run {tool} `{key}` again if needed]"),
            None => format!("[Output masked; run this {tool} call again if needed]"),
        }
    }

    /// What the tool calls of a finished user turn become: the calls, each by its tool and key
    /// argument (`named`), and `more` not named.
    pub fn collapsed_turn(named: &[String], more: usize) -> String {
        let more = if more > 0 { format!("; and {more} more") } else { String::new() };
        format!(
            "[Tool calls of this turn, outputs no longer shown (run one again if needed): {}{more}]",
            named.join("; ")
        )
    }

    /// What a masked call OpenCode could not run becomes, naming the tool it asked for.
    pub fn masked_invalid(named: &str) -> String {
        format!("[Masked: `{named}` was not an available tool]")
    }
}

/// The first line of what the model sees in place of a compressed range, naming its topic.
pub fn summary_head(topic: &str) -> String {
    if topic.is_empty() {
        "[Earlier messages, summarised by the agent]".to_string()
    } else {
        format!("[Earlier messages, summarised by the agent: {topic}]")
    }
}

/// The answer the agent reads after `compress`: the ranges made, the notes on them, and what
/// was not applied and why.
pub fn compress_answer(state: &crate::state::SessionState, outcome: &crate::state::blocks::Outcome) -> String {
    let mut text = String::new();
    for id in &outcome.made {
        let Some(b) = state.blocks.by_id.get(id) else { continue };
        let _ = write!(
            text,
            "Compressed {} message{} into b{id} ({} -> {} tokens)",
            b.effective_messages.len(),
            if b.effective_messages.len() == 1 { "" } else { "s" },
            format::tokens(b.compressed_tokens),
            format::tokens(b.summary_tokens),
        );
        if !b.consumed.is_empty() {
            let names: Vec<String> = b.consumed.iter().map(|c| format!("b{c}")).collect();
            let _ = write!(text, ", covering {}", names.join(", "));
        }
        text.push_str(".\n");
    }
    for note in &outcome.notes {
        text.push_str(note);
        text.push('\n');
    }
    if !outcome.problems.is_empty() {
        if outcome.made.is_empty() {
            text.push_str("Nothing was compressed.\n");
        }
        for p in &outcome.problems {
            let _ = writeln!(text, "Not applied: {p}.");
        }
        text.push_str(
            "Give a range as from..to, its ends named by the tool call ids in its first and last messages, or by the <mN> and <bN> tags at the end of messages where they carry them.\n",
        );
    }
    text.trim_end().to_string()
}
