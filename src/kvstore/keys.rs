//! Keys: int or string (one kind per store), the string-to-id table, and grouping of the values
//! given for equal keys.

use crate::error::{Error, Result};
use std::collections::HashMap;

/// The kind of keys a store uses; fixed by its first call with keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Int,
    Str,
}

/// The keys of one call.
#[derive(Clone, Copy, Debug)]
pub enum Keys<'a> {
    Int(&'a [i32]),
    Str(&'a [&'a str]),
}

impl Keys<'_> {
    pub fn len(&self) -> usize {
        match self {
            Keys::Int(k) => k.len(),
            Keys::Str(k) => k.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn kind(&self) -> KeyKind {
        match self {
            Keys::Int(_) => KeyKind::Int,
            Keys::Str(_) => KeyKind::Str,
        }
    }
    /// The i-th key as written in messages.
    pub fn display(&self, i: usize) -> String {
        match self {
            Keys::Int(k) => k[i].to_string(),
            Keys::Str(k) => k[i].to_owned(),
        }
    }
}

/// A key as the updater sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRef<'a> {
    Int(i32),
    Str(&'a str),
}

/// The store's key bookkeeping. String keys get ids 0, 1, 2, ... in the order they are
/// initialised, as in MXNet; values are stored by id.
#[derive(Default, Debug)]
pub(crate) struct KeyTable {
    kind: Option<KeyKind>,
    str_to_id: HashMap<String, i32>,
    id_to_str: Vec<String>,
}

impl KeyTable {
    pub(crate) fn kind(&self) -> Option<KeyKind> {
        self.kind
    }

    /// Fails if `keys` are of the other kind than the store's; fixes the kind on the first call
    /// with keys.
    pub(crate) fn check_kind(&mut self, keys: &Keys<'_>) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        match self.kind {
            None => {
                self.kind = Some(keys.kind());
                Ok(())
            }
            Some(k) if k == keys.kind() => Ok(()),
            Some(k) => Err(Error::invalid(format!(
                "Mixed key types are not allowed: this store uses {} keys, the call passed {} keys",
                kind_name(k),
                kind_name(keys.kind())
            ))),
        }
    }

    /// The ids of existing keys. `missing` formats the error for a key that was never
    /// initialised (string keys unknown to the table are missing too).
    pub(crate) fn lookup(&self, keys: &Keys<'_>, exists: impl Fn(i32) -> bool) -> Result<Vec<i32>> {
        let mut ids = Vec::with_capacity(keys.len());
        for i in 0..keys.len() {
            let id = match keys {
                Keys::Int(k) => Some(k[i]),
                Keys::Str(k) => self.str_to_id.get(k[i]).copied(),
            };
            match id {
                Some(id) if exists(id) => ids.push(id),
                _ => return Err(missing_key(keys, i)),
            }
        }
        Ok(ids)
    }

    /// Ids for the keys of an Init, giving new string keys new ids (committed only by
    /// [`commit_names`](Self::commit_names)). Returns the ids and, for string keys, the names.
    pub(crate) fn plan_init(&self, keys: &Keys<'_>) -> Vec<i32> {
        match keys {
            Keys::Int(k) => k.to_vec(),
            Keys::Str(k) => {
                let mut fresh: HashMap<&str, i32> = HashMap::new();
                let mut next = self.id_to_str.len() as i32;
                k.iter()
                    .map(|s| {
                        if let Some(&id) = self.str_to_id.get(*s) {
                            return id;
                        }
                        *fresh.entry(s).or_insert_with(|| {
                            next += 1;
                            next - 1
                        })
                    })
                    .collect()
            }
        }
    }

    /// Ids for the keys of an Init after checking the call: keys of the store's kind, none
    /// initialised before (`exists`) or given twice. New names are committed only by
    /// [`commit_names`](Self::commit_names).
    pub(crate) fn plan_new_keys(
        &mut self,
        keys: &Keys<'_>,
        exists: impl Fn(i32) -> bool,
    ) -> Result<Vec<i32>> {
        self.check_kind(keys)?;
        let ids = self.plan_init(keys);
        for (i, &id) in ids.iter().enumerate() {
            if exists(id) || ids[..i].contains(&id) {
                return Err(Error::invalid(format!(
                    "duplicate init of key {}. Please double check if you called kv.init or \
                     kv.broadcast with this key multiple times",
                    keys.display(i)
                )));
            }
        }
        Ok(ids)
    }

    /// Records the names of string keys planned by [`plan_init`](Self::plan_init).
    pub(crate) fn commit_names(&mut self, keys: &Keys<'_>) {
        if let Keys::Str(k) = keys {
            for s in k.iter() {
                if !self.str_to_id.contains_key(*s) {
                    self.str_to_id
                        .insert((*s).to_owned(), self.id_to_str.len() as i32);
                    self.id_to_str.push((*s).to_owned());
                }
            }
        }
    }

    /// The string of a string key's id.
    pub(crate) fn name(&self, id: i32) -> Option<&str> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.id_to_str.get(i))
            .map(String::as_str)
    }
}

fn kind_name(k: KeyKind) -> &'static str {
    match k {
        KeyKind::Int => "int",
        KeyKind::Str => "string",
    }
}

/// The error for the i-th key when it was never initialised (MXNet's wording per key kind).
pub(crate) fn missing_key(keys: &Keys<'_>, i: usize) -> Error {
    match keys {
        Keys::Int(k) => Error::invalid(format!("key {} has not been inited", k[i])),
        Keys::Str(k) => Error::invalid(format!("key {} doesn't exist. Did you init?", k[i])),
    }
}

/// Groups positions by key: the unique keys in ascending order, each with the positions (in call
/// order) of the values given for it.
pub(crate) fn group(ids: &[i32]) -> Vec<(i32, Vec<usize>)> {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    order.sort_by_key(|&i| ids[i]);
    let mut groups: Vec<(i32, Vec<usize>)> = Vec::new();
    for i in order {
        match groups.last_mut() {
            Some((k, list)) if *k == ids[i] => list.push(i),
            _ => groups.push((ids[i], vec![i])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_sorts_keys_and_keeps_call_order() {
        assert_eq!(
            group(&[5, 1, 5, 3, 1]),
            vec![(1, vec![1, 4]), (3, vec![3]), (5, vec![0, 2])]
        );
        assert!(group(&[]).is_empty());
    }

    #[test]
    fn string_ids_and_kinds() {
        let mut t = KeyTable::default();
        let keys = Keys::Str(&["b", "a", "b"]);
        t.check_kind(&keys).unwrap();
        assert_eq!(t.plan_init(&keys), vec![0, 1, 0]);
        t.commit_names(&keys);
        assert_eq!(t.name(1), Some("a"));
        assert_eq!(t.plan_init(&Keys::Str(&["c", "a"])), vec![2, 1]);
        let e = t.check_kind(&Keys::Int(&[1])).unwrap_err();
        assert!(
            e.message().starts_with("Mixed key types are not allowed"),
            "{e}"
        );
        let e = t.lookup(&Keys::Str(&["a", "zz"]), |_| true).unwrap_err();
        assert_eq!(e.message(), "key zz doesn't exist. Did you init?");
    }
}
