//! What the next steps need stays whole (`dcp::strategies::keep`): the views of the files a
//! follow-up prompt names, through the finished turn's line and masking, and the listings the
//! agent reads its paths from, while it does; run through the engine as `dcp replay` runs it
//! and through the batch masking `dcp context` uses.

use dcp::config::Config;
use dcp::replay::{self, Mode, RecordedSession};
use dcp::session::{Message, Node};
use serde_json::json;

use crate::masking::replay_options;
use crate::support::SessionBuilder;

/// A file's text: `lines` numbered lines naming `what`, long enough to be worth masking.
fn file_text(what: &str, lines: usize) -> String {
    (1..=lines).map(|n| format!("{n:5}\t{what}_{n} = compile(r'^{what} (\\w+) = (.*)$')  # line {n}\n")).collect()
}

/// The output of call `call_id` as request `sent` carried it, if it carried the call at all
/// (a finished turn's line stands for the calls it names).
fn sent_output(sent: &[Message], call_id: &str) -> Option<String> {
    let part = sent.iter().flat_map(|m| &m.parts).find(|p| p.get("callID").and_then(Node::as_str) == Some(call_id))?;
    part.pointer("/state/output").and_then(Node::as_str).map(str::to_string)
}

/// The session of the issue: "explain parser.py and storage.py", an answer, a pause, then a
/// follow-up about parser.py.
fn follow_up_session() -> Vec<Message> {
    let read = |name: &str| json!({"filePath": format!("/work/project/src/{name}")});
    SessionBuilder::new()
        .user("Give me an overview: explain parser.py and storage.py.")
        .tool("r_parser", "read", read("parser.py"), &file_text("FIELD_RE", 120))
        .tool("r_storage", "read", read("storage.py"), &file_text("JOURNAL", 120))
        .tool("wc", "bash", json!({"command": "wc -l src/*.py"}), &file_text("count", 60))
        .text("parser.py holds the section parsers; storage.py an append-only journal.")
        .advance(20 * 60 * 1000)
        .user("Where in parser.py is FIELD_RE used?")
        .text("FIELD_RE is compiled at the top of parser.py and used by every section parser.")
        .build()
}

/// What the first request after the follow-up prompt carried of each read, with `config`.
fn after_the_follow_up(config: Config) -> (Option<String>, Option<String>) {
    let messages = follow_up_session();
    let session =
        RecordedSession { id: "ses_test", parent_id: None, directory: None, messages: &messages, totals: None };
    let sent = replay::requests(&session, Mode::Dcp, &replay_options(config)).unwrap();
    let last = &sent.last().unwrap().messages;
    (sent_output(last, "r_parser"), sent_output(last, "r_storage"))
}

#[test]
fn a_follow_up_prompt_naming_a_file_keeps_that_file_s_latest_view() {
    let whole = file_text("FIELD_RE", 120);
    let (parser, storage) = after_the_follow_up(Config::default());
    assert_eq!(parser.as_deref(), Some(whole.as_str()), "the named file's read reaches the model whole");
    assert!(storage.as_deref() != Some(file_text("JOURNAL", 120).as_str()), "the file it does not name goes");
    // Without the rule, the finished turn's line stands for the read of parser.py too.
    let mut off = Config::default();
    off.strategies.masking.keep_named = 0;
    let (parser, _) = after_the_follow_up(off);
    assert!(parser.as_deref() != Some(whole.as_str()), "{parser:?}");
}

/// A session of one task: a listing of long paths, then a read of each, interleaved with
/// searches that push the listing out of masking's window; then other work.
fn listing_then_reads(reads: usize, after: usize) -> Vec<Message> {
    let path =
        |i: usize| format!("/home/someone/projects/a-rather-long-project-name/src/components/widgets/widget_{i}.tsx");
    let listing: String = (0..reads).map(|i| path(i) + "\n").collect();
    let mut b =
        SessionBuilder::new().user("port every widget").tool("ls", "glob", json!({"pattern": "**/*.tsx"}), &listing);
    for i in 0..reads {
        b = b.tool(&format!("r{i}"), "read", json!({"filePath": path(i)}), &file_text(&format!("W{i}"), 40));
        b = b.tool(&format!("g{i}"), "grep", json!({"pattern": format!("use{i}")}), &file_text("hit", 40));
    }
    for i in 0..after {
        b = b.tool(&format!("t{i}"), "bash", json!({"command": format!("npm test -- {i}")}), &file_text("ok", 40));
    }
    b.build()
}

/// Whether the batch masking takes the listing of `messages` with `config`.
fn listing_masked(messages: &[Message], config: &Config) -> bool {
    crate::masking::masked(messages, config).contains(&"ls".to_string())
}

#[test]
fn a_listing_the_agent_reads_its_paths_from_stays_whole_while_it_does() {
    let reading = listing_then_reads(8, 0);
    assert!(!listing_masked(&reading, &Config::default()), "the last read took its path from the listing");
    let mut off = Config::default();
    off.strategies.masking.keep_quoted = 0;
    assert!(listing_masked(&reading, &off), "without the rule the listing is beyond the window");
    // Three steps after the last read, the listing goes like any old output.
    assert!(listing_masked(&listing_then_reads(8, 3), &Config::default()));
}

/// A subagent's session: its task gives the path of the file to change and names another file
/// by its name alone; the agent reads both, then a few more files push them out of masking's
/// window.
fn task_naming_a_path(reads_after: usize) -> Vec<Message> {
    let read = |name: &str| json!({"filePath": format!("/work/project/src/pkg/export/{name}")});
    let mut b = SessionBuilder::new()
        .user("Fix the off-by-one in src/pkg/export/render.go; util.go has the helpers.")
        .tool("r_render", "read", read("render.go"), &file_text("RENDER", 150))
        .tool("r_util", "read", read("util.go"), &file_text("UTIL", 150));
    for i in 0..reads_after {
        b = b.tool(&format!("o{i}"), "read", read(&format!("other_{i}.go")), &file_text(&format!("O{i}"), 150));
    }
    b.build()
}

#[test]
fn a_task_giving_a_file_s_path_keeps_that_file_s_latest_view_for_its_first_steps() {
    let mut config = Config::default();
    // Only the rule keeps a read: no working set of recent files.
    config.strategies.masking.working_files = 0;
    let masked = crate::masking::masked(&task_naming_a_path(5), &config);
    assert!(masked.contains(&"r_util".to_string()), "a name alone in the first prompt keeps nothing: {masked:?}");
    assert!(!masked.contains(&"r_render".to_string()), "the file the task gives the path of stays: {masked:?}");
    // Eight steps on, the task's names are done.
    let later = crate::masking::masked(&task_naming_a_path(6), &config);
    assert!(later.contains(&"r_render".to_string()), "{later:?}");
    config.strategies.masking.keep_named = 0;
    assert!(crate::masking::masked(&task_naming_a_path(5), &config).contains(&"r_render".to_string()));
}
