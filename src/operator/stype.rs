//! Storage types in an invoke: which storage the outputs the library allocates get, and which
//! optimizer updates are lazy (touch only the rows a row_sparse gradient stores).
//!
//! Kernels are dense. An op given sparse arrays computes on dense copies of them and writes a
//! sparse output back in its storage type (MXNet's storage fallback, which its own ops without
//! a sparse kernel use too), so values are exactly the dense op's. What sparse storage changes
//! is decided here: the outputs' storage (as MXNet's storage inference gives it for the ops that
//! keep sparsity) and the rows lazy updates may write.

use crate::ndarray::format::StorageType;

/// How an operator's library-allocated outputs get their storage type when sparse arrays are
/// involved: part of the operator's definition ([`crate::operator::def::OpDef::stype`]).
#[derive(Clone, Copy)]
pub enum StorageRule {
    /// Outputs are dense (MXNet's storage fallback).
    Dense,
    /// A unary op that maps zero to zero: the output has its input's storage.
    ZeroPreserving,
    /// Sums and products: inputs that share one storage give an output of that storage.
    SameStorage,
    /// Decided from the parameters and the inputs' storage types.
    Custom(fn(&[(&str, &str)], &[StorageType]) -> StorageType),
    /// An optimizer update (dense outputs) that, given a row_sparse gradient (input 1), updates
    /// only its stored rows when this says so.
    LazyUpdate(fn(&[(&str, &str)], &[StorageType]) -> bool),
}

/// A parameter's value as given.
pub fn param<'a>(params: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    params.iter().find(|(name, _)| *name == key).map(|(_, v)| *v)
}

/// Whether a boolean parameter is given as true.
pub fn truthy(v: Option<&str>) -> bool {
    v.is_some_and(|v| matches!(v, "True" | "true" | "1"))
}

/// The storage of each of `n` outputs the library allocates under `rule` given the inputs'.
pub fn output_stypes(
    rule: StorageRule,
    params: &[(&str, &str)],
    inputs: &[StorageType],
    n: usize,
) -> Vec<StorageType> {
    let first = inputs.first().copied().unwrap_or(StorageType::Default);
    let stype = match rule {
        StorageRule::Custom(f) => f(params, inputs),
        StorageRule::ZeroPreserving if inputs.len() == 1 => first,
        StorageRule::SameStorage if !inputs.is_empty() && inputs.iter().all(|&s| s == first) => {
            first
        }
        _ => StorageType::Default,
    };
    vec![stype; n]
}

/// Whether an invoke under `rule` is a lazy update: only the rows of the row_sparse gradient
/// (input 1) change.
pub fn lazy_update_rows(
    rule: StorageRule,
    params: &[(&str, &str)],
    inputs: &[StorageType],
) -> bool {
    match rule {
        StorageRule::LazyUpdate(f) => inputs.get(1) == Some(&StorageType::RowSparse) && f(params, inputs),
        _ => false,
    }
}

/// `lazy_update` (default true) of `sgd_update`, `sgd_mom_update`, `adam_update`.
pub fn lazy_if_asked(params: &[(&str, &str)], _inputs: &[StorageType]) -> bool {
    param(params, "lazy_update").is_none_or(|v| truthy(Some(v)))
}

/// Always lazy (`_sparse_adagrad_update`).
pub fn always_lazy(_params: &[(&str, &str)], _inputs: &[StorageType]) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use StorageType::*;

    #[test]
    fn rules_give_mxnet_storage() {
        assert_eq!(output_stypes(StorageRule::ZeroPreserving, &[], &[RowSparse], 1), [RowSparse]);
        assert_eq!(output_stypes(StorageRule::Dense, &[], &[RowSparse], 1), [Default]);
        assert_eq!(output_stypes(StorageRule::SameStorage, &[], &[Csr, Csr], 1), [Csr]);
        assert_eq!(output_stypes(StorageRule::SameStorage, &[], &[Csr, Default], 1), [Default]);
    }

    #[test]
    fn lazy_updates_need_a_row_sparse_gradient() {
        let lazy = StorageRule::LazyUpdate(lazy_if_asked);
        assert!(lazy_update_rows(lazy, &[], &[Default, RowSparse]));
        assert!(!lazy_update_rows(lazy, &[("lazy_update", "False")], &[Default, RowSparse]));
        assert!(!lazy_update_rows(lazy, &[], &[Default, Default]));
        assert!(!lazy_update_rows(StorageRule::Dense, &[], &[Default, RowSparse]));
    }
}
