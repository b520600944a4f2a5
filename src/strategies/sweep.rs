//! Sweep (`/dcp sweep [N]`): the user prunes every tool call since their last message, or
//! the last N calls. Protected tools and files are kept; turn protection does not apply,
//! since the user asked. Completed calls lose their output, errored ones their inputs.

use super::manual::sweepable;
use super::{saved_tokens, Decision, Rules};
use crate::session::{last_user_prompt, tool_calls, Message, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::tokens::TokenCounter;

pub fn decide(
    messages: &[Message],
    state: &SessionState,
    rules: &Rules,
    last: Option<usize>,
    counter: &mut TokenCounter,
) -> Vec<Decision> {
    let calls = tool_calls(messages);
    let chosen: Vec<_> = match last {
        Some(n) => {
            let open: Vec<_> = calls.iter().filter(|c| sweepable(c, state, rules)).collect();
            open[open.len().saturating_sub(n)..].to_vec()
        }
        None => {
            let since = last_user_prompt(messages).unwrap_or(0);
            calls.iter().filter(|c| c.message > since && sweepable(c, state, rules)).collect()
        }
    };
    chosen
        .into_iter()
        .map(|call| {
            let action = match call.status {
                ToolStatus::Error => Action::ErrorInputs,
                _ => Action::Output,
            };
            // The user asked for these: they are recorded even when they save nothing.
            let tokens = saved_tokens(call, &action, counter);
            Decision::new(call, Strategy::Sweep, action, tokens)
        })
        .collect()
}
