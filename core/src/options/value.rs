//! Queue options by name: the descriptor of each option ([`OptionField`]) and a value of any
//! option ([`OptionValue`]), so that the C and Python bindings and the command line can walk
//! [`QueueOptions::FIELDS`](crate::QueueOptions::FIELDS) instead of naming every option.

use std::time::Duration;

use crate::error::{Error, Result};

/// What an option holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionKind {
    /// A length of time ([`OptionValue::Duration`]; whole milliseconds in C).
    Duration,
    /// A whole number ([`OptionValue::Number`]).
    Number,
    /// On or off ([`OptionValue::Flag`]).
    Flag,
    /// The name of another queue ([`OptionValue::Text`]).
    QueueName,
}

/// The value of one queue option, as [`QueueOptions::get`](crate::QueueOptions::get) reads it
/// and [`QueueOptions::set`](crate::QueueOptions::set) takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionValue {
    /// An optional option that is not set (`None` in Rust).
    Unset,
    /// A length of time.
    Duration(Duration),
    /// A whole number.
    Number(u64),
    /// On or off.
    Flag(bool),
    /// A queue name.
    Text(String),
}

/// The descriptor of one queue option: what [`QueueOptions::FIELDS`](crate::QueueOptions::FIELDS)
/// lists, in the order of the option table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OptionField {
    /// The option's name, as in Rust, C (`postbox_queue_options.<name>` and
    /// `POSTBOX_OPTION_<NAME>`) and Python (the keyword).
    pub name: &'static str,
    /// What the option holds.
    pub kind: OptionKind,
    /// Whether the option can be cleared (`no_<name>()`, [`OptionValue::Unset`]).
    pub optional: bool,
    /// The unit of its number or duration, for display (`"ms"`, `"bytes"`, …; empty if none).
    pub unit: &'static str,
}

/// A Rust type an option field can have, and its conversion to and from [`OptionValue`].
pub(crate) trait FieldValue: Sized {
    const KIND: OptionKind;
    const OPTIONAL: bool = false;
    fn to_value(&self) -> OptionValue;
    fn from_value(name: &str, v: OptionValue) -> Result<Self>;
}

fn mismatch<T>(name: &str, kind: OptionKind) -> Result<T> {
    Err(Error::invalid(format!(
        "option {name} takes a value of kind {kind:?}"
    )))
}

impl FieldValue for Duration {
    const KIND: OptionKind = OptionKind::Duration;
    fn to_value(&self) -> OptionValue {
        OptionValue::Duration(*self)
    }
    fn from_value(name: &str, v: OptionValue) -> Result<Self> {
        match v {
            OptionValue::Duration(d) => Ok(d),
            _ => mismatch(name, Self::KIND),
        }
    }
}

impl FieldValue for bool {
    const KIND: OptionKind = OptionKind::Flag;
    fn to_value(&self) -> OptionValue {
        OptionValue::Flag(*self)
    }
    fn from_value(name: &str, v: OptionValue) -> Result<Self> {
        match v {
            OptionValue::Flag(b) => Ok(b),
            _ => mismatch(name, Self::KIND),
        }
    }
}

impl FieldValue for String {
    const KIND: OptionKind = OptionKind::QueueName;
    fn to_value(&self) -> OptionValue {
        OptionValue::Text(self.clone())
    }
    fn from_value(name: &str, v: OptionValue) -> Result<Self> {
        match v {
            OptionValue::Text(s) => Ok(s),
            _ => mismatch(name, Self::KIND),
        }
    }
}

macro_rules! number_field {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            const KIND: OptionKind = OptionKind::Number;
            fn to_value(&self) -> OptionValue {
                OptionValue::Number(*self as u64)
            }
            fn from_value(name: &str, v: OptionValue) -> Result<Self> {
                match v {
                    OptionValue::Number(n) => <$t>::try_from(n)
                        .map_err(|_| Error::invalid(format!("option {name}: {n} is out of range"))),
                    _ => mismatch(name, Self::KIND),
                }
            }
        }
    )*};
}
number_field!(u8, u32, u64, usize);

impl<T: FieldValue> FieldValue for Option<T> {
    const KIND: OptionKind = T::KIND;
    const OPTIONAL: bool = true;
    fn to_value(&self) -> OptionValue {
        self.as_ref().map_or(OptionValue::Unset, T::to_value)
    }
    fn from_value(name: &str, v: OptionValue) -> Result<Self> {
        match v {
            OptionValue::Unset => Ok(None),
            v => T::from_value(name, v).map(Some),
        }
    }
}
