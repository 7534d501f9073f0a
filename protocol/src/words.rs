//! The words of the settings' enums (`no_grad`, `bf16`, `int4`, ...). Each enum spells them
//! once, through strum's derives with `serialize_all = "snake_case"` (serde's
//! `rename_all = "snake_case"` gives the JSON the same words; a test holds the two equal):
//! `EnumString` parses (an unknown word is refused with the known ones listed, by
//! [`unknown`]), `IntoStaticStr` names, `VariantArray` lists the values and `VariantNames`
//! the words, which is where the settings table ([`crate::settings`]) takes a select's
//! choices from.

use strum::{VariantArray, VariantNames};

use crate::{Autocast, DeviceChoice, GradMode, InputSource, KvCacheKind, KvDtype, MemoryFormat, WeightQuant, WeightsDtype};

/// The error of a word that is none of `T`'s: what was given and every word it takes.
pub fn unknown<T: VariantNames>(given: &str) -> String {
    format!("unknown value `{given}`; expected one of: {}", T::VARIANTS.join(", "))
}

/// The words of `T`, in declaration order (the default first).
pub fn words<T: VariantNames>() -> &'static [&'static str] {
    T::VARIANTS
}

/// Every value of `T`, in declaration order.
pub fn all<T: VariantArray>() -> &'static [T] {
    T::VARIANTS
}

// The words under the name the code calls them by (`GradMode::NoGrad.as_str()`).
impl GradMode {
    /// The three, as an array to iterate by value.
    pub const ALL: [GradMode; 3] = [GradMode::Enabled, GradMode::NoGrad, GradMode::InferenceMode];
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl Autocast {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl DeviceChoice {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl WeightsDtype {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl MemoryFormat {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl InputSource {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl KvCacheKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl WeightQuant {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
impl KvDtype {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strum's words and serde's are the same words, and the default is the first.
    fn same<T>()
    where
        T: VariantArray + VariantNames + Copy + Default + PartialEq + std::fmt::Debug + serde::Serialize + std::str::FromStr,
        &'static str: From<T>,
    {
        for (v, w) in all::<T>().iter().zip(words::<T>()) {
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::Value::String(w.to_string()));
            assert_eq!(<&'static str>::from(*v), *w);
            assert!(w.parse::<T>().is_ok_and(|p| p == *v), "{w}");
        }
        assert_eq!(all::<T>()[0], T::default(), "the default is the first word (a setting left out of the JSON reads as it)");
    }

    #[test]
    fn strum_and_serde_spell_every_word_alike() {
        same::<GradMode>();
        same::<Autocast>();
        same::<DeviceChoice>();
        same::<WeightsDtype>();
        same::<MemoryFormat>();
        same::<InputSource>();
        same::<KvCacheKind>();
        same::<WeightQuant>();
        same::<KvDtype>();
        let e = "nhwc".parse::<MemoryFormat>().unwrap_err();
        assert_eq!(e, "unknown value `nhwc`; expected one of: contiguous, channels_last");
    }
}
