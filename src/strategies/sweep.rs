//! Sweep (`/dcp sweep [N]`): the user prunes every tool call since their last message, or
//! the last N calls. Protected tools and files are kept; turn protection does not apply,
//! since the user asked. Completed calls lose their output, errored ones their inputs.

use super::manual::sweepable;
use super::purge_errors::string_inputs;
use super::{output_tokens, Decision, Rules};
use crate::session::{last_user_prompt, tool_calls, Message, ToolStatus};
use crate::state::{Action, SessionState, Strategy};
use crate::tokens::{Field, TokenCounter};

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
        .map(|call| match call.status {
            ToolStatus::Error => {
                let tokens = counter.count_part(call.part_id, Field::Input, &string_inputs(call.input()));
                Decision::new(call, Strategy::Sweep, Action::ErrorInputs, tokens)
            }
            _ => Decision::new(call, Strategy::Sweep, Action::Output, output_tokens(call, counter)),
        })
        .collect()
}
