//! The policy's decisions, named as sentences.

use super::*;

fn batched() -> Rewrite {
    Rewrite::default()
}

#[test]
fn a_small_prune_deep_in_a_long_prompt_waits() {
    let i = Inputs { context: 50_000, tail: 40_000, pending: 2_000, warm: 3, ..Inputs::default() };
    assert_eq!(rewrite_trigger(&batched(), &i), None);
}

#[test]
fn a_prune_near_the_tail_applies_at_once() {
    // Little to re-bill: it pays on this very request, whatever the horizon.
    let i = Inputs { context: 50_000, tail: 5_000, pending: 4_800, warm: 1, ..Inputs::default() };
    assert_eq!(horizon(&batched(), &i), 0.0);
    assert_eq!(rewrite_trigger(&batched(), &i), Some(Trigger::Pays));
}

#[test]
fn a_deep_prune_pays_only_within_half_the_warm_run() {
    let deep = Inputs { context: 50_000, tail: 10_000, pending: 6_000, warm: 4, banked: 5_000.0, ..Inputs::default() };
    // Two requests since the cache was last cold: it would need seven to pay back.
    assert_eq!(horizon(&batched(), &deep), 2.0);
    assert_eq!(rewrite_trigger(&batched(), &deep), None);
    let long = Inputs { warm: 16, ..deep };
    assert_eq!(horizon(&batched(), &long), 8.0);
    assert_eq!(rewrite_trigger(&batched(), &long), Some(Trigger::Pays));
    // However long the warm run, savings are counted `maxHorizon` ahead at most: 2,000 tokens
    // would pay for this tail over 200 requests, not over 30.
    let longer = Inputs { warm: 400, pending: 2_000, banked: 1e9, ..deep };
    assert_eq!(horizon(&batched(), &longer), f64::from(batched().max_horizon));
    assert_eq!(rewrite_trigger(&batched(), &longer), None);
    let uncapped = Rewrite { max_horizon: 200, ..batched() };
    assert_eq!(rewrite_trigger(&uncapped, &longer), Some(Trigger::Pays));
}

#[test]
fn a_batch_deep_in_a_long_continuous_run_pays_over_half_the_run_not_eight_requests() {
    // Request 40 of a run with no idle gap: a batch removes 20,000 of the 36,000 tokens it
    // re-bills. It costs 1.15 x 36,000 - 1.25 x 20,000 = 16,400 at once and saves 2,000 on
    // every later request: it pays back in 9 requests, well inside the 20 that half the run
    // promises, and it is within the loss bound of what the run has cost so far. The 4,500
    // the run has banked cover part of it; the rest, 11,900, comes back within the 6 requests
    // a bet this late in a run counts on (`late_bet_cap`).
    let run = Inputs { context: 46_000, tail: 36_000, pending: 20_000, warm: 40, banked: 4_500.0, ..Inputs::default() };
    let run = Inputs { baseline: 12_000.0 / batched().loss_bound, ..run };
    assert_eq!(horizon(&batched(), &run), 20.0);
    assert_eq!(rewrite_trigger(&batched(), &run), Some(Trigger::Pays));
    // Counted eight requests ahead, it would not pay: the run would carry those tokens to its end.
    let eight = Rewrite { max_horizon: 8, ..batched() };
    assert_eq!(rewrite_trigger(&eight, &run), None);
    // Early in the run, the evidence is too thin for the same batch.
    let early = Inputs { warm: 10, ..run };
    assert_eq!(rewrite_trigger(&batched(), &early), None);
}

#[test]
fn a_rewrite_that_pays_back_waits_until_the_session_can_afford_it() {
    // It would pay back within the horizon, but if the session ended right after it, it
    // would cost 6,000 more than it saved, and nothing is banked yet.
    let i = Inputs { context: 20_000, tail: 15_000, pending: 9_000, warm: 30, ..Inputs::default() };
    assert!((rewrite_extra(Rates::default(), 9_000.0, 15_000.0) - 6_000.0).abs() < 1e-9);
    assert_eq!(rewrite_trigger(&batched(), &i), None);
    let banked = Inputs { banked: 6_000.0, ..i };
    assert_eq!(rewrite_trigger(&batched(), &banked), Some(Trigger::Pays));
}

#[test]
fn the_balance_counts_savings_rewrites_and_dcps_own_additions() {
    let warm = Charges { in_force: 10_000, head: 400, appended: 100, ..Charges::default() };
    assert!((balance(&warm) - (1_000.0 - 40.0 - 125.0)).abs() < 1e-9);
    let rewrite = Charges { applied: 2_000, tail: 3_000, ..warm };
    assert!((balance(&rewrite) - (1_000.0 - (3_450.0 - 2_500.0) - 40.0 - 125.0)).abs() < 1e-9);
    // On a cold cache everything is written again: what is pruned saves its full price.
    let cold = Charges { cold: true, ..rewrite };
    assert!((balance(&cold) - (1.25 * 12_000.0 - 1.25 * 400.0 - 125.0)).abs() < 1e-9);
}

#[test]
fn a_newer_prune_that_pays_goes_without_an_old_one_that_does_not() {
    let base = Inputs { context: 50_000, warm: 10, banked: 5_000.0, ..Inputs::default() };
    // An old small prune (its tail is almost the whole prompt), then a big recent one.
    let pending = [
        Pending { tokens: 300, tail: 45_000, ..Pending::default() },
        Pending { tokens: 5_000, tail: 7_000, ..Pending::default() },
    ];
    assert_eq!(choose(&batched(), &base, &pending), Some((1, Trigger::Pays)));
    // Nothing pays: nothing goes.
    let pending = [
        Pending { tokens: 300, tail: 45_000, ..Pending::default() },
        Pending { tokens: 200, tail: 30_000, ..Pending::default() },
    ];
    assert_eq!(choose(&batched(), &base, &pending), None);
    // Under pressure everything goes, once it is worth a re-bill (2% of the context).
    let pressed = Inputs { context: 100_000, context_limit: Some(128_000), ..base };
    assert_eq!(choose(&batched(), &pressed, &pending), None);
    let more = [pending[0], pending[1], Pending { tokens: 1_500, tail: 20_000, ..Pending::default() }];
    assert_eq!(choose(&batched(), &pressed, &more), Some((0, Trigger::Pressure)));
}

#[test]
fn a_rider_goes_with_a_rewrite_that_starts_before_it_but_never_starts_one() {
    let base = Inputs { context: 50_000, warm: 10, banked: 6_000.0, ..Inputs::default() };
    let deep = Pending { tokens: 10_000, tail: 20_000, ..Pending::default() };
    let rider = Pending { tokens: 4_000, tail: 6_000, rider: true, ..Pending::default() };
    // Alone, the deep masking does not pay back; with the rider inside its tail it does.
    assert_eq!(choose(&batched(), &base, &[deep]), None);
    assert_eq!(choose(&batched(), &base, &[deep, rider]), Some((0, Trigger::Pays)));
    // A rider near the tail would pay on its own, but only rides along.
    assert_eq!(choose(&batched(), &base, &[rider]), None);
    let small = Pending { tokens: 100, tail: 45_000, ..Pending::default() };
    assert_eq!(choose(&batched(), &base, &[small, rider]), None);
    // When the whole prompt is written again, riders go too.
    let cold = Inputs { idle_seconds: Some(600), ..base };
    assert_eq!(choose(&batched(), &cold, &[rider]), Some((0, Trigger::ColdCache)));
}

#[test]
fn an_unsure_rewrite_counts_at_half_its_size() {
    // Nothing banked: a rewrite goes only if it costs nothing extra on its own request,
    // removing at least 1.15 / 1.25 of the tail it re-bills.
    let base = Inputs { context: 20_000, warm: 1, ..Inputs::default() };
    let output = Pending { tokens: 800, tail: 1_000, ..Pending::default() };
    let input = Pending { tokens: 150, tail: 600, unsure: true, ..Pending::default() };
    assert_eq!(choose(&batched(), &base, &[output]), None);
    // Counted whole, the edit's text would make the rewrite look free (950 of 1,000): text
    // cheaper in tokens than in characters / 4 would make it cost more than it saves.
    let sure = Pending { unsure: false, ..input };
    assert_eq!(choose(&batched(), &base, &[output, sure]), Some((0, Trigger::Pays)));
    assert_eq!(choose(&batched(), &base, &[output, input]), None);
    // Where half of it is enough, it goes, and may start a rewrite of its own.
    let big = Pending { tokens: 300, ..input };
    assert_eq!(choose(&batched(), &base, &[output, big]), Some((0, Trigger::Pays)));
    let alone = Pending { tokens: 1_200, tail: 1_300, ..input };
    assert_eq!(choose(&batched(), &base, &[alone]), None);
    assert_eq!(choose(&batched(), &base, &[Pending { tokens: 2_400, ..alone }]), Some((0, Trigger::Pays)));
    // On a cold cache it goes whatever it weighs.
    let cold = Inputs { idle_seconds: Some(600), ..base };
    assert_eq!(choose(&batched(), &cold, &[input]), Some((0, Trigger::ColdCache)));
}

#[test]
fn a_rewrite_that_does_not_pay_back_yet_may_spend_half_the_bank_on_a_smaller_context() {
    let base = Inputs { context: 50_000, warm: 4, banked: 4_000.0, ..Inputs::default() };
    // Deep in the prompt: 12,000 of a tail of 40,000 does not pay back within two requests,
    // but would within 30 (31,000 extra now, 1,200 a request after).
    let deep = Pending { tokens: 12_000, tail: 40_000, ..Pending::default() };
    let extra = rewrite_extra(Rates::default(), 12_000.0, 40_000.0);
    assert!((extra - 31_000.0).abs() < 1e-9);
    assert_eq!(choose(&batched(), &Inputs { banked: 1e9, ..base }, &[deep]), Some((0, Trigger::Spends)));
    assert_eq!(choose(&batched(), &base, &[deep]), None, "the bank does not cover it");
    let rich = Inputs { banked: 2.0 * extra, ..base };
    assert_eq!(choose(&batched(), &rich, &[deep]), Some((0, Trigger::Spends)));
    // More than half the bank: it waits.
    let short = Inputs { banked: 2.0 * extra - 1.0, ..base };
    assert_eq!(choose(&batched(), &short, &[deep]), None);
    // Less than 2% of the context: not worth the bank, however long it is counted on.
    let small = Pending { tokens: 900, ..deep };
    let patient = Rewrite { max_horizon: 10_000, ..batched() };
    assert_eq!(choose(&patient, &Inputs { banked: 1e9, ..base }, &[small]), None);
    // A rider alone never starts one; off, nothing is spent.
    let rider = Pending { rider: true, ..deep };
    assert_eq!(choose(&batched(), &rich, &[rider]), None);
    let off = Rewrite { spend_banked: 0.0, ..batched() };
    assert_eq!(choose(&off, &rich, &[deep]), None);
}

#[test]
fn a_spend_leaves_the_views_of_files_the_current_turn_made() {
    let base = Inputs { context: 50_000, warm: 4, banked: 1e9, ..Inputs::default() };
    // An old command output deep in the prompt, then a read of this turn.
    let old = Pending { tokens: 12_000, tail: 40_000, ..Pending::default() };
    let view = Pending { tokens: 8_000, tail: 20_000, current_view: true, ..Pending::default() };
    assert_eq!(choose(&batched(), &base, &[old, view]), Some((0, Trigger::Spends)));
    assert!(takes(Trigger::Spends, &old));
    assert!(!takes(Trigger::Spends, &view), "the spend goes without the view");
    // Its gain counts no view of the turn: without the old output there is nothing to spend on.
    assert_eq!(choose(&batched(), &base, &[view]), None);
    let earlier = Pending { current_view: false, ..view };
    assert_eq!(choose(&batched(), &base, &[earlier]), Some((0, Trigger::Spends)));
    // Nor does a view of the turn lift a batch below `spendMinShare` over it.
    let small = Pending { tokens: 600, ..old };
    assert_eq!(choose(&batched(), &base, &[small, Pending { tokens: 900, ..view }]), None);
}

#[test]
fn a_cold_cache_and_a_rewrite_that_pays_take_the_views_of_the_current_turn() {
    let view = Pending { tokens: 4_800, tail: 5_000, current_view: true, ..Pending::default() };
    let base = Inputs { context: 50_000, warm: 1, ..Inputs::default() };
    assert_eq!(choose(&batched(), &base, &[view]), Some((0, Trigger::Pays)));
    let cold = Inputs { idle_seconds: Some(3_600), ..base };
    assert_eq!(choose(&batched(), &cold, &[view]), Some((0, Trigger::ColdCache)));
    for trigger in [Trigger::Pays, Trigger::ColdCache, Trigger::Pressure, Trigger::Immediate] {
        assert!(takes(trigger, &view), "{trigger:?}");
    }
}

#[test]
fn a_small_batch_deep_in_the_prompt_spends_nothing_however_much_is_banked() {
    // 2,000 tokens off a tail of 40,000: 43,500 extra now, 200 a request after, so it would
    // need 218 requests to pay back; the bank is not spent on it.
    let base = Inputs { context: 50_000, warm: 4, banked: 1e9, ..Inputs::default() };
    let deep = Pending { tokens: 2_000, tail: 40_000, ..Pending::default() };
    assert_eq!(choose(&batched(), &base, &[deep]), None);
    // Within the horizon it would pay back: it goes.
    let longer = Rewrite { max_horizon: 218, ..batched() };
    assert_eq!(choose(&longer, &base, &[deep]), Some((0, Trigger::Spends)));
}

#[test]
fn the_tools_are_offered_once_the_bank_covers_them() {
    let turn = Turn { head: 600, cold: true, banked: 0.0, rates: Rates::default() };
    // Nothing banked: a session that never prunes never pays for the tools.
    assert!(!offer(&batched(), &turn));
    // The head's first write (750) and its cached reads over the horizon (8 x 60).
    assert!((offer_cost(&batched(), &turn) - 1_230.0).abs() < 1e-9);
    assert!(!offer(&batched(), &Turn { banked: 1_229.0, ..turn }));
    assert!(offer(&batched(), &Turn { banked: 1_230.0, ..turn }));
    // On a warm cache the whole prompt would be written again: never, whatever is banked.
    assert!(!offer(&batched(), &Turn { cold: false, banked: 1e9, ..turn }));
}

#[test]
fn a_rewrite_may_cost_up_to_the_loss_bound_of_what_the_session_cost_so_far() {
    // Nothing banked, half the tail removed near the end of a long warm run: it pays back
    // within the horizon, and costs 1.15 x 10,000 - 1.25 x 6,000 = 4,000 at once.
    let base = Inputs { context: 40_000, warm: 30, ..Inputs::default() };
    let batch = [Pending { tokens: 6_000, tail: 10_000, ..Pending::default() }];
    assert_eq!(choose(&batched(), &base, &batch), None, "a session that cost nothing yet may lose nothing");
    let loss = batched().loss_bound;
    let enough = Inputs { baseline: 4_000.0 / loss, ..base };
    assert_eq!(choose(&batched(), &enough, &batch), Some((0, Trigger::Pays)));
    let short = Inputs { baseline: 4_000.0 / loss - 100.0, ..base };
    assert_eq!(choose(&batched(), &short, &batch), None);
    // What dcp's own head and lists cost is the tools' price, not the rewrites' loss.
    let tools = Inputs { banked: -3_000.0, added: 3_000.0, ..enough };
    assert_eq!(choose(&batched(), &tools, &batch), Some((0, Trigger::Pays)));
    // A rewrite that lost the bank's worth already leaves less for the next one.
    let lost = Inputs { banked: -1_000.0, ..enough };
    assert_eq!(choose(&batched(), &lost, &batch), None);
    // Off, only what the bank covers goes.
    let off = Rewrite { loss_bound: 0.0, ..batched() };
    assert_eq!(choose(&off, &enough, &batch), None);
}

#[test]
fn a_rewrite_that_costs_nothing_extra_goes_whatever_the_balance() {
    let base = Inputs { context: 40_000, warm: 5, banked: -5_000.0, ..Inputs::default() };
    let free = [Pending { tokens: 9_500, tail: 10_000, ..Pending::default() }];
    assert_eq!(choose(&batched(), &base, &free), Some((0, Trigger::Pays)));
}

#[test]
fn the_cost_without_pruning_reads_the_previous_request_from_the_cache() {
    assert!((unpruned_cost(Rates::default(), None, 1_000, false) - 1_250.0).abs() < 1e-9);
    assert!((unpruned_cost(Rates::default(), Some(800), 1_000, false) - (80.0 + 250.0)).abs() < 1e-9);
    assert!((unpruned_cost(Rates::default(), Some(800), 1_000, true) - 1_250.0).abs() < 1e-9);
    // A history that shrank (a compaction) is read from the cache up to its new size.
    assert!((unpruned_cost(Rates::default(), Some(2_000), 1_000, false) - 100.0).abs() < 1e-9);
}

#[test]
fn no_run_loses_more_than_the_quick_bets_bound_whatever_its_outputs() {
    assert!(simulated_rewrites(Rates::default()) > 400);
}

#[test]
fn no_run_loses_more_than_the_quick_bets_bound_under_any_price_sheet() {
    for name in crate::prices::FAMILIES {
        let rates = crate::prices::family(name).unwrap().rates;
        simulated_rewrites(rates);
    }
}

/// Simulated continuous runs priced `rates`: each request adds a step (an output of random
/// size and some assistant text); outputs beyond the last five wait for the policy, which is
/// asked every request. By the cost model, at the end of every request the run has cost at
/// most (1 + QUICK_BOUND x lossBound) x what it would have without pruning: the loss bound,
/// widened for quick bets only. Returns how many rewrites the runs made.
fn simulated_rewrites(rates: Rates) -> u32 {
    let config = batched();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut rewrites = 0;
    for _run in 0..200 {
        let steps = 5 + next(100) as usize;
        // What each request added: an output (its size now: 0 once masked) and text.
        let mut items: Vec<(u64, bool)> = vec![(2_000, false)];
        let (mut unpruned, mut previous) = (2_000u64, None);
        let (mut banked, mut baseline, mut in_force) = (0.0, 0.0, 0u64);
        for step in 1..=steps {
            let big = next(4) == 0;
            let size = 50 + next(if big { 12_000 } else { 1_500 });
            let text = 20 + next(400);
            items.push((size, true));
            items.push((text, false));
            unpruned += size + text;
            baseline += unpruned_cost(rates, previous, unpruned, false);
            previous = Some(unpruned);
            let tail = |from: usize, items: &[(u64, bool)]| items[from..].iter().map(|i| i.0).sum::<u64>();
            let outputs: Vec<usize> = (0..items.len()).filter(|&i| items[i].1).collect();
            let waiting: Vec<usize> =
                outputs[..outputs.len().saturating_sub(5)].iter().copied().filter(|&i| items[i].0 > 0).collect();
            let pending: Vec<Pending> = waiting
                .iter()
                .map(|&i| Pending { tokens: items[i].0, tail: tail(i, &items), ..Pending::default() })
                .collect();
            let context = tail(0, &items);
            let base = Inputs { context, warm: step as u32, banked, baseline, rates, ..Inputs::default() };
            let mut request = Charges { in_force, rates, ..Charges::default() };
            if let Some((cut, _)) = choose(&config, &base, &pending) {
                request.applied = pending[cut..].iter().map(|p| p.tokens).sum();
                request.tail = pending[cut].tail;
                for &i in &waiting[cut..] {
                    items[i].0 = 0;
                }
                in_force += request.applied;
                rewrites += 1;
            }
            banked += balance(&request);
            let bound = -QUICK_BOUND * config.loss_bound * baseline - 1e-6;
            assert!(banked >= bound, "run lost {banked:.0} of {baseline:.0} at step {step} ({rates:?})");
        }
    }
    rewrites
}

#[test]
fn the_prunable_list_goes_only_when_what_it_names_is_worth_more_than_the_list() {
    // Written uncached with every request: 1.25 x 40 against a cached read of what it names.
    assert!(!list_pays(Rates::default(), 400, 40, 0));
    assert!(list_pays(Rates::default(), 500, 40, 0));
}

#[test]
fn every_list_the_agent_leaves_unanswered_doubles_what_the_next_must_name() {
    assert!(!list_pays(Rates::default(), 500, 40, 1));
    assert!(list_pays(Rates::default(), 1_000, 40, 1));
    assert!(!list_pays(Rates::default(), 3_999, 40, 3));
    assert!(list_pays(Rates::default(), 4_000, 40, 3));
    // The bar stops rising, and never overflows.
    assert_eq!(list_pays(Rates::default(), u64::MAX / 2, 40, 40), list_pays(Rates::default(), u64::MAX / 2, 40, 16));
}

#[test]
fn pressure_cold_cache_and_immediate_mode_apply() {
    let i = Inputs { context: 90_000, tail: 80_000, pending: 2_000, context_limit: Some(128_000), ..Inputs::default() };
    assert_eq!(rewrite_trigger(&batched(), &i), Some(Trigger::Pressure));
    let cold = Inputs { context_limit: None, idle_seconds: Some(600), ..i };
    assert_eq!(rewrite_trigger(&batched(), &cold), Some(Trigger::ColdCache));
    let warm = Inputs { idle_seconds: Some(30), ..cold };
    assert_eq!(rewrite_trigger(&batched(), &warm), None);
    let immediate = Rewrite { mode: RewriteMode::Immediate, ..batched() };
    assert_eq!(rewrite_trigger(&immediate, &warm), Some(Trigger::Immediate));
    assert_eq!(rewrite_trigger(&immediate, &Inputs::default()), None, "nothing pending");
}

#[test]
fn a_late_bet_must_earn_back_what_the_bank_does_not_cover_within_the_expected_requests() {
    // Request 44 of a run with nothing banked: 1,600 tokens off a tail of 4,600 cost
    // 1.15 x 4,600 - 1.25 x 1,600 = 3,290 at once and 160 a request after. It would pay back
    // in 21 requests, within the 22 that half the run promises, and the loss bound covers it;
    // but the run may not have 21 more requests, and with nothing banked the loss would be the
    // session's. Within the 6 requests a bet this late in a run counts on it earns back 960.
    let base = Inputs { context: 30_000, warm: 44, baseline: 120_000.0, ..Inputs::default() };
    let batch = [Pending { tokens: 1_600, tail: 4_600, ..Pending::default() }];
    assert_eq!(horizon(&batched(), &base), 22.0);
    assert_eq!((bet_horizon(&batched(), &base), late_bet_cap(base.warm)), (8.0, 6.0));
    assert_eq!(choose(&batched(), &base, &batch), None);
    // What the bank covers is not at stake: 2,340 banked leaves a bet of 950, earned back.
    let banked = Inputs { banked: 2_340.0, ..base };
    assert_eq!(choose(&batched(), &banked, &batch), Some((0, Trigger::Pays)));
    assert_eq!(choose(&batched(), &Inputs { banked: 2_320.0, ..base }, &batch), None);
    // A batch that makes most of its tail is a small bet, soon repaid: it goes.
    let near = [Pending { tokens: 3_800, tail: 4_600, ..Pending::default() }];
    assert_eq!(choose(&batched(), &base, &near), Some((0, Trigger::Pays)));
    // The whole set's verdict weighs the bet the same way.
    let whole = Inputs { tail: 4_600, pending: 1_600, ..base };
    assert_eq!(rewrite_trigger(&batched(), &whole), None);
    assert_eq!(rewrite_trigger(&batched(), &Inputs { banked: 2_340.0, ..whole }), Some(Trigger::Pays));
}

#[test]
fn early_in_a_run_a_bet_counts_on_half_the_warm_run_at_most() {
    let early = Inputs { warm: 9, ..Inputs::default() };
    assert_eq!(bet_horizon(&batched(), &early), 4.0);
    let late = Inputs { warm: 400, ..Inputs::default() };
    assert_eq!(bet_horizon(&batched(), &late), f64::from(batched().expected_requests));
}

#[test]
fn a_bet_earned_back_within_half_its_horizon_goes_beyond_the_loss_bound() {
    // Request 30 of a run with nothing banked, which has cost 40,000 so far: the loss bound
    // allows 2,000. A batch removes 10,000 of the 13,000 tokens it re-bills: it costs
    // 1.15 x 13,000 - 1.25 x 10,000 = 2,450 at once and earns 1,000 a request after, back
    // within 4 of the 8 requests a bet counts on.
    let base = Inputs { context: 40_000, warm: 30, baseline: 40_000.0, ..Inputs::default() };
    let quick = [Pending { tokens: 10_000, tail: 13_000, ..Pending::default() }];
    assert!(rewrite_extra(Rates::default(), 10_000.0, 13_000.0) > allowance(&batched(), &base));
    assert_eq!(choose(&batched(), &base, &quick), Some((0, Trigger::Pays)));
    // One that needs 5 requests (2,850 at 600 a request) waits for the bank or the bound.
    let slower = [Pending { tokens: 6_000, tail: 9_000, ..Pending::default() }];
    assert_eq!(choose(&batched(), &base, &slower), None);
    // Early in the run half the bet horizon is a request and a half: the same batch waits.
    assert_eq!(choose(&batched(), &Inputs { warm: 6, ..base }, &quick), None);
    // And a quick bet stakes at most `QUICK_BOUND` times the loss bound: 1,875 here.
    assert_eq!(choose(&batched(), &Inputs { baseline: 15_000.0, ..base }, &quick), None);
}

/// A rewrite of 3,000 tokens re-billing a tail of 4,800, ten requests into a warm run that
/// has banked 2,000 (too little to spend on it), under the family `name`.
fn same_rewrite_under(name: &str) -> Option<(usize, Trigger)> {
    let rates = crate::prices::family(name).unwrap().rates;
    let base = Inputs { context: 50_000, warm: 10, banked: 2_000.0, rates, ..Inputs::default() };
    choose(&batched(), &base, &[Pending { tokens: 3_000, tail: 4_800, ..Pending::default() }])
}

#[test]
fn the_same_rewrite_goes_without_a_write_premium_and_waits_under_anthropics() {
    // Five requests of horizon: 3,000 x (0.1 x 5 + 1.25) = 5,250 saved against 1.15 x 4,800 =
    // 5,520 re-billed at Anthropic's prices; 3,000 x 1.5 = 4,500 against 0.9 x 4,800 = 4,320
    // at OpenAI's.
    assert_eq!(same_rewrite_under("anthropic-5m"), None);
    assert_eq!(same_rewrite_under("anthropic-1h"), None);
    assert_eq!(same_rewrite_under("openai"), Some((0, Trigger::Pays)));
    assert_eq!(same_rewrite_under("deepseek"), Some((0, Trigger::Pays)));
    // Without a cache a rewrite re-bills nothing: it goes at once.
    assert_eq!(same_rewrite_under("none"), Some((0, Trigger::Pays)));
    // A local model's KV cache makes the re-read free, so only what the request itself
    // saves counts: 3,000 against 4,800 prefilled again.
    assert_eq!(same_rewrite_under("local"), None);
}

#[test]
fn under_a_one_hour_cache_no_rewrite_is_free_after_a_shorter_pause() {
    let hour = crate::prices::family("anthropic-1h").unwrap();
    let five = crate::prices::Sheet::default();
    let pending =
        Inputs { context: 50_000, tail: 40_000, pending: 2_000, warm: 3, idle_seconds: Some(600), ..Inputs::default() };
    // Ten minutes idle: cold on a 5-minute cache, warm on a 1-hour one.
    let on = |sheet: &crate::prices::Sheet| Inputs {
        cold_after: batched().cold_after(sheet),
        rates: sheet.rates,
        ..pending
    };
    assert_eq!(rewrite_trigger(&batched(), &on(&five)), Some(Trigger::ColdCache));
    assert_eq!(rewrite_trigger(&batched(), &on(&hour)), None);
    let past = Inputs { idle_seconds: Some(3_600), ..on(&hour) };
    assert_eq!(rewrite_trigger(&batched(), &past), Some(Trigger::ColdCache));
    // And its extra is priced at the 1-hour write: (2 - 0.1) x tail, not 1.15 x tail.
    let warm = Charges { applied: 2_000, tail: 40_000, rates: hour.rates, ..Charges::default() };
    assert!((balance(&warm) - (-(1.9 * 40_000.0) + 2.0 * 2_000.0)).abs() < 1e-9);
}

#[test]
fn without_a_cache_every_pruned_token_is_saved_at_full_price() {
    let none = crate::prices::family("none").unwrap();
    let warm = Charges { in_force: 1_000, applied: 500, tail: 9_000, rates: none.rates, ..Charges::default() };
    // 1,000 in force at the full price, and the rewrite saves its 500 on its own request.
    assert!((balance(&warm) - 1_500.0).abs() < 1e-9);
    assert_eq!(batched().cold_after(&none), 0);
}

#[test]
fn the_tools_ride_from_the_first_request_only_where_a_cache_reads_them() {
    let cheap = |name: &str| head_is_cheap(crate::prices::family(name).unwrap().rates);
    assert!(cheap("anthropic-5m") && cheap("anthropic-1h") && cheap("openai") && cheap("local"));
    assert!(!cheap("none"));
    assert!(head_is_cheap(crate::prices::for_model("gpt-4o").unwrap().rates));
}

#[test]
fn under_pressure_a_batch_too_small_to_matter_waits_for_more() {
    let base = Inputs { context: 130_000, tail: 60_000, warm: 3, context_limit: Some(200_000), ..Inputs::default() };
    // 2% of 130,000 is 2,600 tokens.
    assert_eq!(rewrite_trigger(&batched(), &Inputs { pending: 2_000, ..base }), None);
    assert_eq!(rewrite_trigger(&batched(), &Inputs { pending: 2_600, ..base }), Some(Trigger::Pressure));
}

#[test]
fn a_rewrite_a_failed_request_carried_costs_the_next_request_what_it_would_have_cost_itself() {
    for (in_force, applied, tail) in [(0, 2_000, 30_000), (5_000, 8_000, 9_000), (1_000, 500, 200)] {
        let failed = Charges { in_force, applied, tail, head: 300, ..Charges::default() };
        // The next request finds the prunes in force and applies nothing.
        let next = Charges { in_force: in_force + applied, head: 300, ..Charges::default() };
        let carried = carried(&failed);
        assert!((balance(&next) + carried - balance(&failed)).abs() < 1e-6, "{in_force} {applied} {tail}");
    }
    assert_eq!(carried(&Charges { in_force: 100, ..Charges::default() }), 0.0, "no rewrite, nothing carried");
    assert_eq!(carried(&Charges { cold: true, applied: 100, tail: 900, ..Charges::default() }), 0.0);
}
