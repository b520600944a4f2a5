//! The tool calls of a generated session: reads (some of files read before), greps, globs,
//! bash runs, edits, writes, todos and failed calls, each with the input, output, title,
//! metadata and times OpenCode stores.

use serde_json::{json, Value};

use super::session::Generator;
use super::text::*;
use super::{skewed_size, MAX_OUTPUT, MIN_OUTPUT};

impl Generator {
    pub(crate) fn read_call(&mut self, file: usize) -> Value {
        let content = self.content(file);
        let Some(f) = self.files.get(file) else {
            return json!({});
        };
        let (abs, rel) = (f.abs.clone(), f.rel.clone());
        let lines: Vec<&str> = content.lines().collect();
        let mut output = format!("<path>{abs}</path>\n<type>file</type>\n<content>\n");
        // Like OpenCode's read tool, stop at a byte budget; edits can grow a file past it.
        let mut shown = 0;
        for (i, line) in lines.iter().enumerate() {
            let numbered = format!("{}: {line}\n", i + 1);
            if output.len() + numbered.len() + 120 > MAX_OUTPUT {
                break;
            }
            output.push_str(&numbered);
            shown = i + 1;
        }
        let truncated = shown < lines.len();
        if truncated {
            output.push_str(&format!(
                "\n(Output capped at 50 KB. Showing lines 1-{shown}. Use offset={} to continue.)\n</content>",
                shown + 1
            ));
        } else {
            output.push_str(&format!("\n(End of file - total {} lines)\n</content>", lines.len()));
        }
        let text = content.trim_end_matches('\n').to_string();
        let preview = lines.iter().take(20).copied().collect::<Vec<_>>().join("\n");
        let metadata = json!({
            "preview": preview, "truncated": truncated, "loaded": [],
            "display": {"type": "file", "path": abs, "text": text, "lineStart": 1, "lineEnd": lines.len(),
                        "totalLines": lines.len(), "truncated": false},
        });
        if !self.read.contains(&file) {
            self.read.push(file);
        }
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "read", "callID": call, "state": {
            "status": "completed", "input": {"filePath": abs}, "output": output, "metadata": metadata,
            "title": rel, "time": time,
        }})
    }

    pub(crate) fn grep_call(&mut self) -> Value {
        let input = if !self.greps.is_empty() && self.rng.percent(35) {
            self.greps[self.rng.below(self.greps.len() as u64) as usize].clone()
        } else {
            let pattern = match self.rng.below(3) {
                0 => format!("fn {}", self.rng.word(VERBS)),
                1 => camel(&mut self.rng),
                _ => format!("{}_{}", self.rng.word(VERBS), self.rng.word(NOUNS)),
            };
            let mut input = json!({"pattern": pattern, "path": format!("{}/src", self.root)});
            if self.rng.percent(40) {
                input["include"] = json!(format!("*.{}", self.lang.ext()));
            }
            self.greps.push(input.clone());
            input
        };
        let target = skewed_size(&mut self.rng).min(20_000);
        let mut body = String::new();
        let mut matches = 0;
        while body.len() < target {
            let f = self.rng.below(self.files.len() as u64) as usize;
            let (abs, lang) = match self.files.get(f) {
                Some(f) => (f.abs.clone(), f.lang),
                None => break,
            };
            body.push_str(&format!("{abs}:\n"));
            for _ in 0..self.rng.range(1, 6) {
                let line = source_text(&mut self.rng, lang, 1);
                body.push_str(&format!("  Line {}: {}\n\n", self.rng.range(1, 900), line.trim_end()));
                matches += 1;
            }
        }
        let output = format!("Found {matches} matches\n{body}");
        let title = input["pattern"].clone();
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "grep", "callID": call, "state": {
            "status": "completed", "input": input, "output": output,
            "metadata": {"matches": matches, "truncated": false}, "title": title, "time": time,
        }})
    }

    pub(crate) fn glob_call(&mut self) -> Value {
        let input = if !self.globs.is_empty() && self.rng.percent(50) {
            self.globs[self.rng.below(self.globs.len() as u64) as usize].clone()
        } else {
            let pattern = match self.rng.below(3) {
                0 => format!("**/*.{}", self.lang.ext()),
                1 => format!("src/**/*{}*", self.rng.word(NOUNS)),
                _ => format!("{}/**/*", self.rng.word(&["src", "tests", "docs", "scripts"])),
            };
            let input = json!({"pattern": pattern});
            self.globs.push(input.clone());
            input
        };
        let target = skewed_size(&mut self.rng).min(16_000);
        let mut paths = Vec::new();
        let mut len = 0;
        while len <= target {
            let path = if self.rng.percent(60) {
                let f = self.rng.below(self.files.len() as u64) as usize;
                self.files.get(f).map(|f| f.abs.clone()).unwrap_or_default()
            } else {
                format!(
                    "{}/src/{}/{}_{}.{}",
                    self.root,
                    self.rng.word(NOUNS),
                    self.rng.word(VERBS),
                    self.rng.word(NOUNS),
                    self.lang.ext()
                )
            };
            len += path.len() + 1;
            paths.push(path);
        }
        let count = paths.len();
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "glob", "callID": call, "state": {
            "status": "completed", "input": input, "output": paths.join("\n"),
            "metadata": {"count": count, "truncated": false}, "title": "", "time": time,
        }})
    }

    pub(crate) fn bash_call(&mut self) -> Value {
        let command = if !self.bash_commands.is_empty() && self.rng.percent(40) {
            self.bash_commands[self.rng.below(self.bash_commands.len() as u64) as usize].clone()
        } else {
            let noun = self.rng.word(NOUNS);
            let command = match (self.lang, self.rng.below(6)) {
                (_, 0) => "git status --short".to_string(),
                (_, 1) => "git diff --stat".to_string(),
                (_, 2) => "ls -la src".to_string(),
                (Lang::Rust, 3) => "cargo build".to_string(),
                (Lang::Rust, _) => format!("cargo test {noun}"),
                (Lang::TypeScript, 3) => "npx tsc --noEmit".to_string(),
                (Lang::TypeScript, _) => format!("npm test -- {noun}"),
                (_, 3) => "python3 -m mypy src".to_string(),
                (_, _) => format!("python3 -m pytest -q -k {noun}"),
            };
            self.bash_commands.push(command.clone());
            command
        };
        let templates: &[&'static str] = if command.starts_with("git") {
            GIT_LOG
        } else if command.starts_with("ls") {
            LS_LOG
        } else if command.contains("test") {
            if self.rng.percent(30) {
                APP_LOG
            } else {
                TEST_LOG
            }
        } else {
            BUILD_LOG
        };
        let target = skewed_size(&mut self.rng);
        let output = log_text(&mut self.rng, templates, target);
        // OpenCode keeps a copy of the output in the metadata, cut at 30,000 characters.
        let mut kept = output.clone();
        if dcp::format::cut(&mut kept, 30_000) {
            kept.push_str("\n\n...");
        }
        let exit = if self.rng.percent(12) { 1 } else { 0 };
        let n = self.rng.range(3, 7);
        let description = capitalise(&sentence(&mut self.rng, n));
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "bash", "callID": call, "state": {
            "status": "completed", "input": {"command": command, "description": description}, "output": output,
            "metadata": {"output": kept, "exit": exit, "truncated": false}, "title": command, "time": time,
        }})
    }

    pub(crate) fn edit_call(&mut self, changed: &mut Vec<String>) -> Value {
        let file = self.rng.below(self.files.len() as u64) as usize;
        let content = self.content(file);
        let lines: Vec<&str> = content.lines().filter(|l| l.trim().len() > 8).collect();
        let old = self.rng.pick(&lines).map(|l| l.to_string()).unwrap_or_else(|| content.clone());
        let mut new = old.clone();
        new.push_str(&format!(" // {}", sentence(&mut self.rng, 4)));
        let updated = content.replacen(&old, &new, 1);
        let Some(f) = self.files.get_mut(file) else {
            return json!({});
        };
        f.content = Some(updated);
        let (abs, rel) = (f.abs.clone(), f.rel.clone());
        let patch =
            format!("Index: {abs}\n{}\n--- {abs}\n+++ {abs}\n@@ -1,1 +1,1 @@\n-{old}\n+{new}\n", "=".repeat(67));
        changed.push(abs.clone());
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "edit", "callID": call, "state": {
            "status": "completed", "input": {"filePath": abs, "oldString": old, "newString": new},
            "output": "Edit applied successfully.",
            "metadata": {
                "diagnostics": {}, "diff": patch,
                "filediff": {"file": abs, "patch": patch, "additions": 1, "deletions": 1}, "truncated": false,
            },
            "title": rel, "time": time,
        }})
    }

    pub(crate) fn write_call(&mut self, changed: &mut Vec<String>) -> Value {
        let file = self.rng.below(self.files.len() as u64) as usize;
        let Some(lang) = self.files.get(file).map(|f| f.lang) else {
            return json!({});
        };
        let size = (skewed_size(&mut self.rng) / 2).max(MIN_OUTPUT);
        let content = source_text(&mut self.rng, lang, size);
        let exists = self.files[file].content.is_some();
        self.files[file].content = Some(content.clone());
        let (abs, rel) = (self.files[file].abs.clone(), self.files[file].rel.clone());
        // Most writes are read back later: supersede-writes then drops their content.
        if self.rng.percent(60) && !self.written.contains(&file) {
            self.written.push(file);
        }
        changed.push(abs.clone());
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "write", "callID": call, "state": {
            "status": "completed", "input": {"filePath": abs, "content": content}, "output": "Wrote file successfully.",
            "metadata": {"diagnostics": {}, "filepath": abs, "exists": exists, "truncated": false},
            "title": rel, "time": time,
        }})
    }

    pub(crate) fn todo_call(&mut self) -> Value {
        let statuses = ["completed", "in_progress", "pending", "pending"];
        let todos: Vec<Value> = (0..self.rng.range(2, 6))
            .map(|i| {
                let n = self.rng.range(4, 10);
                let status = *self.rng.pick(&statuses).unwrap_or(&"pending");
                let content = capitalise(&sentence(&mut self.rng, n));
                json!({"content": content, "status": status, "priority": "medium", "id": (i + 1).to_string()})
            })
            .collect();
        let open = todos.iter().filter(|t| t["status"] != "completed").count();
        let output = serde_json::to_string_pretty(&todos).unwrap_or_default();
        let call = self.call_id();
        let time = self.times();
        json!({"type": "tool", "tool": "todowrite", "callID": call, "state": {
            "status": "completed", "input": {"todos": todos}, "output": output,
            "metadata": {"todos": todos}, "title": format!("{open} todos"), "time": time,
        }})
    }

    pub(crate) fn errored_call(&mut self) -> Value {
        let call = self.call_id();
        if self.rng.percent(60) {
            let missing =
                format!("{}/src/{}_{}.{}", self.root, self.rng.word(VERBS), self.rng.word(NOUNS), self.lang.ext());
            let time = self.times();
            return json!({"type": "tool", "tool": "read", "callID": call, "state": {
                "status": "error", "input": {"filePath": missing}, "error": format!("File not found: {missing}"),
                "time": time,
            }});
        }
        let file = self.rng.below(self.files.len() as u64) as usize;
        let abs = self.files.get(file).map(|f| f.abs.clone()).unwrap_or_default();
        let mut old = String::new();
        expand(&mut self.rng, "let $n = $n.$v_$n($n, $d)?;", &mut old);
        let mut new = String::new();
        expand(&mut self.rng, "let $n = $n.$v_$n(&$n, $d)?;", &mut new);
        let time = self.times();
        json!({"type": "tool", "tool": "edit", "callID": call, "state": {
            "status": "error", "input": {"filePath": abs, "oldString": old, "newString": new},
            "error": "oldString not found in content", "time": time,
        }})
    }
}
