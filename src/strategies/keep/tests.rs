use serde_json::{json, Value};

use super::*;

/// A long path under a project, so that its text spans several windows.
fn path(name: &str) -> String {
    format!("/home/someone/projects/a-rather-long-project-name/src/components/widgets/{name}")
}

fn message(role: &str, parts: Vec<Value>) -> Message {
    Message::from_values(json!({"id": "m", "sessionID": "s", "role": role, "time": {"created": 0}}), parts)
}

fn prompt(text: &str) -> Message {
    message("user", vec![json!({"type": "text", "text": text})])
}

/// An agent's step that calls `tool` with `input`.
fn step(tool: &str, input: Value) -> Message {
    message("assistant", vec![json!({"type": "tool", "tool": tool, "callID": "c", "state": {"input": input}})])
}

/// Feeds `signals` a step calling `tool` on `key` that gave `text`.
fn call(signals: &mut Signals, tool: &str, key: &str, text: &str) {
    signals.message(&step(tool, json!({"filePath": key})));
    signals.call(Some(key), Some(text));
}

#[test]
fn a_prompt_names_a_file_by_its_path_or_its_name_and_a_directory_by_two_components() {
    let names = Names::of("Explain parser.py, then look at `src/lib/a.rs`, ~/bhavana/anchor/ and v1.5 in src");
    assert!(names.names("/p/parser.py"));
    assert!(names.names("/p/src/lib/a.rs"));
    assert!(!names.names("/p/lib/a.rs"), "a path names only files whose path ends with it whole");
    assert!(!names.names("/p/x.py"));
    assert!(names.names("/home/me/bhavana/anchor/package.json"));
    assert!(!names.names("/home/me/src/main.rs"), "one component is no directory: it would name a project");
    assert!(!names.names("/home/me/v1.5"), "a version is no file");
    assert!(Names::of("fix the build").is_empty());
}

#[test]
fn a_named_directory_names_the_files_two_levels_below_it_and_no_deeper() {
    let names = Names::of("the hooks in ~/bhavana/src/hooks/");
    assert!(names.names("/home/me/bhavana/src/hooks/useBuy.ts"));
    assert!(names.names("/home/me/bhavana/src/hooks/util/format.ts"));
    assert!(!names.names("/home/me/bhavana/src/hooks/util/deep/format.ts"));
    assert!(!names.names("/home/me/other/bhavana/src/hooksy/a.ts"), "whole components only");
}

#[test]
fn texts_sharing_a_run_of_seventy_nine_characters_share_a_print_whatever_their_line_numbers() {
    let shared = "fn parse_entry(buffer: &[u8], offset: usize, limit: usize) -> Result<Entry, Error> {";
    assert!(shared.len() >= WINDOW + WINNOW - 1);
    let numbered = format!("    41\tuse std::io;\n    42\t{shared}\n    43\t    let x = 1;\n");
    let quoted = format!("{shared}\n    todo!()\n}}");
    assert!(Quotes::of([quoted.as_str()]).trace(&Prints::of(&numbered)), "the run they share is found");
    // Texts shorter than a window have no prints; unrelated texts share none.
    assert!(Prints::of("short").is_empty());
    let other = Prints::of(&"an unrelated line of text that goes on for a while\n".repeat(4));
    assert!(!Quotes::of([quoted.as_str()]).trace(&other));
    // A run traced to one text is not traced again to another that holds it too.
    let mut quotes = Quotes::of([quoted.as_str()]);
    assert!(quotes.trace(&Prints::of(&quoted)) && !quotes.trace(&Prints::of(&numbered)));
}

#[test]
fn a_listing_stays_in_use_for_the_steps_after_the_last_that_quoted_it() {
    let listing = (0..6).map(|i| path(&format!("file{i}.tsx"))).collect::<Vec<_>>().join("\n");
    let mut signals = Signals::default();
    signals.message(&prompt("go"));
    call(&mut signals, "glob", "**/*.tsx", &listing);
    assert!(!signals.in_use(0, "glob", 3), "nothing quoted it yet");
    // The agent reads the files it listed, one a step: each read quotes the listing.
    for i in 0..3 {
        call(&mut signals, "read", &path(&format!("file{i}.tsx")), "the file's text");
        assert!(signals.in_use(0, "glob", 3), "read {i} quoted it");
    }
    // Then it turns to other work: three steps on, the listing is no longer in use.
    for i in 0..3 {
        assert!(signals.in_use(0, "glob", 3), "{i} steps after the last quote");
        call(&mut signals, "bash", &format!("make test{i}"), "ok");
    }
    assert!(!signals.in_use(0, "glob", 3));
    assert!(!signals.in_use(0, "glob", 0), "0 turns the rule off");
}

#[test]
fn a_quote_goes_to_the_newest_text_that_holds_it_and_a_path_named_before_to_none() {
    let file = path("Button.tsx");
    let mut signals = Signals::default();
    signals.message(&prompt("go"));
    call(&mut signals, "grep", "Button", &format!("{file}:12: export function Button() {{"));
    call(&mut signals, "write", "/tmp/Panel.tsx", &format!("see {file} for the pattern, then build the panel"));
    // A read of the file both texts name quotes the newer one, the write.
    call(&mut signals, "read", &file, "export function Button() {}");
    assert!(signals.in_use(1, "write", 3) && !signals.in_use(0, "grep", 3));
    // Read again, its path is in the first read's arguments, in every request: it uses neither.
    let mut again = Signals::default();
    again.message(&prompt("go"));
    call(&mut again, "glob", "**/*.tsx", &file);
    call(&mut again, "read", &file, "the text");
    assert!(again.in_use(0, "glob", 3), "the first read took its path from the listing");
    for _ in 0..3 {
        call(&mut again, "read", &file, "the text");
    }
    assert!(!again.in_use(0, "glob", 3), "the later reads took it from the first read's arguments");
}

#[test]
fn a_read_or_a_command_s_output_is_never_kept_in_use() {
    let mut signals = Signals::default();
    signals.message(&prompt("go"));
    call(&mut signals, "read", &path("a.rs"), &path("b.rs"));
    call(&mut signals, "read", &path("b.rs"), "text");
    assert!(!signals.in_use(0, "read", 3));
    assert!(!signals.in_use(0, "bash", 3));
}

#[test]
fn a_prompt_names_only_for_its_first_steps_and_the_first_only_by_path() {
    let mut signals = Signals::default();
    signals.message(&prompt("explain parser.py, then fix src/lexer.py; look around src/tools/"));
    assert!(!signals.named("/p/parser.py", 8), "the first prompt is the task: its bare names name what the run reads");
    assert!(!signals.named("/p/src/tools/x.py", 8), "nor do its directories");
    assert!(signals.named("/p/src/lexer.py", 8), "a path it gives is the file the task is about");
    signals.message(&prompt("where in parser.py is FIELD_RE used?"));
    assert!(signals.named("/p/parser.py", 8) && !signals.named("/p/storage.py", 8));
    for _ in 0..7 {
        signals.message(&step("read", json!({"filePath": "/p/x.py"})));
    }
    assert!(signals.named("/p/parser.py", 8));
    signals.message(&step("read", json!({"filePath": "/p/x.py"})));
    assert!(!signals.named("/p/parser.py", 8), "eight steps on, the prompt's names are done");
    assert!(!signals.named("/p/parser.py", 0), "0 turns the rule off");
}

#[test]
fn a_follow_up_slash_command_keeps_the_skill_files_an_earlier_turn_read() {
    let reference = "/home/me/.claude/skills/build-with-claude/references/solana-dev-patterns.md";
    let mut signals = Signals::default();
    signals.message(&prompt("/build-with-claude write the program"));
    call(&mut signals, "read", reference, "the skill's patterns");
    assert!(!signals.named_call(0, reference, 8), "the first prompt is the task: its command names nothing");
    signals.message(&prompt("claude \"/build-with-claude Wire the frontend to the program\""));
    assert!(signals.named_call(0, reference, 8), "the command ran again: the reference its last run read");
    assert!(!signals.named_call(0, "/home/me/.claude/skills/other/references/a.md", 8));
    call(&mut signals, "read", reference, "the skill's patterns");
    assert!(!signals.named_call(1, reference, 8), "a read of this turn is fresh: the command names it not");
    signals.message(&prompt("now the tests"));
    assert!(!signals.named_call(0, reference, 8), "a prompt without the command");
}

#[test]
fn a_read_quoted_in_the_current_turn_of_a_session_prompted_again_stays_in_use() {
    let app = format!("export default function App() {{ return <main className=\"{}\" /> }}", "hero grid".repeat(12));
    let run = |prompts: usize, read_in_earlier_turn: bool| {
        let mut signals = Signals::default();
        for i in 0..prompts - 1 {
            signals.message(&prompt(&format!("task {i}")));
        }
        if !read_in_earlier_turn {
            signals.message(&prompt("build the components"));
        }
        call(&mut signals, "read", &path("App.jsx"), &app);
        if read_in_earlier_turn {
            signals.message(&prompt("build the components"));
        }
        // The next step writes a component from the app it read.
        let content = format!("// from App.jsx\n{app}");
        signals.message(&step("write", json!({"filePath": path("Navbar.tsx"), "content": content})));
        signals.in_use(0, "read", 3)
    };
    assert!(run(2, false), "a follow-up's turn: the read the agent builds from stays");
    assert!(!run(1, false), "a run of one prompt: a read is never kept in use");
    assert!(!run(2, true), "a read of an earlier turn is not kept in use");
}

/// A follow-up's turn that reads `App.jsx`, then writes a component from it: the signals.
fn app_read_then_quoted(cache: PromptCache) -> Signals {
    let app = format!("export default function App() {{ return <main className=\"{}\" /> }}", "hero grid".repeat(12));
    let mut signals = Signals::default();
    signals.set_cache(cache);
    signals.message(&prompt("plan the app"));
    signals.message(&prompt("build the components"));
    call(&mut signals, "read", &path("App.jsx"), &app);
    let content = format!("// from App.jsx\n{app}");
    signals.message(&step("write", json!({"filePath": path("Navbar.tsx"), "content": content})));
    signals.call(Some(&path("Navbar.tsx")), Some(&content));
    signals
}

#[test]
fn a_read_quoted_in_a_follow_up_s_turn_stays_in_use_to_the_end_of_the_turn() {
    let mut signals = app_read_then_quoted(PromptCache::On);
    // Steps that quote it not: a directory made, pages written from the components.
    for i in 0..6 {
        signals.message(&step("bash", json!({"command": format!("mkdir -p src/pages{i}")})));
    }
    assert!(signals.in_use(0, "read", 3), "six steps on, the turn goes on from the app it replaces");
    assert!(!signals.in_use(0, "read", 0), "0 turns the rule off");
    signals.message(&prompt("now deploy it"));
    assert!(!signals.in_use(0, "read", 3), "the next prompt ends the turn");
}

#[test]
fn without_a_prompt_cache_neither_a_read_in_use_nor_a_follow_up_slash_command_s_skill_files_are_kept() {
    assert!(!app_read_then_quoted(PromptCache::Off).in_use(0, "read", 3));
    let reference = "/home/me/.claude/skills/build-with-claude/references/solana-dev-patterns.md";
    let mut signals = Signals::default();
    signals.set_cache(PromptCache::Off);
    signals.message(&prompt("/build-with-claude write the program"));
    call(&mut signals, "read", reference, "the skill's patterns");
    signals.message(&prompt("/build-with-claude Wire the frontend to the program"));
    assert!(!signals.named_call(0, reference, 8));
    signals.set_cache(PromptCache::On);
    assert!(signals.named_call(0, reference, 8), "with a cache the command names it");
}
