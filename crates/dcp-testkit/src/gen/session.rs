//! The generator of one session: its project, its turns of user prompts, assistant steps
//! and answers, in the exact shape OpenCode 1.18 hands the transform hook.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use dcp::session::{Message, Node};

use super::text::*;
use super::{skewed_size, Rng};

/// One file of the generated project, with its current content once known.
#[derive(Debug, Clone)]
pub(crate) struct File {
    pub(crate) abs: String,
    pub(crate) rel: String,
    pub(crate) lang: Lang,
    pub(crate) size: usize,
    pub(crate) seed: u64,
    pub(crate) content: Option<String>,
}

/// What to generate with [`session`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSpec {
    /// Messages of the history.
    pub messages: usize,
    /// Steps to append after it, one assistant message each.
    pub steps: usize,
    pub seed: u64,
}

impl Default for SessionSpec {
    fn default() -> Self {
        SessionSpec { messages: 200, steps: 50, seed: 1 }
    }
}

/// A generated session: the history as the transform hook receives it, and the steps that
/// follow it. Serialises as `{"sessionID", "messages", "steps"}`.
#[derive(Debug, Clone, Serialize)]
pub struct GeneratedSession {
    #[serde(rename = "sessionID")]
    pub session_id: String,
    pub messages: Vec<Message>,
    /// Each step is the messages it appends (one assistant message).
    pub steps: Vec<Vec<Message>>,
}

impl GeneratedSession {
    /// Writes the session as compact JSON.
    pub fn write_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        serde_json::to_writer(&mut out, self)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// Every tool output of the history and the steps.
    pub fn tool_outputs(&self) -> impl Iterator<Item = &str> {
        self.messages
            .iter()
            .chain(self.steps.iter().flatten())
            .flat_map(|m| m.parts.iter())
            .filter_map(|p| p.get("state").and_then(|s| s.get("output")).and_then(Node::as_str))
    }
}

/// Generates a session. The same spec always gives the same session.
pub fn session(spec: &SessionSpec) -> GeneratedSession {
    let mut g = Generator::new(spec.seed);
    let mut messages = Vec::with_capacity(spec.messages);
    while messages.len() < spec.messages {
        messages.push(g.user());
        // A turn is 10 to 30 messages, the user's prompt included, and ends with the
        // assistant's answer unless the history ends first.
        let turn = g.rng.range(10, 30) as usize;
        for _ in 0..turn - 2 {
            if messages.len() >= spec.messages {
                break;
            }
            let calls = [1, 1, 1, 1, 1, 1, 2, 2, 2, 3];
            let n = *g.rng.pick(&calls).unwrap_or(&1);
            messages.push(g.assistant_tools(n, Mistakes::Made, FirstCall::Any));
        }
        if messages.len() < spec.messages {
            messages.push(g.assistant_answer());
        }
    }
    let steps = (0..spec.steps)
        .map(|_| {
            let n = g.rng.range(1, 2) as usize;
            let first = if g.rng.percent(40) { FirstCall::Reread } else { FirstCall::Any };
            vec![g.assistant_tools(n, Mistakes::Never, first)]
        })
        .collect();
    GeneratedSession { session_id: g.session_id.clone(), messages, steps }
}

/// `message` as OpenCode sends it while it is being written (it sends it again on every
/// request until it is finished): its calls running, without output, and no finish.
pub fn unfinished(message: &Value) -> Value {
    let mut m = message.clone();
    for p in m["parts"].as_array_mut().into_iter().flatten().filter(|p| p["type"] == "tool") {
        p["state"]["status"] = "running".into();
        if let Some(state) = p["state"].as_object_mut() {
            state.remove("output");
        }
    }
    if let Some(info) = m["info"].as_object_mut() {
        info.remove("finish");
    }
    m
}

/// Writes a generated session to `path`.
pub fn write_session(session: &GeneratedSession, path: &Path) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    session.write_to(&mut file)
}

/// Whether a generated step's tool calls may fail: the history's agent makes mistakes (4% of
/// its calls fail), the steady steps' never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mistakes {
    Made,
    Never,
}

/// What a generated step's first tool call is: any call of the mix, or a read of a file read
/// before (a duplicate, for deduplication to prune).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstCall {
    Any,
    Reread,
}

pub(crate) const MODELS: &[(&str, &str)] =
    &[("claude-sonnet-4-5", "anthropic"), ("gpt-5.1-codex", "openai"), ("kimi-k2-thinking", "openrouter")];

/// The running state of one session being generated.
pub(crate) struct Generator {
    pub(crate) rng: Rng,
    pub(crate) session_id: String,
    pub(crate) root: String,
    pub(crate) lang: Lang,
    pub(crate) files: Vec<File>,
    pub(crate) model: (&'static str, &'static str),
    pub(crate) clock: i64,
    pub(crate) counter: u64,
    pub(crate) parent: String,
    pub(crate) snapshot: String,
    pub(crate) context_bytes: u64,
    /// Files read so far, for repeated reads.
    pub(crate) read: Vec<usize>,
    /// Files written and not read back yet.
    pub(crate) written: Vec<usize>,
    /// Grep and glob inputs used so far, for repeated searches.
    pub(crate) greps: Vec<Value>,
    pub(crate) globs: Vec<Value>,
    pub(crate) bash_commands: Vec<String>,
}

impl Generator {
    pub(crate) fn new(seed: u64) -> Generator {
        let mut rng = Rng::new(seed ^ 0x6463_705f_6765_6e00);
        let clock = 1_790_000_000_000 + rng.below(50_000_000_000) as i64;
        let lang = [Lang::Rust, Lang::TypeScript, Lang::Python][rng.below(3) as usize];
        let project = format!("{}-{}", rng.word(NOUNS).replace('_', "-"), rng.word(NOUNS).replace('_', "-"));
        let root = format!("/home/dev/work/{project}");
        let model = *rng.pick(MODELS).unwrap_or(&MODELS[0]);
        let mut g = Generator {
            session_id: String::new(),
            root,
            lang,
            files: Vec::new(),
            model,
            clock,
            counter: 0,
            parent: String::new(),
            snapshot: String::new(),
            context_bytes: 0,
            read: Vec::new(),
            written: Vec::new(),
            greps: Vec::new(),
            globs: Vec::new(),
            bash_commands: Vec::new(),
            rng,
        };
        // Session ids count down, so the newest session sorts first.
        let stamp = !((clock as u64) << 12) & 0xFFFF_FFFF_FFFF;
        g.session_id = format!("ses_{stamp:012x}{}", base62(&mut g.rng, 14));
        g.snapshot = hex(&mut g.rng, 40);
        let count = g.rng.range(40, 90);
        let dirs = ["src", "src", "src", "tests", "docs", "scripts"];
        for _ in 0..count {
            let dir = *g.rng.pick(&dirs).unwrap_or(&"src");
            let file_lang = if dir == "docs" { Lang::Markdown } else { lang };
            let sub = if dir == "src" && g.rng.percent(50) { format!("/{}", g.rng.word(NOUNS)) } else { String::new() };
            let name = if g.rng.percent(50) {
                g.rng.word(NOUNS).to_string()
            } else {
                format!("{}_{}", g.rng.word(VERBS), g.rng.word(NOUNS))
            };
            let rel = format!("{dir}{sub}/{name}.{}", file_lang.ext());
            if g.files.iter().any(|f| f.rel == rel) {
                continue;
            }
            // Line numbers and the wrapper make a read's output about 12% larger than the file.
            let size = (skewed_size(&mut g.rng) * 22 / 25).max(150);
            let seed = g.rng.next_u64();
            g.files.push(File { abs: format!("{}/{rel}", g.root), rel, lang: file_lang, size, seed, content: None });
        }
        g
    }

    /// An id in OpenCode's ascending form: `prefix_` + 48-bit clock and counter in hex + 14
    /// base62 characters.
    pub(crate) fn id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let stamp = (((self.clock as u64) << 12) + (self.counter & 0xFFF)) & 0xFFFF_FFFF_FFFF;
        format!("{prefix}_{stamp:012x}{}", base62(&mut self.rng, 14))
    }

    pub(crate) fn tick(&mut self, lo: u64, hi: u64) -> i64 {
        self.clock += self.rng.range(lo, hi) as i64;
        self.clock
    }

    pub(crate) fn part(&mut self, message_id: &str, body: Value) -> Value {
        let mut part = json!({"id": self.id("prt"), "sessionID": self.session_id, "messageID": message_id});
        if let (Some(obj), Value::Object(fields)) = (part.as_object_mut(), body) {
            obj.extend(fields);
        }
        part
    }

    pub(crate) fn user(&mut self) -> Message {
        let created = self.tick(20_000, 600_000);
        let id = self.id("msg");
        self.parent = id.clone();
        let file = self.rng.below(self.files.len() as u64) as usize;
        let rel = self.files.get(file).map(|f| f.rel.clone()).unwrap_or_default();
        let n = self.rng.range(8, 40);
        let text = format!("{} in {rel}: {}.", capitalise(&sentence(&mut self.rng, 6)), sentence(&mut self.rng, n));
        let (model, provider) = self.model;
        let info = json!({
            "id": id, "sessionID": self.session_id, "role": "user", "time": {"created": created},
            "agent": "build", "model": {"providerID": provider, "modelID": model}, "summary": {"diffs": []},
        });
        let part = self.part(&id, json!({"type": "text", "text": text}));
        self.context_bytes += text.len() as u64;
        Message { info: Node::from(info), parts: vec![Node::from(part)] }
    }

    pub(crate) fn assistant_info(
        &mut self,
        id: &str,
        created: i64,
        finish: &str,
        output_tokens: u64,
    ) -> (Value, Value) {
        // What the model was sent: the system prompt and the history so far, up to a
        // 200K-token window (a real session would have been compacted before).
        let input = (9_000 + self.context_bytes / 4).min(190_000);
        let cached = input.saturating_sub(self.rng.range(200, 4_000));
        let tokens = json!({
            "total": input + output_tokens, "input": input - cached, "output": output_tokens, "reasoning": 0,
            "cache": {"write": 0, "read": cached},
        });
        let (model, provider) = self.model;
        let info = json!({
            "id": id, "sessionID": self.session_id, "parentID": self.parent, "role": "assistant",
            "mode": "build", "agent": "build", "path": {"cwd": self.root, "root": self.root}, "cost": 0,
            "tokens": tokens, "modelID": model, "providerID": provider,
            "time": {"created": created, "completed": self.clock}, "finish": finish,
        });
        (info, tokens)
    }

    /// An assistant step: `calls` tool calls, some of them failed when `mistakes` says so,
    /// the first a read of a file read before when `first` says so.
    pub(crate) fn assistant_tools(&mut self, calls: usize, mistakes: Mistakes, first: FirstCall) -> Message {
        let created = self.tick(500, 20_000);
        let id = self.id("msg");
        let mut parts = vec![self.part(&id, json!({"type": "step-start", "snapshot": self.snapshot}))];
        if self.rng.percent(20) {
            let start = self.tick(100, 2_000);
            let n = self.rng.range(10, 60);
            let text = capitalise(&sentence(&mut self.rng, n));
            let end = self.tick(100, 3_000);
            parts
                .push(self.part(&id, json!({"type": "reasoning", "text": text, "time": {"start": start, "end": end}})));
        } else if self.rng.percent(15) {
            let start = self.tick(100, 2_000);
            let n = self.rng.range(6, 25);
            let text = format!("{}.", capitalise(&sentence(&mut self.rng, n)));
            parts.push(self.part(&id, json!({"type": "text", "text": text, "time": {"start": start, "end": start}})));
        }
        let mut changed = Vec::new();
        for i in 0..calls {
            let body = if i == 0 && first == FirstCall::Reread && !self.read.is_empty() {
                let file = self.read[self.rng.below(self.read.len() as u64) as usize];
                self.read_call(file)
            } else {
                self.tool_call(mistakes, &mut changed)
            };
            let part = self.part(&id, body);
            self.context_bytes += part.pointer("/state/output").and_then(Value::as_str).map_or(0, str::len) as u64;
            parts.push(part);
        }
        let output_tokens = self.rng.range(12, 400);
        self.tick(200, 3_000);
        let (info, tokens) = self.assistant_info(&id, created, "tool-calls", output_tokens);
        let finish = json!({
            "type": "step-finish", "reason": "tool-calls", "snapshot": self.snapshot, "tokens": tokens, "cost": 0,
        });
        parts.push(self.part(&id, finish));
        if !changed.is_empty() {
            self.snapshot = hex(&mut self.rng, 40);
            parts.push(self.part(&id, json!({"type": "patch", "hash": self.snapshot, "files": changed})));
        }
        Message { info: Node::from(info), parts: parts.into_iter().map(Node::from).collect() }
    }

    /// The assistant's answer that ends a turn.
    pub(crate) fn assistant_answer(&mut self) -> Message {
        let created = self.tick(500, 10_000);
        let id = self.id("msg");
        let mut parts = vec![self.part(&id, json!({"type": "step-start", "snapshot": self.snapshot}))];
        let start = self.tick(200, 2_000);
        let mut text = String::new();
        for _ in 0..self.rng.range(1, 5) {
            let n = self.rng.range(8, 30);
            text.push_str(&capitalise(&sentence(&mut self.rng, n)));
            text.push_str(". ");
        }
        let text = text.trim_end().to_string();
        let end = self.tick(200, 5_000);
        self.context_bytes += text.len() as u64;
        parts.push(self.part(&id, json!({"type": "text", "text": text, "time": {"start": start, "end": end}})));
        let output_tokens = (text.len() / 4) as u64 + 5;
        let (info, tokens) = self.assistant_info(&id, created, "stop", output_tokens);
        let finish =
            json!({"type": "step-finish", "reason": "stop", "snapshot": self.snapshot, "tokens": tokens, "cost": 0});
        parts.push(self.part(&id, finish));
        Message { info: Node::from(info), parts: parts.into_iter().map(Node::from).collect() }
    }

    /// A tool part's body (everything but the ids), chosen by the mix described above.
    pub(crate) fn tool_call(&mut self, mistakes: Mistakes, changed: &mut Vec<String>) -> Value {
        if !self.written.is_empty() && self.rng.percent(50) {
            let file = self.written.remove(0);
            return self.read_call(file);
        }
        if mistakes == Mistakes::Made && self.rng.percent(4) {
            return self.errored_call();
        }
        match self.rng.weighted(&[40, 12, 6, 17, 13, 7, 3]) {
            0 => {
                // Most reads go back to a file already read: the duplicates dedup prunes.
                let file = if !self.read.is_empty() && self.rng.percent(55) {
                    self.read[self.rng.below(self.read.len() as u64) as usize]
                } else {
                    self.rng.below(self.files.len() as u64) as usize
                };
                self.read_call(file)
            }
            1 => self.grep_call(),
            2 => self.glob_call(),
            3 => self.bash_call(),
            4 => self.edit_call(changed),
            5 => self.write_call(changed),
            _ => self.todo_call(),
        }
    }

    pub(crate) fn times(&mut self) -> Value {
        let start = self.tick(5, 200);
        let end = self.tick(20, 1_500);
        json!({"start": start, "end": end})
    }

    pub(crate) fn call_id(&mut self) -> String {
        format!("call_{}", base62(&mut self.rng, 24))
    }

    pub(crate) fn content(&mut self, file: usize) -> String {
        let Some(f) = self.files.get_mut(file) else {
            return String::new();
        };
        if f.content.is_none() {
            let mut rng = Rng::new(f.seed);
            f.content = Some(source_text(&mut rng, f.lang, f.size));
        }
        f.content.clone().unwrap_or_default()
    }
}
