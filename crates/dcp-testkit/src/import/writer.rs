//! Writes an imported session as an OpenCode 1.18 database (`opencode.db`).
//!
//! The schema is OpenCode's own (`schema.sql`, dumped from a real 1.18 database) and the
//! migration table lists its migrations, so OpenCode and dcp read the file as one of theirs.
//! Each turn is a user message with one text part; each step an assistant message with
//! `step-start`, `reasoning`, `text`, `tool` and `step-finish` parts (and `patch` after
//! edits). Recorded clocks are kept; estimated ones follow the session's duration, or a
//! model of each step's length. A subagent is written as a child session inside its call.

use std::path::Path;

use rusqlite::{params, Connection};
use serde::Serialize;
use serde_json::{json, Value};

use super::ids::{fnv1a, Ids, Order};
use super::model::{chars, dumps_len, Call, Clock, Outcome, Session, Step, Tokens, Trigger};

const SCHEMA: &str = include_str!("schema.sql");
const MIGRATIONS: &str = include_str!("migrations.txt");
const VERSION: &str = "1.18.33";
const PERMISSION: &str = r#"[{"permission":"question","pattern":"*","action":"deny"},{"permission":"plan_enter","pattern":"*","action":"deny"},{"permission":"plan_exit","pattern":"*","action":"deny"}]"#;
const ADJ: [&str; 10] = ["brave", "calm", "eager", "fuzzy", "gentle", "happy", "jolly", "kind", "lucky", "swift"];
const NOUN: [&str; 10] =
    ["engine", "circuit", "falcon", "harbor", "lantern", "meadow", "nebula", "orchard", "pixel", "river"];

/// What one imported session became.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Written {
    pub name: String,
    pub session_id: String,
    pub sessions: usize,
    pub messages: usize,
    pub parts: usize,
    pub tool_calls: usize,
    pub errors: usize,
    pub start_ms: i64,
    pub end_ms: i64,
}

/// An OpenCode database being filled with imported sessions.
pub struct Database {
    conn: Connection,
}

struct Writer<'c> {
    conn: &'c Connection,
    ids: Ids,
    out: Written,
    project: String,
}

/// The session being written and what its rows share.
struct Scope<'a> {
    session: &'a Session,
    sid: String,
    scale: f64,
    user_id: String,
    role: StepRole,
    /// Steps written so far in the session, over all its turns: a call's id counts from it,
    /// so no two calls of a session share one (OpenCode's ids are unique per session, and
    /// dcp keys its prunes by them).
    steps: usize,
}

/// What an assistant message is: an answer, or a compaction's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepRole {
    Answer,
    Summary,
}

impl Database {
    /// A new, empty OpenCode database at `db` (replacing one there).
    pub fn create(db: &Path) -> rusqlite::Result<Database> {
        if db.exists() {
            let _ = std::fs::remove_file(db);
        }
        let conn = Connection::open(db)?;
        conn.execute_batch(SCHEMA)?;
        for (i, id) in MIGRATIONS.lines().filter(|l| !l.is_empty()).enumerate() {
            conn.execute("INSERT INTO migration VALUES (?1, ?2)", params![id, 1_769_000_000_000_i64 + i as i64])?;
        }
        Ok(Database { conn })
    }

    /// Writes `session` as a top-level session, with its subagents as children.
    pub fn add(&mut self, session: &Session) -> rusqlite::Result<Written> {
        let t0 = session.start_ms;
        let project = format!("{:016x}", fnv1a(format!("project:{}", session.directory).as_bytes()));
        // The session row is written after its messages (it holds their totals).
        self.conn.execute_batch("BEGIN; PRAGMA defer_foreign_keys = ON;")?;
        self.conn.execute(
            "INSERT OR IGNORE INTO project (id, worktree, vcs, time_created, time_updated, sandboxes) VALUES (?1, ?2, 'git', ?3, ?4, '[]')",
            params![project, session.directory, t0 - 60_000, t0],
        )?;
        self.conn.execute(
            "INSERT OR IGNORE INTO project_directory VALUES (?1, ?2, NULL, NULL, ?3)",
            params![project, session.directory, t0 - 60_000],
        )?;
        let mut w = Writer { conn: &self.conn, ids: Ids::new(&session.name), out: Written::default(), project };
        let (sid, end) = w.session(session, None, t0)?;
        self.conn.execute_batch("COMMIT")?;
        let mut out = w.out;
        out.name = session.name.clone();
        out.session_id = sid;
        out.start_ms = t0;
        out.end_ms = end;
        Ok(out)
    }

    /// Compacts the file and closes it.
    pub fn finish(self) -> rusqlite::Result<()> {
        self.conn.execute_batch("VACUUM")
    }
}

fn slug(name: &str) -> String {
    let h = fnv1a(name.as_bytes());
    format!("{}-{}", ADJ[(h % 10) as usize], NOUN[((h / 97) % 10) as usize])
}

fn model_ms_of(step: &Step) -> i64 {
    step.model_ms.unwrap_or_else(|| {
        2500 + 8 * (chars(&step.text) + step.calls.iter().map(|c| dumps_len(&c.input)).sum::<usize>()) as i64
    })
}

/// A message's cost as OpenCode stores it: `0` where the log records none.
fn cost_json(cost: f64) -> Value {
    if cost == 0.0 {
        json!(0)
    } else {
        json!(cost)
    }
}

/// A step's tokens as OpenCode stores them; the 1-hour part of the cache writes, which
/// OpenCode does not keep apart, as `cache.write1h` where there is one.
fn tokens_json(t: &Tokens) -> Value {
    let mut v = json!({"total": t.input + t.output + t.reasoning + t.cache_read + t.cache_write, "input": t.input,
           "output": t.output, "reasoning": t.reasoning, "cache": {"write": t.cache_write, "read": t.cache_read}});
    if t.cache_write_1h > 0 {
        v["cache"]["write1h"] = json!(t.cache_write_1h);
    }
    v
}

impl Writer<'_> {
    fn part(&mut self, scope: &Scope<'_>, mid: &str, t: (i64, i64), data: &Value) -> rusqlite::Result<()> {
        let id = self.ids.make("prt", t.0, Order::Ascending);
        self.conn.execute(
            "INSERT INTO part VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![id, mid, scope.sid, t.0, t.1, data.to_string()],
        )?;
        self.out.parts += 1;
        Ok(())
    }

    fn message(&mut self, sid: &str, t: (i64, i64), data: &Value) -> rusqlite::Result<String> {
        let id = self.ids.make("msg", t.0, Order::Ascending);
        self.conn
            .execute("INSERT INTO message VALUES (?1, ?2, ?3, ?4, ?5)", params![id, sid, t.0, t.1, data.to_string()])?;
        self.out.messages += 1;
        Ok(id)
    }

    /// Writes session `s` (a child of `parent` when given) from `start`; returns its id and end.
    fn session(&mut self, s: &Session, parent: Option<&str>, start: i64) -> rusqlite::Result<(String, i64)> {
        let sid = self.ids.make("ses", start - 1, Order::Descending);
        self.out.sessions += 1;
        let mut scale = 1.0;
        if let (Clock::Estimated, Some(d)) = (s.clock, s.duration_ms) {
            let est: i64 = s.steps().map(|st| model_ms_of(st) + st.calls.iter().map(|c| c.dur_ms).sum::<i64>()).sum();
            if est > 0 {
                scale = (d as f64 / est as f64).max(0.05);
            }
        }
        let mut scope = Scope { session: s, sid, scale, user_id: String::new(), role: StepRole::Answer, steps: 0 };
        let (mut totals, mut cost) = (Tokens::default(), 0.0);
        let mut t = start;
        for turn in &s.turns {
            let at = turn.time_ms.filter(|_| s.clock == Clock::Recorded).map_or(t, |u| u.max(t));
            let model = json!({"providerID": s.provider, "modelID": s.model});
            let data = json!({"role": "user", "time": {"created": at}, "agent": "build", "model": model});
            scope.user_id = self.message(&scope.sid, (at, at + 1), &data)?;
            let uid = scope.user_id.clone();
            let part = match turn.compaction {
                Some(trigger) => json!({"type": "compaction", "auto": trigger == Trigger::Auto}),
                None => json!({"type": "text", "text": turn.prompt}),
            };
            self.part(&scope, &uid, (at, at + 1), &part)?;
            t = at + if s.clock == Clock::Recorded { 2 } else { 400 };
            for (i, step) in turn.steps.iter().enumerate() {
                for (sum, add) in [(&mut totals.input, step.tokens.input), (&mut totals.output, step.tokens.output)] {
                    *sum += add;
                }
                totals.cache_read += step.tokens.cache_read;
                totals.cache_write += step.tokens.cache_write;
                cost += step.cost;
                scope.role = if turn.compaction.is_some() && i == 0 { StepRole::Summary } else { StepRole::Answer };
                t = self.step(&scope, step, i, t)?;
                scope.steps += 1;
            }
        }
        // A log that records usage only for the whole run gives the row its totals.
        if let Some(run) = s.totals {
            if totals.input + totals.cache_read + totals.cache_write == 0 {
                totals = run.tokens;
            }
            totals.output = totals.output.max(run.tokens.output);
            cost = if run.cost > 0.0 { run.cost } else { cost };
        }
        self.session_row(&scope, parent, (&totals, cost), (start, t))?;
        Ok((scope.sid, t))
    }

    fn session_row(
        &mut self,
        scope: &Scope<'_>,
        parent: Option<&str>,
        (k, cost): (&Tokens, f64),
        t: (i64, i64),
    ) -> rusqlite::Result<()> {
        let s = scope.session;
        let model = json!({"id": s.model, "providerID": s.provider, "variant": "default"}).to_string();
        self.conn.execute(
            "INSERT INTO session (id, project_id, parent_id, slug, directory, path, title, version, summary_additions, \
             summary_deletions, summary_files, cost, tokens_input, tokens_output, tokens_reasoning, tokens_cache_read, \
             tokens_cache_write, permission, agent, model, time_created, time_updated) \
             VALUES (?1, ?2, ?3, ?4, ?5, '', ?6, ?7, 0, 0, 0, ?17, ?8, ?9, ?10, ?11, ?12, ?13, 'build', ?14, ?15, ?16)",
            params![
                scope.sid, self.project, parent, slug(&s.name), s.directory, s.title, VERSION, k.input as i64,
                k.output as i64, k.reasoning as i64, k.cache_read as i64, k.cache_write as i64, PERMISSION, model, t.0 - 1, t.1,
                cost
            ],
        )?;
        Ok(())
    }

    /// Writes step `i` from `t`; returns when the next one may start.
    fn step(&mut self, scope: &Scope<'_>, step: &Step, i: usize, t: i64) -> rusqlite::Result<i64> {
        let s = scope.session;
        let recorded = s.clock == Clock::Recorded;
        let created = t;
        let model_end = match (recorded, step.time) {
            (true, Some(span)) => span.start.max(created + 1),
            _ => created + (model_ms_of(step) as f64 * scope.scale) as i64,
        };
        let mut pt = created + 1;
        let snap = format!("{:016x}", fnv1a(format!("{}:{i}", s.name).as_bytes()));
        let amid = self.ids.make("msg", created, Order::Ascending);
        self.part(scope, &amid, (pt, pt + 1), &json!({"snapshot": snap, "type": "step-start"}))?;
        pt = self.model_parts(scope, &amid, step, (pt, model_end))?;
        pt = pt.max(model_end);
        let mut edited = Vec::new();
        for (k, call) in step.calls.iter().enumerate() {
            let n = scope.steps;
            let call_id = format!("call_{}_{k}_{:08x}", n + 1, fnv1a(format!("{}:{n}:{k}", s.name).as_bytes()) as u32);
            pt = self.call(scope, &amid, call, &call_id, pt)?;
            if matches!(call.outcome, Outcome::Completed(_)) && matches!(call.tool.as_str(), "edit" | "write") {
                edited.extend(call.input.get("filePath").and_then(Value::as_str).map(str::to_string));
            }
        }
        let completed = match (recorded, step.time) {
            (true, Some(span)) => span.end.max(pt + 1),
            _ => pt + 120,
        };
        let finish = if step.calls.is_empty() { "stop" } else { "tool-calls" };
        let tokens = tokens_json(&step.tokens);
        self.part(
            scope,
            &amid,
            (completed, completed + 1),
            &json!({"reason": finish, "snapshot": snap, "type": "step-finish", "tokens": tokens, "cost": cost_json(step.cost)}),
        )?;
        if !edited.is_empty() {
            edited.sort();
            edited.dedup();
            self.part(
                scope,
                &amid,
                (completed + 2, completed + 3),
                &json!({"type": "patch", "hash": snap, "files": edited}),
            )?;
        }
        let agent = if scope.role == StepRole::Summary { "compaction" } else { "build" };
        let mut data = json!({"parentID": scope.user_id, "role": "assistant", "mode": agent, "agent": agent,
            "path": {"cwd": s.directory, "root": s.directory}, "cost": cost_json(step.cost), "tokens": tokens, "modelID": s.model,
            "providerID": s.provider, "time": {"created": created, "completed": completed + 3}, "finish": finish});
        if scope.role == StepRole::Summary {
            data["summary"] = json!(true);
        }
        self.conn.execute(
            "INSERT INTO message VALUES (?1, ?2, ?3, ?4, ?5)",
            params![amid, scope.sid, created, completed + 3, data.to_string()],
        )?;
        self.out.messages += 1;
        Ok(completed + if recorded { 4 } else { 40 })
    }

    /// Writes the step's reasoning and text parts from `t.0`, the text ending at `t.1`.
    fn model_parts(&mut self, scope: &Scope<'_>, amid: &str, step: &Step, t: (i64, i64)) -> rusqlite::Result<i64> {
        let (mut pt, model_end) = t;
        if !step.reasoning.is_empty() {
            pt += 2;
            let data = json!({"type": "reasoning", "text": step.reasoning, "time": {"start": pt, "end": model_end}});
            self.part(scope, amid, (pt, pt + 1), &data)?;
        }
        if !step.text.is_empty() {
            pt = (pt + 2).max(model_end - 1);
            let data = json!({"type": "text", "text": step.text, "time": {"start": pt, "end": model_end.max(pt + 1)}});
            self.part(scope, amid, (pt, pt + 1), &data)?;
        }
        Ok(pt)
    }

    /// Writes one tool part from `pt` (its child session first); returns where the next part goes.
    fn call(&mut self, scope: &Scope<'_>, amid: &str, call: &Call, call_id: &str, pt: i64) -> rusqlite::Result<i64> {
        let (start, mut end) = match (scope.session.clock, call.time) {
            (Clock::Recorded, Some(span)) => (span.start.max(pt + 1), span.end.max(span.start.max(pt + 1) + 1)),
            _ => (pt + 5, pt + 5 + (call.dur_ms as f64 * scope.scale) as i64),
        };
        let mut metadata = call.metadata.clone();
        if let Some(child) = &call.child {
            let (cid, cend) = self.session(child, Some(&scope.sid), start + 50)?;
            metadata.insert("sessionId".into(), json!(cid));
            end = end.max(cend + 20);
        }
        self.out.tool_calls += 1;
        let state = match &call.outcome {
            Outcome::Completed(output) => json!({"status": "completed", "input": call.input, "output": output,
                "metadata": metadata, "title": call.title, "time": {"start": start, "end": end}}),
            Outcome::Error(error) => {
                self.out.errors += 1;
                json!({"status": "error", "input": call.input, "error": error, "time": {"start": start, "end": end}})
            }
        };
        self.part(
            scope,
            amid,
            (start, end + 1),
            &json!({"type": "tool", "tool": call.tool, "callID": call_id, "state": state}),
        )?;
        Ok(end + 2)
    }
}
