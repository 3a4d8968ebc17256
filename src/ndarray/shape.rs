//! Shapes: element counts with overflow checks, and MXNet's reshape rules.

use crate::error::{Error, Result};
use smallvec::SmallVec;

/// Dimensions of an array (MXNet's `TShape` with `dim_t` = i64 entries).
pub type Shape = SmallVec<[i64; 6]>;

/// Most dimensions an array may have (the file format's limit too).
pub const MAX_NDIM: usize = 32;

/// Number of elements of `shape`; an error for negative dims or an overflowing product.
pub fn num_elements(shape: &[i64]) -> Result<usize> {
    if shape.len() > MAX_NDIM {
        return Err(Error::invalid(format!(
            "{} dimensions, at most {MAX_NDIM} are supported",
            shape.len()
        )));
    }
    shape.iter().try_fold(1usize, |acc, &d| {
        let d = usize::try_from(d)
            .map_err(|_| Error::invalid(format!("negative dimension {d} in shape {shape:?}")))?;
        acc.checked_mul(d)
            .ok_or_else(|| Error::invalid(format!("shape {shape:?} has too many elements")))
    })
}

/// Bytes of an array of `shape` with `elem_size`-byte elements, limited to `isize::MAX`.
pub fn num_bytes(shape: &[i64], elem_size: usize) -> Result<usize> {
    num_elements(shape)?
        .checked_mul(elem_size)
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::invalid(format!("shape {shape:?} is too large to allocate")))
}

/// `MXNDArrayReshape`'s rule: `-1` (at most once) is inferred, `0` copies the source dimension at
/// the same position; other values must be positive.
pub fn reshape_simple(src: &[i64], dims: &[i64]) -> Result<Shape> {
    let mut out = Shape::with_capacity(dims.len());
    let mut infer = None;
    let mut known: usize = 1;
    for (i, &d) in dims.iter().enumerate() {
        let v = match d {
            -1 => {
                if infer.replace(i).is_some() {
                    return Err(Error::invalid(format!(
                        "Invalid new shape {dims:?}: more than one dimensions are -1"
                    )));
                }
                out.push(1);
                continue;
            }
            0 => *src.get(i).ok_or_else(|| {
                Error::invalid(format!(
                    "Invalid new shape {dims:?}: 0 dimension exceeds original shape {src:?}"
                ))
            })?,
            d if d > 0 => d,
            d => {
                return Err(Error::invalid(format!(
                    "Invalid new shape {dims:?}: dimension {d} is negative"
                )));
            }
        };
        known = known
            .checked_mul(v as usize)
            .ok_or_else(|| Error::invalid(format!("new shape {dims:?} has too many elements")))?;
        out.push(v);
    }
    if let Some(i) = infer {
        let total = num_elements(src)?;
        out[i] = total.checked_div(known).unwrap_or(0) as i64;
    }
    Ok(out)
}

/// The reshape operator's full rule (`MXNDArrayReshape64`): `0` copies a dim, `-1` infers one,
/// `-2` copies all remaining dims, `-3` merges two dims, `-4 a b` splits one dim into `a*b` (one of
/// them may be -1); with `reverse` the codes are matched right to left.
pub fn reshape_codes(src: &[i64], codes: &[i64], reverse: bool) -> Result<Shape> {
    let (src, codes): (Vec<i64>, Vec<i64>) = if reverse {
        (
            src.iter().rev().copied().collect(),
            codes.iter().rev().copied().collect(),
        )
    } else {
        (src.to_vec(), codes.to_vec())
    };
    let bad = |msg: String| {
        Err(Error::invalid(format!(
            "Invalid reshape {codes:?} of {src:?}: {msg}"
        )))
    };
    let mut out = Shape::new();
    let mut si = 0usize;
    let mut infer: Option<usize> = None;
    let mut i = 0usize;
    let take = |si: &mut usize| -> Option<i64> {
        let v = src.get(*si).copied();
        *si += 1;
        v
    };
    while i < codes.len() {
        match codes[i] {
            0 => match take(&mut si) {
                Some(v) => out.push(v),
                None => return bad("0 refers past the last input dimension".into()),
            },
            -1 => {
                if infer.is_some() {
                    return bad("One and only one dim can be inferred".into());
                }
                infer = Some(out.len());
                out.push(1);
                si += 1;
            }
            -2 => {
                while let Some(v) = src.get(si) {
                    out.push(*v);
                    si += 1;
                }
            }
            -3 => match (take(&mut si), take(&mut si)) {
                (Some(a), Some(b)) => out.push(
                    a.checked_mul(b)
                        .ok_or_else(|| Error::invalid("reshape overflow"))?,
                ),
                _ => return bad("-3 needs two input dimensions".into()),
            },
            -4 => {
                if i + 2 >= codes.len() {
                    return bad("-4 must be followed by two dimensions".into());
                }
                let d0 = match take(&mut si) {
                    Some(v) => v,
                    None => return bad("-4 refers past the last input dimension".into()),
                };
                let (mut d1, mut d2) = (codes[i + 1], codes[i + 2]);
                i += 2;
                if d1 == -1 && d2 == -1 {
                    return bad("Split dims cannot both be -1".into());
                }
                if d1 == -1 && d2 > 0 {
                    d1 = d0 / d2;
                }
                if d2 == -1 && d1 > 0 {
                    d2 = d0 / d1;
                }
                if (d0 != 0 && (d1 <= 0 || d2 <= 0)) || d1.checked_mul(d2) != Some(d0) {
                    return bad(format!(
                        "Split dims {d1}, {d2} do not divide original dim {d0}"
                    ));
                }
                out.push(d1);
                out.push(d2);
            }
            d if d > 0 => {
                out.push(d);
                si += 1;
            }
            d => return bad(format!("Invalid shape value {d}")),
        }
        i += 1;
    }
    if let Some(k) = infer {
        let total = num_elements(&src)?;
        let known = num_elements(&out)?;
        out[k] = if total == 0 || known == 0 {
            0
        } else {
            (total / known) as i64
        };
    }
    if reverse {
        out.reverse();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(num_elements(&[]).unwrap(), 1);
        assert_eq!(num_elements(&[2, 0, 3]).unwrap(), 0);
        assert!(num_elements(&[-2, 3]).is_err());
        assert!(num_elements(&[i64::MAX, 3]).is_err());
        assert!(num_bytes(&[1 << 62], 4).is_err());
    }

    #[test]
    fn simple_reshape() {
        assert_eq!(&reshape_simple(&[2, 3, 4], &[-1, 4]).unwrap()[..], &[6, 4]);
        assert_eq!(&reshape_simple(&[2, 3, 4], &[0, -1]).unwrap()[..], &[2, 12]);
        assert!(reshape_simple(&[2, 3], &[-1, -1]).is_err());
        assert!(reshape_simple(&[2], &[1, 0]).is_err());
    }

    #[test]
    fn operator_codes() {
        let s = [2, 3, 4];
        let r = |c: &[i64], rev| reshape_codes(&s, c, rev).map(|v| v.to_vec());
        assert_eq!(r(&[4, 0, 2], false).unwrap(), vec![4, 3, 2]);
        assert_eq!(r(&[2, -1], false).unwrap(), vec![2, 12]);
        assert_eq!(r(&[-2], false).unwrap(), vec![2, 3, 4]);
        assert_eq!(r(&[2, -2], false).unwrap(), vec![2, 3, 4]);
        assert_eq!(r(&[-3, 4], false).unwrap(), vec![6, 4]);
        assert_eq!(r(&[-4, 1, 2, -2], false).unwrap(), vec![1, 2, 3, 4]);
        assert_eq!(r(&[2, -4, -1, 3, -2], false).unwrap(), vec![2, 1, 3, 4]);
        assert_eq!(
            reshape_codes(&[10, 5, 4], &[-1, 0], true).unwrap().to_vec(),
            vec![50, 4]
        );
        assert_eq!(
            reshape_codes(&[10, 5, 4], &[-1, 0], false)
                .unwrap()
                .to_vec(),
            vec![40, 5]
        );
        assert!(r(&[-1, -1], false).is_err());
        assert!(r(&[-4, -1, -1], false).is_err());
        assert!(r(&[-4, 5, 2, -2], false).is_err());
        assert!(r(&[-5], false).is_err());
    }
}
