//! What dcp saved in money: the savings' costs (tokens at the input price, see
//! `crate::state::savings`) priced at the session's sheet (`crate::prices`), where its money
//! prices are known; in tokens where they are not.
//!
//! A session's sheet is the one its model gives, with `prices` of `dcp.jsonc` over it (the
//! sheet the sidecar priced its requests' cache with). The all-time figures are priced at the
//! sheet `prices` gives the sessions. Each model a session's requests went to has its own row
//! ([`ModelMoney`]).
//!
//! A saving is never claimed against what the provider reported: when the bill the provider
//! reported for a session's requests is not below dcp's estimate of what they would have cost
//! without pruning, [`BillCheck::contradicted`] is set and every surface says so instead of a
//! saving (see [`BillCheck`]).

use serde::Serialize;

use super::reported::Outputs;
use super::Figures;
use crate::config::Config;
use crate::prices::live::{for_client, Given};
use crate::prices::Sheet;
use crate::state::savings::{Model, Savings};
use crate::state::SessionState;

/// The money figures of a session, or of all-time.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MoneyFigures {
    /// The sheet the figures are priced at (`anthropic-5m`, `claude-sonnet-4`, `custom`).
    pub sheet: String,
    /// The currency of the money figures; `None` when the sheet has no money prices, and the
    /// figures are then in tokens only (`cost_saved`, `cost_without`).
    pub currency: Option<String>,
    /// What dcp saved, and what the requests would have cost without it, in `currency`.
    #[serde(serialize_with = "six_places")]
    pub money_saved: Option<f64>,
    #[serde(serialize_with = "six_places")]
    pub money_without: Option<f64>,
    /// The saving by the model the requests went to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_model: Vec<ModelMoney>,
    /// The saving held against what the provider reported, when it reported the session's
    /// usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_check: Option<BillCheck>,
}

/// One model's share of a session's saving.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelMoney {
    /// The model as the client named it, or the sheet's name when no model was named.
    pub model: String,
    pub sheet: String,
    pub requests: u64,
    /// What dcp saved on its requests, in tokens at the input price.
    #[serde(serialize_with = "super::one_place")]
    pub cost_saved: f64,
    pub currency: Option<String>,
    #[serde(serialize_with = "six_places")]
    pub money_saved: Option<f64>,
}

/// A saving held against the provider's reported bill, both in tokens at the input price of
/// the session's sheet (cache reads and writes at its rates): the bill it reported for the
/// requests it reported, and dcp's estimate of what the same requests would have cost without
/// pruning. A saving is contradicted when the reported bill is not below the estimate: then
/// the provider billed at least what dcp says no pruning would have cost.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct BillCheck {
    pub requests: u64,
    #[serde(serialize_with = "super::one_place")]
    pub reported: f64,
    #[serde(serialize_with = "super::one_place")]
    pub estimate_without: f64,
    pub contradicted: bool,
}

impl BillCheck {
    /// The check of `reported` against `estimate_without`, over `requests` requests.
    pub fn of(requests: u64, reported: f64, estimate_without: f64) -> BillCheck {
        BillCheck { requests, reported, estimate_without, contradicted: requests > 0 && reported >= estimate_without }
    }
}

impl MoneyFigures {
    /// `f` priced at `sheet`: in money where it has money prices, else in tokens only.
    pub fn priced(f: &Figures, sheet: &Sheet) -> MoneyFigures {
        let currency = sheet.money.as_ref().map(|m| m.currency.clone());
        MoneyFigures {
            sheet: sheet.name.clone(),
            currency,
            money_saved: sheet.money_of(f.cost_saved),
            money_without: sheet.money_of(f.cost_without),
            by_model: Vec::new(),
            reported_check: None,
        }
    }

    /// Whether a saving may be claimed: no reported bill contradicts it.
    pub fn claimable(&self) -> bool {
        !self.reported_check.is_some_and(|c| c.contradicted)
    }

    /// Adds another session's money (all-time): figures in another currency, or with no
    /// money prices, leave the sum in tokens only.
    pub fn add(&mut self, other: &MoneyFigures) {
        if self.currency != other.currency {
            (self.currency, self.money_saved, self.money_without) = (None, None, None);
            return;
        }
        let sum = |a: Option<f64>, b: Option<f64>| Some(a? + b?);
        self.money_saved = sum(self.money_saved, other.money_saved);
        self.money_without = sum(self.money_without, other.money_without);
    }
}

/// The sheet session `state`'s requests were priced at: `prices` in `config` over the sheet
/// the model it names last gives (see [`model_sheet`]; Anthropic's 5-minute cache when it
/// names none), as the sidecar priced them.
pub fn sheet_of(state: &SessionState, config: &Config) -> Sheet {
    let base = state.savings.last_model().map(model_sheet).unwrap_or_default();
    config.sheet(base.clone()).unwrap_or(base)
}

/// The sheet of a model a session's state names: the one its id (or provider) gives, with the
/// prices the client gave for it over it.
pub fn model_sheet(model: &Model) -> Sheet {
    let given = model.prices.map(|p| Given {
        input: p.input,
        output: p.output,
        cache_read: p.cache_read,
        cache_write: p.cache_write,
    });
    for_client(&model.provider, &model.id, given.as_ref())
}

/// The sheet the all-time figures are priced at: `prices` in `config` over the default.
pub fn all_time_sheet(config: &Config) -> Sheet {
    let base = Sheet::default();
    config.sheet(base.clone()).unwrap_or(base)
}

/// The money figures of session `state`, whose figures are `f`, priced at `sheet`: the whole,
/// and a row per model its requests went to.
pub fn of_session(state: &SessionState, f: &Figures, sheet: &Sheet) -> MoneyFigures {
    let mut money = MoneyFigures::priced(f, sheet);
    money.reported_check = check(&state.savings, sheet);
    if state.savings.requests > 0 {
        let named = state.savings.last_model().map(|m| format!("{}/{}", m.provider, m.id));
        money.by_model.push(ModelMoney {
            model: named.unwrap_or_else(|| sheet.name.clone()),
            sheet: sheet.name.clone(),
            requests: state.savings.requests,
            cost_saved: f.cost_saved,
            currency: money.currency.clone(),
            money_saved: money.money_saved,
        });
    }
    money
}

/// The saving of `savings` held against what the provider reported of its requests, both
/// priced at `sheet`; `None` while it reported none.
fn check(savings: &Savings, sheet: &Sheet) -> Option<BillCheck> {
    let (reported, requests) = super::reported::bill(savings, sheet, Outputs::Left);
    let estimate = super::reported::estimate_without(savings, sheet);
    (requests > 0).then(|| BillCheck::of(requests, reported, estimate))
}

/// What a notice says the session has saved so far (`saved so far: $0.012`, or in tokens at
/// the input price where its sheet has no money prices); `None` while it has saved nothing,
/// or when the provider's reported bill contradicts a saving.
pub fn so_far(state: &SessionState, config: &Config) -> Option<String> {
    let f = Figures::of(state);
    if f.cost_saved < 0.5 {
        return None;
    }
    let m = of_session(state, &f, &sheet_of(state, config));
    if !m.claimable() {
        return None;
    }
    Some(match (&m.currency, m.money_saved) {
        (Some(c), Some(saved)) => format!("saved so far: {}", amount(saved, c)),
        _ => format!("saved so far: {} tokens' worth", crate::format::compact(f.cost_saved.round() as u64)),
    })
}

/// An amount of money as the user reads it: `$0.0123`, `€4.56`, `12.50 CHF`; more places for
/// smaller amounts, so a session's few cents do not read as nothing.
pub fn amount(value: f64, currency: &str) -> String {
    let places = match value.abs() {
        v if v >= 1.0 => 2,
        v if v >= 0.01 => 3,
        _ => 4,
    };
    let number = format!("{value:.places$}");
    let (sign, number) = match number.strip_prefix('-') {
        Some(n) => ("-", n.to_string()),
        None => ("", number),
    };
    match currency {
        "USD" => format!("{sign}${number}"),
        "EUR" => format!("{sign}€{number}"),
        "GBP" => format!("{sign}£{number}"),
        other => format!("{sign}{number} {}", crate::format::field(other, 8)),
    }
}

fn six_places<S: serde::Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_f64((v * 1_000_000.0).round() / 1_000_000.0),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_priced_at_the_sheet_s_input_price_and_only_where_it_has_one() {
        let f = Figures { cost_saved: 250_000.0, cost_without: 1_000_000.0, ..Figures::default() };
        let sonnet = crate::prices::for_model("claude-sonnet-4-5").unwrap();
        let m = MoneyFigures::priced(&f, &sonnet);
        assert_eq!((m.currency.as_deref(), m.money_saved, m.money_without), (Some("USD"), Some(0.75), Some(3.0)));
        let unknown = MoneyFigures::priced(&f, &Sheet::default());
        assert_eq!((unknown.sheet.as_str(), unknown.currency, unknown.money_saved), ("anthropic-5m", None, None));
    }

    #[test]
    fn sums_in_two_currencies_are_left_in_tokens() {
        let sheet = crate::prices::for_model("gpt-5").unwrap();
        let f = Figures { cost_saved: 1_000_000.0, cost_without: 2_000_000.0, ..Figures::default() };
        let mut all = MoneyFigures::priced(&f, &sheet);
        all.add(&MoneyFigures::priced(&f, &sheet));
        assert_eq!((all.money_saved, all.money_without), (Some(2.5), Some(5.0)));
        let mut euros = sheet.clone();
        euros.money.as_mut().unwrap().currency = "EUR".into();
        all.add(&MoneyFigures::priced(&f, &euros));
        assert_eq!((all.currency, all.money_saved), (None, None));
    }

    #[test]
    fn a_reported_bill_not_below_the_estimate_without_pruning_contradicts_the_saving() {
        assert!(!BillCheck::of(3, 900.0, 1_000.0).contradicted);
        assert!(BillCheck::of(3, 1_000.0, 1_000.0).contradicted);
        assert!(!BillCheck::of(0, 0.0, 0.0).contradicted, "nothing reported contradicts nothing");
        let mut m =
            MoneyFigures { reported_check: Some(BillCheck::of(2, 1_200.0, 1_000.0)), ..MoneyFigures::default() };
        assert!(!m.claimable());
        m.reported_check = None;
        assert!(m.claimable());
    }

    #[test]
    fn amounts_read_with_their_currency_and_enough_places() {
        assert_eq!(amount(0.012345, "USD"), "$0.012");
        assert_eq!(amount(0.0012345, "USD"), "$0.0012");
        assert_eq!(amount(12.5, "EUR"), "€12.50");
        assert_eq!(amount(-1.5, "USD"), "-$1.50");
        assert_eq!(amount(3.0, "CHF"), "3.00 CHF");
    }
}
