//! The price table (`prices`): US dollars per million tokens of each kind, by model, for the estimated cost of a
//! session's usage. Built-in list prices for the models the built-in harnesses name, which the config overrides key
//! by key (`null` takes a built-in away).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::api::Tokens;

/// US dollars per million tokens of each kind.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Price {
    /// Input at the full price.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Input written to the cache.
    pub cache_write: f64,
    /// Input read from the cache.
    pub cache_read: f64,
}

impl Price {
    /// What `tokens` cost, in US dollars.
    pub fn of(&self, tokens: &Tokens) -> f64 {
        let per = |count: u64, dollars: f64| count as f64 * dollars / 1_000_000.0;
        per(tokens.input, self.input)
            + per(tokens.output, self.output)
            + per(tokens.cache_write, self.cache_write)
            + per(tokens.cache_read, self.cache_read)
    }
}

/// The price table: a model's price is its own entry, or for a dated version (`claude-sonnet-4-5-20250929`) its
/// model's (`claude-sonnet-4-5`); never another model's whose name it begins with (`gpt-5-pro` is not `gpt-5`).
#[derive(Clone, Debug, PartialEq)]
pub struct Prices(BTreeMap<String, Price>);

/// The built-in list prices (US dollars per million tokens, as the vendors published them in 2025; a cache write is
/// Anthropic's five-minute write; OpenAI and Google bill no cache write, so it is the input's price).
const BUILT_IN: &[(&str, [f64; 4])] = &[
    // input, output, cache write, cache read
    ("claude-opus-4", [15.0, 75.0, 18.75, 1.5]),
    ("claude-opus-4-1", [15.0, 75.0, 18.75, 1.5]),
    ("claude-opus-4-5", [5.0, 25.0, 6.25, 0.5]),
    ("claude-sonnet-4", [3.0, 15.0, 3.75, 0.3]),
    ("claude-sonnet-4-5", [3.0, 15.0, 3.75, 0.3]),
    ("claude-haiku-4-5", [1.0, 5.0, 1.25, 0.1]),
    ("claude-3-5-haiku", [0.8, 4.0, 1.0, 0.08]),
    ("gpt-5", [1.25, 10.0, 1.25, 0.125]),
    ("gpt-5-codex", [1.25, 10.0, 1.25, 0.125]),
    ("gpt-5-mini", [0.25, 2.0, 0.25, 0.025]),
    ("gpt-5-nano", [0.05, 0.4, 0.05, 0.005]),
    ("gemini-2.5-pro", [1.25, 10.0, 1.25, 0.125]),
    ("gemini-2.5-flash", [0.3, 2.5, 0.3, 0.03]),
];

impl Default for Prices {
    fn default() -> Self {
        let price =
            |[input, output, cache_write, cache_read]: [f64; 4]| Price { input, output, cache_write, cache_read };
        Prices(BUILT_IN.iter().map(|(model, p)| (model.to_string(), price(*p))).collect())
    }
}

impl Prices {
    /// `model`'s price, if the table has one.
    pub fn of(&self, model: &str) -> Option<&Price> {
        // The names the harnesses write for one model: `claude-sonnet-4.5` (Copilot CLI), `...@20250929` (Vertex),
        // `...-20250929` and `...-2025-08-07` (dated versions).
        let dotless = model.replace('.', "-");
        let name = dotless.split_once('@').map_or(dotless.as_str(), |(name, _)| name);
        let undated = undated(name).unwrap_or(name);
        self.0.get(model).or_else(|| self.0.get(name)).or_else(|| self.0.get(undated))
    }

    /// The built-ins with `file`'s entries over them; the error names the entry.
    pub fn with(file: BTreeMap<String, Option<Price>>) -> Result<Self, (String, String)> {
        let mut prices = Prices::default();
        for (model, price) in file {
            let key = format!("prices.{model}");
            if model.is_empty() || model.len() > 128 {
                return Err((key, "a model's name is 1 to 128 characters".into()));
            }
            match price {
                None => {
                    prices.0.remove(&model);
                }
                Some(p) => {
                    let each = [p.input, p.output, p.cache_write, p.cache_read];
                    if !each.iter().all(|d| d.is_finite() && *d >= 0.0 && *d <= 1_000_000.0) {
                        return Err((key, "each price is dollars per million tokens, from 0 to 1000000".into()));
                    }
                    prices.0.insert(model, p);
                }
            }
        }
        Ok(prices)
    }
}

/// `name` without a trailing date, `-YYYYMMDD` or `-YYYY-MM-DD`, if it has one.
fn undated(name: &str) -> Option<&str> {
    let shape = |date: &[u8], dashes: &[usize]| {
        date.iter().enumerate().all(|(i, b)| if dashes.contains(&i) { *b == b'-' } else { b.is_ascii_digit() })
    };
    let bytes = name.as_bytes();
    [(9, &[0][..]), (11, &[0, 5, 8][..])].into_iter().find_map(|(len, dashes)| {
        let at = bytes.len().checked_sub(len)?;
        shape(&bytes[at..], dashes).then(|| &name[..at])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_takes_its_own_price_or_its_dated_versions_do() {
        let prices = Prices::default();
        let input = |model: &str| prices.of(model).map(|p| p.input);
        assert_eq!(input("claude-opus-4-5"), Some(5.0));
        assert_eq!(input("claude-opus-4-5-20251101"), Some(5.0), "a dated version");
        assert_eq!(input("claude-opus-4-1-20250805"), Some(15.0));
        assert_eq!(input("claude-sonnet-4-5-20250929"), Some(3.0));
        assert_eq!(input("gpt-5-mini"), Some(0.25), "its own, not gpt-5's");
        assert_eq!(input("gpt-5-codex"), Some(1.25));
        assert_eq!(input("gpt-5-pro"), None, "another model, whatever its name begins with");
        assert_eq!(input("claude-opus-4-6"), None);
        assert_eq!(input("claude-opus-4-5-2025"), None, "no date");
        assert_eq!(input("claude-sonnet-4.5"), Some(3.0), "Copilot CLI's name");
        assert_eq!(input("claude-sonnet-4-5@20250929"), Some(3.0), "Vertex's");
        assert_eq!(input("gpt-5-2025-08-07"), Some(1.25));
        assert_eq!(input("gpt-5-pro-2025-10-06"), None);
        assert_eq!(input("é-2025-08-07"), None, "any name is looked up, none panics");
        assert_eq!(input("ééééééééééé"), None);
        assert_eq!(input("claude-opus-5-5"), None, "unknown: never priced as zero");
        assert_eq!(input("<synthetic>"), None);
        assert_eq!(input(""), None);
    }

    #[test]
    fn the_config_overrides_adds_and_removes_entries() {
        let price = Price { input: 2.0, output: 4.0, cache_write: 3.0, cache_read: 0.5 };
        let file = BTreeMap::from([("claude-opus-5".into(), Some(price)), ("gpt-5".into(), None)]);
        let prices = Prices::with(file).unwrap();
        assert_eq!(prices.of("claude-opus-5"), Some(&price));
        assert_eq!(prices.of("claude-opus-5-20261101"), Some(&price));
        assert_eq!(prices.of("gpt-5"), None, "taken away");
        assert_eq!(prices.of("gpt-5-mini").map(|p| p.input), Some(0.25), "the others stay");
        let tokens = Tokens { input: 1_000_000, output: 500_000, cache_write: 0, cache_read: 2_000_000 };
        assert_eq!(price.of(&tokens), 2.0 + 2.0 + 1.0);
        let negative = Price { input: -1.0, ..price };
        let err = Prices::with(BTreeMap::from([("m".into(), Some(negative))])).unwrap_err();
        assert_eq!(err.0, "prices.m");
    }
}
