//! The updater: a callback run on the pushing thread, once per unique pushed key, that folds the
//! merged value into the stored one (typically by pushing engine ops).

use super::keys::{KeyKind, KeyRef};
use crate::ndarray::NDArray;
use std::sync::Arc;

/// Called with the int key (for string keys: the key's id), the merged value and the stored
/// value. It must update `stored` in place.
pub type IntUpdater = Arc<dyn Fn(i32, &NDArray, &NDArray) + Send + Sync>;
/// Called with the string key for stores that use string keys.
pub type StrUpdater = Arc<dyn Fn(&str, &NDArray, &NDArray) + Send + Sync>;

/// The updaters of a store. As in MXNet, string keys go to the string updater when one is set,
/// otherwise to the int updater with the key's id; int keys go to the int updater.
#[derive(Clone, Default)]
pub(crate) struct Updaters {
    pub(crate) int: Option<IntUpdater>,
    pub(crate) str: Option<StrUpdater>,
}

impl Updaters {
    /// True if a push of `kind` keys is folded in by an updater.
    pub(crate) fn applies_to(&self, kind: KeyKind) -> bool {
        self.int.is_some() || (kind == KeyKind::Str && self.str.is_some())
    }

    /// Calls the updater that applies to `key` (`id` is its int id). Returns false if none does.
    pub(crate) fn call(
        &self,
        key: KeyRef<'_>,
        id: i32,
        merged: &NDArray,
        stored: &NDArray,
    ) -> bool {
        match (key, &self.str, &self.int) {
            (KeyRef::Str(s), Some(f), _) => f(s, merged, stored),
            (_, _, Some(f)) => f(id, merged, stored),
            _ => return false,
        }
        true
    }
}
