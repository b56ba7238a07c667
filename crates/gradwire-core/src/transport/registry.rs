//! Every transport the drivers know: one line per transport. A transport's module owns
//! the rest (its keys, their defaults, docs and checks, and how it builds endpoints:
//! [`TransportSpec`]). [`register`] adds one at run time (a test's toy transport).

use std::sync::RwLock;

use super::spec::{Config, ConfigError, Key, KeySet, Kind, TransportSpec, Value, Values};
use super::{dlcp, ltp, pfabric, pias, tcp};

/// The built-in transports, in the order the docs and error messages list them.
static BUILTIN: [&dyn TransportSpec; 6] =
    [&tcp::NewReno, &tcp::Dctcp, &dlcp::Dlcp, &pias::Pias, &pfabric::PFabric, &ltp::Ltp];

/// Transports registered at run time, after the built-in ones.
static EXTRA: RwLock<Vec<&'static dyn TransportSpec>> = RwLock::new(Vec::new());

/// Every transport, built-in first.
pub fn all() -> Vec<&'static dyn TransportSpec> {
    let extra = EXTRA.read().expect("not poisoned");
    BUILTIN.iter().copied().chain(extra.iter().copied()).collect()
}

/// The transport called `name`.
pub fn lookup(name: &str) -> Option<&'static dyn TransportSpec> {
    if let Some(s) = BUILTIN.iter().find(|s| s.name() == name) {
        return Some(*s);
    }
    EXTRA.read().expect("not poisoned").iter().find(|s| s.name() == name).copied()
}

/// Adds `spec` after the built-in transports. Refused if its name or one of its keys is
/// taken by another transport's (a key set it shares with one is fine).
pub fn register(spec: &'static dyn TransportSpec) -> Result<(), String> {
    let mut extra = EXTRA.write().expect("not poisoned");
    let known: Vec<&'static dyn TransportSpec> = BUILTIN.iter().copied().chain(extra.iter().copied()).collect();
    if known.iter().any(|s| s.name() == spec.name()) {
        return Err(format!("a transport is already called {:?}", spec.name()));
    }
    let sets = distinct_sets(&known);
    for set in spec.keys().iter().filter(|s| !sets.iter().any(|k| std::ptr::eq(*k, **s))) {
        for key in set.keys {
            if sets.iter().any(|s| s.keys.iter().any(|k| k.name == key.name)) {
                return Err(format!("transport key {:?} of {:?} is taken", key.name, spec.name()));
            }
        }
    }
    extra.push(spec);
    Ok(())
}

fn distinct_sets(specs: &[&'static dyn TransportSpec]) -> Vec<&'static KeySet> {
    let mut sets: Vec<&'static KeySet> = Vec::new();
    for set in specs.iter().flat_map(|s| s.keys().iter().copied()) {
        if !sets.iter().any(|k| std::ptr::eq(*k, set)) {
            sets.push(set);
        }
    }
    sets
}

/// Every key set, once each, in the order the transports list them.
pub fn key_sets() -> Vec<&'static KeySet> {
    distinct_sets(&all())
}

/// The key called `name`.
pub fn key(name: &str) -> Option<&'static Key> {
    let find = |specs: &mut dyn Iterator<Item = &'static dyn TransportSpec>| {
        specs.flat_map(|s| s.keys().iter()).flat_map(|set| set.keys.iter()).find(|k| k.name == name)
    };
    find(&mut BUILTIN.iter().copied()).or_else(|| find(&mut EXTRA.read().expect("not poisoned").iter().copied()))
}

/// The transports that read `key`'s set, by name (the docs' "who reads it").
pub fn readers(set: &KeySet) -> Vec<&'static str> {
    all().into_iter().filter(|s| s.keys().iter().any(|k| std::ptr::eq(*k, set))).map(|s| s.name()).collect()
}

/// The registry's answers about a transport by name.
impl Kind {
    /// The registered transport called `name`, if any.
    pub fn from_name(name: &str) -> Option<Kind> {
        lookup(name).map(Kind::of)
    }

    /// The registered transport called `name`; panics if there is none.
    pub fn named(name: &str) -> Kind {
        Kind::from_name(name).unwrap_or_else(|| panic!("no transport {name:?}"))
    }

    /// Every registered transport, in registry order.
    pub fn all() -> Vec<Kind> {
        all().into_iter().map(Kind::of).collect()
    }

    /// The names of every registered transport.
    pub fn names() -> Vec<&'static str> {
        all().into_iter().map(|s| s.name()).collect()
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        Kind::from_name(s).ok_or_else(|| {
            let names: Vec<String> = Kind::names().iter().map(|n| format!("{n:?}")).collect();
            format!("unknown transport {s:?}: expected one of {}", names.join(", "))
        })
    }
}

/// Keys read by name: the value set, else the registered key's default.
impl Values {
    /// Every key at its default.
    pub fn new() -> Values {
        Values::default()
    }

    /// Sets `key` (a registered key's name; panics otherwise).
    pub fn set(&mut self, key: &str, value: Value) {
        let k = self::key(key).unwrap_or_else(|| panic!("no transport key {key:?}"));
        // only what differs from the default is kept, so equal settings compare equal
        if value == k.default {
            self.set.remove(k.name);
        } else {
            self.set.insert(k.name, value);
        }
    }

    /// `key`'s value.
    pub fn get(&self, key: &str) -> &Value {
        match self.set.get(key) {
            Some(v) => v,
            None => &self::key(key).unwrap_or_else(|| panic!("no transport key {key:?}")).default,
        }
    }

    /// A [`KeyType::Bool`] key.
    pub fn bool(&self, key: &str) -> bool {
        match self.get(key) {
            Value::Bool(b) => *b,
            v => panic!("{key} = {v:?} is not a bool"),
        }
    }

    /// A [`KeyType::U32`] key.
    pub fn u32(&self, key: &str) -> u32 {
        match self.get(key) {
            Value::Int(i) => u32::try_from(*i).unwrap_or(u32::MAX),
            v => panic!("{key} = {v:?} is not an integer"),
        }
    }

    /// A [`KeyType::F64`] key (an integer counts).
    pub fn f64(&self, key: &str) -> f64 {
        self.opt_f64(key).unwrap_or_else(|| panic!("{key} is absent"))
    }

    /// An optional [`KeyType::F64`] key.
    pub fn opt_f64(&self, key: &str) -> Option<f64> {
        match self.get(key) {
            Value::Absent => None,
            Value::Float(x) => Some(*x),
            Value::Int(i) => Some(*i as f64),
            v => panic!("{key} = {v:?} is not a number"),
        }
    }

    /// A [`KeyType::Choice`] key.
    pub fn str(&self, key: &str) -> &str {
        match self.get(key) {
            Value::Str(s) => s,
            v => panic!("{key} = {v:?} is not a name"),
        }
    }

    /// A [`KeyType::List`] key.
    pub fn list(&self, key: &str) -> &[u64] {
        match self.get(key) {
            Value::List(l) => l,
            v => panic!("{key} = {v:?} is not a list"),
        }
    }
}

impl Config {
    /// The first setting out of range, whatever the kind: every registered key set's
    /// checks, in registry order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.common.mss == 0 {
            return Err(ConfigError::new("mss_bytes", "must be positive (got 0)"));
        }
        super::shared::check_loss_bound("loss_bound", self.common.loss_bound)?;
        for set in key_sets() {
            (set.check)(self)?;
        }
        Ok(())
    }
}
