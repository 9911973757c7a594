//! What an agent CLI reports an attempt used: tokens, and dollars when the
//! CLI priced them itself (Claude Code's `total_cost_usd`). Dollars are
//! held in millionths, so that sums over many attempts are exact and equal
//! wherever they are added up.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// An amount of US dollars, in millionths of a dollar.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(u64);

impl Usd {
    /// From a dollar figure as a CLI prints it (negative or not a number:
    /// nothing).
    pub fn from_dollars(dollars: f64) -> Usd {
        if dollars.is_finite() && dollars > 0.0 {
            Usd((dollars * 1e6).round() as u64)
        } else {
            Usd(0)
        }
    }

    pub const ZERO: Usd = Usd(0);

    pub const fn from_micros(micros: u64) -> Usd {
        Usd(micros)
    }

    pub fn micros(self) -> u64 {
        self.0
    }

    /// What is left of `self` after `other` (never below nothing).
    pub fn minus(self, other: Usd) -> Usd {
        Usd(self.0.saturating_sub(other.0))
    }

    /// `n` times this amount.
    pub fn times(self, n: u64) -> Usd {
        Usd(self.0.saturating_mul(n))
    }

    /// This amount split `n` ways (the mean of a sum of `n`); nothing when
    /// `n` is zero.
    pub fn split(self, n: u64) -> Usd {
        Usd(self.0.checked_div(n).unwrap_or(0))
    }

    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl std::ops::Add for Usd {
    type Output = Usd;
    fn add(self, other: Usd) -> Usd {
        Usd(self.0.saturating_add(other.0))
    }
}

impl std::iter::Sum for Usd {
    fn sum<I: Iterator<Item = Usd>>(iter: I) -> Usd {
        iter.fold(Usd(0), |a, b| a + b)
    }
}

/// Money as money: `$0.40`, `$4.56`; below a dollar up to four places,
/// so a small run's `$0.0123` is not hidden as `$0.01` (the places past
/// the cents only when they say something).
impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 1_000_000 {
            return write!(f, "${:.2}", self.dollars());
        }
        let four = format!("{:.4}", self.dollars());
        let trimmed = four.trim_end_matches('0');
        let places = trimmed.split_once('.').map_or(0, |(_, p)| p.len());
        if places < 2 {
            write!(f, "${:.2}", self.dollars())
        } else {
            write!(f, "${trimmed}")
        }
    }
}

/// `5`, `12.50` or `$12.50`, as a person gives a budget.
impl std::str::FromStr for Usd {
    type Err = String;
    fn from_str(text: &str) -> Result<Usd, String> {
        let t = text.trim();
        let t = t.strip_prefix('$').unwrap_or(t);
        match t.parse::<f64>() {
            Ok(d) if (0.0..1e12).contains(&d) => Ok(Usd::from_dollars(d)),
            _ => Err(format!(
                "`{text}` is not an amount of dollars: write it like 5 or 12.50"
            )),
        }
    }
}

/// Written as dollars (`0.012345`), the way the CLIs and people write them.
impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
        f64::deserialize(d).map(Usd::from_dollars)
    }
}

/// What a model costs, in dollars per million tokens: how an attempt whose
/// CLI reported tokens but no dollars is priced. Reading from and writing
/// to the prompt cache default to a tenth and to one and a quarter times
/// the input price, as the large providers charge them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: Usd,
    pub output: Usd,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<Usd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<Usd>,
}

impl Price {
    /// `tokens` at `per_million` dollars a million, exactly, in millionths.
    fn of(tokens: u64, per_million: Usd) -> Usd {
        let micros = (tokens as u128 * per_million.0 as u128) / 1_000_000;
        Usd(u64::try_from(micros).unwrap_or(u64::MAX))
    }

    /// What `u`'s tokens cost at this price.
    pub fn tokens(&self, u: &Usage) -> Usd {
        let read = self.cache_read.unwrap_or(Usd(self.input.0 / 10));
        let write = self
            .cache_write
            .unwrap_or(Usd(self.input.0.saturating_mul(5) / 4));
        Price::of(u.input_tokens, self.input)
            + Price::of(u.output_tokens, self.output)
            + Price::of(u.cache_read_tokens, read)
            + Price::of(u.cache_write_tokens, write)
    }
}

/// One attempt's use of the model, as its CLI reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// What the CLI priced the run at (`None`: it reported tokens only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Usd>,
}

impl Usage {
    /// Every input token: fresh, read from the cache, written to it.
    pub fn tokens_in(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// What the attempt cost: the CLI's own figure when it gave one, else its
    /// tokens at `price` (`None`: neither, so no dollar figure).
    pub fn dollars(&self, price: Option<&Price>) -> Option<Usd> {
        self.cost.or_else(|| price.map(|p| p.tokens(self)))
    }

    /// "$0.012, 2,000 tokens in and 400 out" (dollars only when priced).
    pub fn said(&self) -> String {
        let tokens = format!(
            "{} tokens in and {} out",
            thousands(self.tokens_in()),
            thousands(self.output_tokens)
        );
        match self.cost {
            Some(c) => format!("{c}, {tokens}"),
            None => tokens,
        }
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, o: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(o.input_tokens),
            output_tokens: self.output_tokens.saturating_add(o.output_tokens),
            cache_read_tokens: self.cache_read_tokens.saturating_add(o.cache_read_tokens),
            cache_write_tokens: self.cache_write_tokens.saturating_add(o.cache_write_tokens),
            cost: match (self.cost, o.cost) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or_default() + b.unwrap_or_default()),
            },
        }
    }
}

/// What an operation's agents reported in all: the sum, and how many of
/// the attempts reported anything (the others are not in the sum).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reported {
    pub usage: Usage,
    pub attempts: usize,
    pub of: usize,
}

impl Reported {
    /// Over attempts' usage (`None`: that attempt's CLI reported nothing).
    pub fn over<'a>(usages: impl IntoIterator<Item = &'a Option<Usage>>) -> Reported {
        usages.into_iter().fold(Reported::default(), |mut r, u| {
            r.of += 1;
            if let Some(u) = u {
                r.usage = r.usage + *u;
                r.attempts += 1;
            }
            r
        })
    }

    /// One line for people, or `None` when no attempt reported anything:
    /// "$0.0361 reported by the agents (12,000 tokens in, 1,206 out; 6 of 6 attempts)".
    pub fn line(&self) -> Option<String> {
        if self.attempts == 0 {
            return None;
        }
        let u = &self.usage;
        let spent = u
            .cost
            .map_or_else(|| "no dollar figure".to_string(), |c| c.to_string());
        Some(format!(
            "{spent} reported by the agents ({} tokens in, {} out; {} of {} attempts)",
            thousands(u.tokens_in()),
            thousands(u.output_tokens),
            self.attempts,
            self.of
        ))
    }
}

/// `12345` as `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dollars_read_and_print_as_people_write_them() {
        assert_eq!(Usd::from_dollars(0.012345).micros(), 12_345);
        assert_eq!(Usd::from_dollars(-1.0), Usd::default());
        assert_eq!(Usd::from_dollars(f64::NAN), Usd::default());
        assert_eq!(Usd::from_dollars(0.0361).to_string(), "$0.0361");
        assert_eq!(Usd::from_dollars(12.5).to_string(), "$12.50");
        assert_eq!(Usd::from_dollars(0.4).to_string(), "$0.40");
        assert_eq!(Usd::from_dollars(0.405).to_string(), "$0.405");
        assert_eq!(Usd::from_dollars(0.0).to_string(), "$0.00");
        assert_eq!(Usd::from_dollars(0.025).to_string(), "$0.025");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        let u: Usage =
            serde_json::from_str(r#"{"input_tokens":1,"output_tokens":2,"cost":0.5}"#).unwrap();
        assert_eq!(u.cost, Some(Usd::from_dollars(0.5)));
        assert_eq!(serde_json::to_string(&u.cost.unwrap()).unwrap(), "0.5");
    }

    #[test]
    fn an_operation_with_no_report_says_nothing() {
        assert_eq!(Reported::over(&[None, None]).line(), None);
        let usage = Usage {
            input_tokens: 2000,
            output_tokens: 402,
            cost: Some(Usd::from_dollars(0.012)),
            ..Usage::default()
        };
        let one = Some(usage);
        assert_eq!(usage.said(), "$0.012, 2,000 tokens in and 402 out");
        assert_eq!(
            Reported::over(&[one, None]).line().unwrap(),
            "$0.012 reported by the agents (2,000 tokens in, 402 out; 1 of 2 attempts)"
        );
    }

    #[test]
    fn tokens_are_priced_per_million_with_the_cache_at_its_share() {
        let p: Price = serde_json::from_str(r#"{"input": 3.0, "output": 15.0}"#).unwrap();
        let u = Usage {
            input_tokens: 1_000,
            output_tokens: 200,
            cache_read_tokens: 10_000,
            cache_write_tokens: 1_000,
            cost: None,
        };
        // 1,000 × $3/M + 200 × $15/M + 10,000 × $0.30/M + 1,000 × $3.75/M
        assert_eq!(
            p.tokens(&u),
            Usd::from_micros(3_000 + 3_000 + 3_000 + 3_750)
        );
        assert_eq!(u.dollars(Some(&p)), Some(p.tokens(&u)));
        assert_eq!(u.dollars(None), None);
        let reported = Usage {
            cost: Some(Usd::from_micros(7)),
            ..u
        };
        assert_eq!(
            reported.dollars(Some(&p)),
            Some(Usd::from_micros(7)),
            "the CLI's own figure first"
        );
        assert!(
            serde_json::from_str::<Price>(r#"{"input": 1, "output": 2, "cahce_read": 1}"#).is_err()
        );
    }

    proptest! {
        /// However attempts' dollars are grouped, their sum is the same.
        #[test]
        fn sums_of_dollars_do_not_depend_on_their_grouping(
            xs in proptest::collection::vec(0.0f64..50.0, 0..40),
            cut in 0usize..40,
        ) {
            let us: Vec<Usd> = xs.iter().map(|x| Usd::from_dollars(*x)).collect();
            let cut = cut.min(us.len());
            let whole: Usd = us.iter().copied().sum();
            let parts: Usd = us[..cut].iter().copied().sum::<Usd>() + us[cut..].iter().copied().sum::<Usd>();
            prop_assert_eq!(whole, parts);
        }
    }
}
