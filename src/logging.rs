//! Logging: warnings to stderr, and with `debug` on, daily-rotated files under
//! `$XDG_CONFIG_HOME/opencode/logs/dcp/`.
//!
//! Nothing is ever logged to stdout: it carries a command's own output, and in `dcp serve`
//! the protocol. Warnings print as `dcp: warning: …`, the same shape as errors.

use std::fmt::Write as _;
use std::path::Path;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// Keeps the file writer flushing; drop it last.
pub struct Guard {
    _worker: Option<tracing_appender::non_blocking::WorkerGuard>,
}

/// Installs the global subscriber. With `debug_dir`, debug logs also go to daily files there.
pub fn init(debug_dir: Option<&Path>) -> Guard {
    let stderr = StderrWarnings;
    let (file_layer, guard) = match debug_dir {
        Some(dir) if std::fs::create_dir_all(dir).is_ok() => {
            let appender = tracing_appender::rolling::daily(dir, "dcp.log");
            let (writer, guard) = tracing_appender::non_blocking(appender);
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false)
                .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG);
            (Some(layer), Some(guard))
        }
        _ => (None, None),
    };
    let _ = tracing_subscriber::registry().with(stderr).with(file_layer).try_init();
    Guard { _worker: guard }
}

/// Prints warnings and errors to stderr as `dcp: warning: <message>`.
struct StderrWarnings;

impl<S: Subscriber> Layer<S> for StderrWarnings {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return;
        }
        let mut text = String::new();
        event.record(&mut Message(&mut text));
        let kind = if level == Level::ERROR { "error" } else { "warning" };
        // A warning can quote a path or a title: escape what a terminal would act on.
        eprintln!("dcp: {kind}: {}", crate::format::terminal(&text, crate::format::Lines::Keep));
    }
}

struct Message<'a>(&'a mut String);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}
