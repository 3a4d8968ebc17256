//! An iterator's keyword arguments, read as dmlc's parameter parser reads them: every value is a
//! string (MXNet's Python package passes `str(value)`), names the iterator does not declare are
//! ignored (the package passes `data_name` and `label_name`, and MXNet's own tests pass
//! arguments of other iterators), and a declared value that does not parse is an error naming the
//! parameter.

use crate::dtype::DType;
use crate::error::{Error, Result};
use std::collections::HashMap;

/// The keyword arguments of one `MXDataIterCreateIter` call.
#[derive(Clone, Debug, Default)]
pub struct Params {
    /// The last value given for each name.
    values: HashMap<String, String>,
}

fn invalid(name: &str, want: &str, value: &str) -> Error {
    Error::invalid(format!(
        "Invalid Parameter format for {name} expect {want} but value='{value}'"
    ))
}

impl Params {
    pub fn new<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Params {
        Params {
            values: pairs
                .into_iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
                .collect(),
        }
    }

    /// These arguments without `names`.
    pub fn without(&self, names: &[&str]) -> Params {
        let mut values = self.values.clone();
        for n in names {
            values.remove(*n);
        }
        Params { values }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|s| s.trim())
    }

    pub fn string(&self, name: &str, default: Option<&str>) -> Result<String> {
        match (self.values.get(name), default) {
            (Some(v), _) => Ok(v.clone()),
            (None, Some(d)) => Ok(d.to_owned()),
            (None, None) => Err(required(name)),
        }
    }

    pub fn int(&self, name: &str, default: Option<i64>) -> Result<i64> {
        match (self.get(name), default) {
            (Some(v), _) => parse_int(v).ok_or_else(|| invalid(name, "int", v)),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(required(name)),
        }
    }

    /// An int that must be at least `min`.
    pub fn int_at_least(&self, name: &str, default: Option<i64>, min: i64) -> Result<i64> {
        let v = self.int(name, default)?;
        if v < min {
            return Err(Error::invalid(format!(
                "value {v} for Parameter {name} should be greater equal to {min}"
            )));
        }
        Ok(v)
    }

    pub fn bool(&self, name: &str, default: bool) -> Result<bool> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        match v.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(invalid(name, "boolean", v)),
        }
    }

    /// A shape: `(3,)`, `(3, 2)`, `[3,2]` or `3`; every dimension positive.
    pub fn shape(&self, name: &str, default: Option<&[i64]>) -> Result<Vec<i64>> {
        let v = match (self.get(name), default) {
            (Some(v), _) => v,
            (None, Some(d)) => return Ok(d.to_vec()),
            (None, None) => return Err(required(name)),
        };
        let inner = v
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .or_else(|| v.strip_prefix('[').and_then(|s| s.strip_suffix(']')))
            .unwrap_or(v);
        let dims: Option<Vec<i64>> = inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.trim_end_matches('L').parse::<i64>().ok())
            .collect();
        match dims {
            Some(d) if !d.is_empty() && d.iter().all(|&x| x > 0) => Ok(d),
            _ => Err(invalid(
                name,
                "a shape of positive dimensions, e.g. (3,)",
                v,
            )),
        }
    }

    /// The prefetcher's `dtype`: `None` (keep the source's) or one of MXNet's names.
    pub fn dtype(&self, name: &str) -> Result<Option<DType>> {
        match self.get(name) {
            None | Some("None") => Ok(None),
            Some(v) => {
                let d = match v {
                    "float32" => DType::F32,
                    "float64" => DType::F64,
                    "float16" => DType::F16,
                    "bfloat16" => DType::BF16,
                    "int32" => DType::I32,
                    "int64" => DType::I64,
                    "int8" => DType::I8,
                    "uint8" => DType::U8,
                    _ => {
                        return Err(Error::invalid(format!(
                            "Invalid Input: '{v}', valid values are: {{None, 'bfloat16', \
                             'float16', 'float32', 'float64', 'int32', 'int64', 'int8', \
                             'uint8'}} for parameter {name}"
                        )));
                    }
                };
                Ok(Some(d))
            }
        }
    }

    /// `ctx`: `cpu` or `gpu` (only checked: MXNet's non-image iterators ignore it).
    pub fn check_ctx(&self) -> Result<()> {
        match self.get("ctx") {
            None | Some("cpu") | Some("gpu") => Ok(()),
            Some(v) => Err(Error::invalid(format!(
                "Invalid Input: '{v}', valid values are: {{'cpu', 'gpu'}} for parameter ctx"
            ))),
        }
    }
}

fn required(name: &str) -> Error {
    Error::invalid(format!("Required parameter {name} is not presented"))
}

/// An integer as dmlc reads one (decimal, optional sign; Python's `True`/`False` are 1/0).
fn parse_int(v: &str) -> Option<i64> {
    match v {
        "True" => Some(1),
        "False" => Some(0),
        _ => v.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_dmlc_reads_them() {
        let p = Params::new([
            ("batch_size", "32"),
            ("round_batch", "False"),
            ("data_shape", "(3, 2)"),
            ("label_shape", "[4]"),
            ("dtype", "int32"),
            ("bad", "x"),
            ("zero", "(0,)"),
        ]);
        assert_eq!(p.int("batch_size", None).unwrap(), 32);
        assert!(!p.bool("round_batch", true).unwrap());
        assert!(p.bool("shuffle", true).unwrap());
        assert_eq!(p.shape("data_shape", None).unwrap(), vec![3, 2]);
        assert_eq!(p.shape("label_shape", Some(&[1])).unwrap(), vec![4]);
        assert_eq!(p.dtype("dtype").unwrap(), Some(DType::I32));
        let e = p.int("bad", Some(1)).unwrap_err();
        assert!(e.message().contains("bad expect int but value='x'"), "{e}");
        assert!(p.shape("zero", None).is_err());
        let e = p.shape("data_csv_shape", None).unwrap_err();
        assert!(e.message().contains("Required parameter"), "{e}");
        let e = p.int_at_least("batch_size", None, 64).unwrap_err();
        assert!(e.message().contains("greater equal to 64"), "{e}");
    }
}
