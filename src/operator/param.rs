//! Operator parameters as MXNet's front ends pass them: every value a string in dmlc's syntax
//! (Python sends `str(value)`): `(2, 3)`, `[0.1, 0.1]`, `(0, None)`, `None`, `True`, `1e-3`,
//! `float16`, `cpu(0)`.
//!
//! [`Params`] holds one invoke's key/value pairs; an op takes the parameters it knows with the
//! typed getters and then calls [`Params::finish`], which refuses any it did not take. Every error
//! names the op and the parameter.

use crate::context::{Context, DeviceType};
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::cell::Cell;

/// The parameters of one invoke.
pub struct Params<'a> {
    op: &'a str,
    pairs: Vec<(&'a str, &'a str)>,
    taken: Vec<Cell<bool>>,
}

impl<'a> Params<'a> {
    /// The pairs given to `op`; a key given twice is an error.
    pub fn new(op: &'a str, pairs: Vec<(&'a str, &'a str)>) -> Result<Self> {
        for (i, (k, _)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(seen, _)| seen == k) {
                return Err(Error::invalid(format!(
                    "operator {op}: parameter '{k}' given twice"
                )));
            }
        }
        let taken = pairs.iter().map(|_| Cell::new(false)).collect();
        Ok(Params { op, pairs, taken })
    }

    /// The raw value of `key`, marking it taken.
    pub fn raw(&self, key: &str) -> Option<&'a str> {
        let i = self.pairs.iter().position(|(k, _)| *k == key)?;
        self.taken[i].set(true);
        Some(self.pairs[i].1)
    }

    /// Every pair, all marked taken (an op whose parameters are free-form: `Custom` hands them
    /// to the custom operator's creator).
    pub fn take_all(&self) -> Vec<(&'a str, &'a str)> {
        self.taken.iter().for_each(|t| t.set(true));
        self.pairs.clone()
    }

    /// `key` parsed with `parse`, or `None` when absent or given as `None`.
    pub fn optional<T>(
        &self,
        key: &str,
        parse: fn(&str) -> Option<T>,
        what: &str,
    ) -> Result<Option<T>> {
        match self.raw(key).map(str::trim) {
            None | Some("None") => Ok(None),
            Some(v) => parse(v).map(Some).ok_or_else(|| {
                Error::invalid(format!(
                    "operator {}: parameter '{key}' must be {what}, got '{v}'",
                    self.op
                ))
            }),
        }
    }

    /// `key` parsed with `parse`, or `default` when absent or `None`.
    pub fn or<T>(
        &self,
        key: &str,
        parse: fn(&str) -> Option<T>,
        what: &str,
        default: T,
    ) -> Result<T> {
        Ok(self.optional(key, parse, what)?.unwrap_or(default))
    }

    /// `key` parsed with `parse`; absent is an error.
    pub fn required<T>(&self, key: &str, parse: fn(&str) -> Option<T>, what: &str) -> Result<T> {
        self.optional(key, parse, what)?.ok_or_else(|| {
            Error::invalid(format!(
                "operator {}: required parameter '{key}' ({what}) is missing",
                self.op
            ))
        })
    }

    /// Refuses the parameters no getter took, naming the first. Hidden attributes (`__x__`,
    /// such as the `__layout__` Gluon's RNN layers give `zeros`) are ignored, as dmlc's
    /// parameter parser ignores them.
    pub fn finish(&self) -> Result<()> {
        let hidden = |k: &str| k.len() > 4 && k.starts_with("__") && k.ends_with("__");
        match self
            .pairs
            .iter()
            .zip(&self.taken)
            .find(|((k, _), t)| !t.get() && !hidden(k))
        {
            Some(((k, _), _)) => Err(Error::invalid(format!(
                "operator {}: unknown parameter '{k}'",
                self.op
            ))),
            None => Ok(()),
        }
    }
}

/// `True`/`False` (Python), `true`/`false`, `1`/`0`.
pub fn boolean(s: &str) -> Option<bool> {
    match s {
        "True" | "true" | "1" => Some(true),
        "False" | "false" | "0" => Some(false),
        _ => None,
    }
}

/// An integer; a float with no fraction (`2.0`) counts, as in dmlc.
pub fn int(s: &str) -> Option<i64> {
    s.parse().ok().or_else(|| {
        let f: f64 = s.parse().ok()?;
        (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
    })
}

/// A float, including `inf`, `-inf` and `nan` in any case.
pub fn float(s: &str) -> Option<f64> {
    s.parse().ok()
}

/// The items of a tuple or list: `(a, b)`, `[a, b]`, `(a,)`, `()`; a bare value is a one-item
/// tuple, as dmlc reads `5` for a shape.
fn items(s: &str) -> Option<Vec<&str>> {
    let s = s.trim();
    let inner = match (s.chars().next(), s.chars().last()) {
        (Some('('), Some(')')) | (Some('['), Some(']')) => &s[1..s.len() - 1],
        _ if !s.is_empty() && !s.contains([',', '(', ')', '[', ']']) => return Some(vec![s]),
        _ => return None,
    };
    let inner = inner.trim();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    let inner = inner.strip_suffix(',').unwrap_or(inner);
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    parts.iter().all(|p| !p.is_empty()).then_some(parts)
}

/// A shape: a tuple of integers (`-1` and `0` are allowed; ops give them meaning).
pub fn shape(s: &str) -> Option<Vec<i64>> {
    items(s)?.into_iter().map(int).collect()
}

/// A tuple of optional integers, as slicing's `begin`/`end`: `(0, None)`.
pub fn optional_ints(s: &str) -> Option<Vec<Option<i64>>> {
    items(s)?
        .into_iter()
        .map(|p| {
            if p == "None" {
                Some(None)
            } else {
                int(p).map(Some)
            }
        })
        .collect()
}

/// A tuple of floats: `[0.1, 0.1]`.
pub fn floats(s: &str) -> Option<Vec<f64>> {
    items(s)?.into_iter().map(float).collect()
}

/// A dtype by numpy name (`float32`, `int64`, `bool`, ...), quoted or not.
pub fn dtype(s: &str) -> Option<DType> {
    let s = s.trim_matches(|c| c == '\'' || c == '"');
    DType::ALL.into_iter().find(|d| d.name() == s)
}

/// A context as MXNet prints one: `cpu(0)`, `gpu(1)`, `cpu_pinned(0)`, `cpu_shared(0)`.
pub fn context(s: &str) -> Option<Context> {
    let (kind, rest) = s.trim().split_once('(')?;
    let id: i32 = rest.strip_suffix(')')?.trim().parse().ok()?;
    let dev = [
        DeviceType::Cpu,
        DeviceType::Gpu,
        DeviceType::CpuPinned,
        DeviceType::CpuShared,
    ]
    .into_iter()
    .find(|d| d.name() == kind)?;
    Context::from_codes(dev.code(), id).ok()
}

/// A string choice (MXNet's enum parameters): the value without quotes.
pub fn choice(s: &str) -> Option<String> {
    Some(s.trim_matches(|c| c == '\'' || c == '"').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_in_the_syntax_python_sends() {
        assert_eq!(shape("(2, 3)"), Some(vec![2, 3]));
        assert_eq!(shape("(2,)"), Some(vec![2]));
        assert_eq!(shape("[4, -1, 0]"), Some(vec![4, -1, 0]));
        assert_eq!(shape("()"), Some(vec![]));
        assert_eq!(shape("5"), Some(vec![5]));
        assert_eq!(shape("(2, x)"), None);
        assert_eq!(shape("(2,,3)"), None);
        assert_eq!(shape("(2, 3"), None);
        assert_eq!(optional_ints("(0, None)"), Some(vec![Some(0), None]));
        assert_eq!(floats("[0.1, 0.1]"), Some(vec![0.1, 0.1]));
        assert_eq!(boolean("True"), Some(true));
        assert_eq!(boolean("0"), Some(false));
        assert_eq!(boolean("yes"), None);
        assert_eq!(int("2.0"), Some(2));
        assert_eq!(int("2.5"), None);
        assert_eq!(float("1e-3"), Some(0.001));
        assert!(float("-inf").is_some_and(|f| f.is_infinite() && f < 0.0));
        assert_eq!(dtype("float16"), Some(DType::F16));
        assert_eq!(dtype("'int64'"), Some(DType::I64));
        assert_eq!(dtype("float128"), None);
        assert_eq!(context("cpu(0)"), Some(Context::cpu(0)));
        assert_eq!(context("cpu_shared(0)"), Some(Context::cpu_shared(0)));
        assert_eq!(context("tpu(0)"), None);
        assert_eq!(choice("'relu'").as_deref(), Some("relu"));
    }

    #[test]
    fn params_are_typed_checked_and_named_in_errors() {
        let p = Params::new(
            "_zeros",
            vec![("shape", "(2, 3)"), ("dtype", "None"), ("ctx", "cpu(0)")],
        )
        .unwrap();
        assert_eq!(p.required("shape", shape, "a shape").unwrap(), vec![2, 3]);
        assert_eq!(
            p.or("dtype", dtype, "a dtype", DType::F32).unwrap(),
            DType::F32
        );
        p.finish().expect_err("ctx not taken yet");
        assert_eq!(
            p.optional("ctx", context, "a context").unwrap(),
            Some(Context::cpu(0))
        );
        p.finish().unwrap();

        let p = Params::new("_zeros", vec![("shape", "(2, a)"), ("bogus", "1")]).unwrap();
        let e = p
            .required("shape", shape, "a shape")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("operator _zeros: parameter 'shape' must be a shape, got '(2, a)'"),
            "{e}"
        );
        let e = p
            .required("axis", int, "an integer")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("required parameter 'axis' (an integer) is missing"),
            "{e}"
        );
        let e = p.finish().unwrap_err().to_string();
        assert!(
            e.contains("operator _zeros: unknown parameter 'bogus'"),
            "{e}"
        );
        let e = Params::new("op", vec![("a", "1"), ("a", "2")])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("parameter 'a' given twice"), "{e}");
    }
}
