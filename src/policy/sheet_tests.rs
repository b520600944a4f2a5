//! Each price sheet's decision on the same rewrites, and the cases that cost more than 1.02 of
//! no pruning under their own sheet (`dcp replay --prices NAME`, docs/results/sheets.md).

use super::*;
use crate::prices::{family, FAMILIES};

fn batched() -> Rewrite {
    Rewrite::default()
}

/// `inputs` under the family `name`: its prices and the seconds after which its cache is cold.
fn on(name: &str, inputs: Inputs) -> Inputs {
    let sheet = family(name).unwrap();
    Inputs { rates: sheet.rates, cold_after: batched().cold_after(&sheet), ..inputs }
}

/// The verdict of every family on the same pending rewrites, in `FAMILIES`' order.
fn verdicts(inputs: Inputs, pending: &[Pending]) -> Vec<(&'static str, Option<Trigger>)> {
    FAMILIES.iter().map(|name| (*name, choose(&batched(), &on(name, inputs), pending).map(|(_, t)| t))).collect()
}

#[test]
fn under_a_local_model_a_rewrite_of_the_prompts_end_waits() {
    // The last output pruned whole, ten requests into a warm run: it removes as much as it
    // re-bills. A cache that bills its reads saves them on every later request; a local
    // model's KV cache reads them for nothing, so the rewrite only breaks even, and loses the
    // placeholder it sends instead (the generated sessions' `pays` rewrites under `local`).
    let base = Inputs { context: 20_000, warm: 10, baseline: 50_000.0, ..Inputs::default() };
    let last = [Pending { tokens: 3_000, tail: 3_000, ..Pending::default() }];
    for (name, verdict) in verdicts(base, &last) {
        let expected = if name == "local" { None } else { Some(Trigger::Pays) };
        assert_eq!(verdict, expected, "{name}");
    }
}

#[test]
fn under_a_local_model_pressure_leaves_the_window_to_the_hosts_compaction() {
    // The generated explore session (152 requests) past 60% of a 200,000-token window: a batch
    // removes 10,000 of the 60,000 tokens it re-bills. Priced by a cache that bills its reads
    // it goes (what it saves comes back over the requests that follow); under `local` it would
    // prefill 50,000 tokens again and save none later, six times in that session (1.109 of no
    // pruning).
    let pressed = Inputs { context: 130_000, warm: 3, context_limit: Some(200_000), ..Inputs::default() };
    let batch = [Pending { tokens: 10_000, tail: 60_000, ..Pending::default() }];
    for (name, verdict) in verdicts(pressed, &batch) {
        let expected = if name == "local" { None } else { Some(Trigger::Pressure) };
        assert_eq!(verdict, expected, "{name}");
    }
    // Not even the whole tail: the placeholders sent instead are prefilled again.
    let whole = [Pending { tokens: 60_000, tail: 60_000, ..Pending::default() }];
    assert_eq!(choose(&batched(), &on("local", pressed), &whole), None);
    assert_eq!(choose(&batched(), &on("anthropic-5m", pressed), &whole), Some((0, Trigger::Pressure)));
}

#[test]
fn a_rewrite_counted_as_removing_more_than_its_tail_gains_nothing_under_a_local_model() {
    // The lab session of 26 requests under `local` (1.057 of no pruning): its first rewrite was
    // sized at 4,783 tokens in a tail of 4,412 (the saving and the tail are estimated apart),
    // which made it a gain of 371 prefilled tokens, banked, where it re-prefilled the tail.
    let base = Inputs { context: 4_437, warm: 5, baseline: 4_437.0, ..Inputs::default() };
    let over = [Pending { tokens: 4_783, tail: 4_412, ..Pending::default() }];
    assert_eq!(choose(&batched(), &on("local", base), &over), None);
    // Nor does the bank buy it: a spend of what looks free (the lab session of 55 requests).
    let banked = Inputs { banked: 5_000.0, context: 10_000, ..base };
    assert_eq!(choose(&batched(), &on("local", banked), &over), None);
    assert_eq!(choose(&batched(), &on("anthropic-5m", base), &over), Some((0, Trigger::Pays)));
    let rewrite = Charges { applied: 4_783, tail: 4_412, rates: family("local").unwrap().rates, ..Charges::default() };
    assert_eq!(balance(&rewrite), 0.0);
}

/// What a session has cost by the meter after a few requests whose agent never pruned: dcp's
/// head and the lists it sent, each at `rates`, beside `without`.
fn spent_on_additions(rates: Rates, without: f64, head: f64, lists: &[f64]) -> Spent {
    let added = rates.write * head + rates.read * head * 3.0 + lists.iter().map(|l| rates.write * l).sum::<f64>();
    Spent { without, saved: -added }
}

#[test]
fn a_short_run_whose_agent_never_prunes_gets_one_list_not_one_for_every_output() {
    // `cc-lokal-grant` (10 requests, about 20,000 tokens without dcp): dcp's head of 185
    // tokens and lists of 102, 171 and 309 tokens took it to 1.025 of no pruning under the
    // OpenAI-style sheets. The first list goes under every sheet; the agent left it unanswered,
    // and the second would take the session past the bound, whatever the sheet.
    for name in FAMILIES {
        let rates = family(name).unwrap().rates;
        let fresh = spent_on_additions(rates, 20_000.0, 185.0, &[]);
        assert!(list_affordable(rates, 102, 0, fresh), "{name}: the first list");
        let one = spent_on_additions(rates, 20_000.0, 185.0, &[102.0]);
        assert!(!list_affordable(rates, 171, 1, one), "{name}: a second, unanswered");
    }
}

#[test]
fn an_agent_that_answers_its_lists_keeps_them_and_a_session_that_banked_pays_for_them() {
    let rates = family("anthropic-5m").unwrap().rates;
    let young = Spent { without: 10_000.0, saved: -600.0 };
    assert!(list_affordable(rates, 300, 0, young), "its last list answered: the next goes");
    assert!(!list_affordable(rates, 300, 2, young), "two left unanswered, nothing banked");
    let banked = Spent { without: 100_000.0, saved: 2_000.0 };
    assert!(list_affordable(rates, 300, 5, banked), "pruning has saved more than the lists cost");
    // The bound: 1% of what the session has cost without dcp, beyond what it saved.
    let edge = Spent { without: 100_000.0, saved: -625.0 };
    assert!(list_affordable(rates, 300, 1, edge), "625 + 375 is 1%");
    assert!(!list_affordable(rates, 301, 1, edge));
}
