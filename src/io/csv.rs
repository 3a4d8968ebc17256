//! `CSVIter`: rows of numbers, each reshaped to `data_shape` (and `label_shape` from
//! `label_csv`, or a 0 label), batched by [`BatchLoader`]. Fields are read as dmlc's CSV parser
//! reads them: `strtof` for float32, `strtoll` with base 0 (so `0x10` and `010` are 16 and 8) for
//! int32 and int64, a field that holds no number is skipped, and a row must then hold exactly
//! one instance's values. Files are read in blocks of whole lines, each block parsed on the
//! intra-op pool.

use super::batch::{BatchLoader, DenseSource, elements};
use super::params::Params;
use super::text::{LineInput, lines, split_lines};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The longest prefix of `s` that `strtod` reads as a number, after leading whitespace.
fn float_prefix(s: &[u8]) -> Option<&str> {
    let start = s.iter().position(|c| !c.is_ascii_whitespace())?;
    let s = &s[start..];
    let mut i = usize::from(matches!(s.first(), Some(b'+' | b'-')));
    let word =
        |w: &str| s.len() >= i + w.len() && s[i..i + w.len()].eq_ignore_ascii_case(w.as_bytes());
    if word("infinity") {
        i += 8;
    } else if word("inf") || word("nan") {
        i += 3;
    } else {
        let digits = |i: &mut usize| {
            let from = *i;
            while *i < s.len() && s[*i].is_ascii_digit() {
                *i += 1;
            }
            *i - from
        };
        let mut n = digits(&mut i);
        if s.get(i) == Some(&b'.') {
            i += 1;
            n += digits(&mut i);
        }
        if n == 0 {
            return None;
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(s.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if digits(&mut j) > 0 {
                i = j;
            }
        }
    }
    std::str::from_utf8(&s[..i]).ok()
}

fn parse_f32(field: &[u8]) -> Option<f32> {
    if let Some(v) = parse_f32_fast(field) {
        return Some(v);
    }
    // Rust reads what strtof reads (decimal forms, "inf", "infinity", "nan" in any case, with
    // a sign), correctly rounded as glibc does
    float_prefix(field)?.parse::<f32>().ok()
}

/// Short decimals (at most 7 significant digits, exponent within 10): the value is an exact
/// float32 integer times or over an exact power of ten, so one float32 operation rounds it
/// correctly (Clinger's fast path). `None` sends anything else to the full parser.
fn parse_f32_fast(field: &[u8]) -> Option<f32> {
    const POW10: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];
    let mut i = field.iter().position(|c| !c.is_ascii_whitespace())?;
    let neg = match field[i] {
        b'-' => {
            i += 1;
            true
        }
        b'+' => {
            i += 1;
            false
        }
        _ => false,
    };
    let (mut m, mut digits, mut scale) = (0u32, 0u32, 0i32);
    let mut seen = false;
    while i < field.len() && field[i].is_ascii_digit() {
        seen = true;
        if m != 0 || field[i] != b'0' {
            digits += 1;
        }
        m = m.wrapping_mul(10).wrapping_add((field[i] - b'0') as u32);
        i += 1;
    }
    if i < field.len() && field[i] == b'.' {
        i += 1;
        while i < field.len() && field[i].is_ascii_digit() {
            seen = true;
            if m != 0 || field[i] != b'0' {
                digits += 1;
            }
            m = m.wrapping_mul(10).wrapping_add((field[i] - b'0') as u32);
            scale -= 1;
            i += 1;
        }
    }
    if !seen || digits > 7 {
        return None;
    }
    if i < field.len() && (field[i] | 0x20) == b'e' {
        return None; // exponents: the full parser
    }
    // what follows the number must not continue it (strtof stops there too)
    if i < field.len() && field[i].is_ascii_alphabetic() {
        return None;
    }
    let v = m as f32;
    let v = if scale == 0 {
        v
    } else {
        let e = (-scale) as usize;
        if e > 10 {
            return None;
        }
        v / POW10[e]
    };
    Some(if neg { -v } else { v })
}

/// `strtoll(field, &end, 0)`: `None` when no digit is read; out-of-range values saturate.
fn parse_i64(field: &[u8]) -> Option<i64> {
    let start = field.iter().position(|c| !c.is_ascii_whitespace())?;
    let s = &field[start..];
    let mut i = 0;
    let neg = match s.first() {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let hex = s.len() > i + 2
        && s[i] == b'0'
        && (s[i + 1] | 0x20) == b'x'
        && s[i + 2].is_ascii_hexdigit();
    let (radix, from) = if hex {
        (16, i + 2)
    } else if s.get(i) == Some(&b'0') {
        (8, i)
    } else {
        (10, i)
    };
    let mut acc: i128 = 0;
    let mut n = 0;
    for &c in &s[from..] {
        let Some(d) = (c as char).to_digit(radix) else {
            break;
        };
        acc = (acc * radix as i128 + d as i128).min(i64::MAX as i128 + 1);
        n += 1;
    }
    if n == 0 {
        return None;
    }
    let v = if neg { -acc } else { acc };
    Some(v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

/// Appends the values of one line to `out` as `dtype`; returns how many there were.
fn parse_line(line: &[u8], dtype: DType, out: &mut Vec<u8>) -> usize {
    let mut n = 0;
    for field in line.split(|&c| c == b',') {
        match dtype {
            DType::I32 => {
                if let Some(v) = parse_i64(field) {
                    out.extend_from_slice(&(v as i32).to_le_bytes());
                    n += 1;
                }
            }
            DType::I64 => {
                if let Some(v) = parse_i64(field) {
                    out.extend_from_slice(&v.to_le_bytes());
                    n += 1;
                }
            }
            _ => {
                if let Some(v) = parse_f32(field) {
                    out.extend_from_slice(&v.to_le_bytes());
                    n += 1;
                }
            }
        }
    }
    n
}

/// One CSV file (or directory) read row by row.
struct Column {
    input: LineInput,
    what: &'static str,
    shape: Vec<i64>,
    unit: usize,
    dtype: DType,
    /// The current block's rows, `unit` values each.
    rows: Vec<u8>,
    nrows: usize,
    next: usize,
    /// Rows before the current block.
    rows_before: usize,
}

impl Column {
    fn new(uri: &str, what: &'static str, shape: Vec<i64>, dtype: DType) -> Result<Column> {
        Ok(Column {
            input: LineInput::open(uri, 0, 1)?,
            what,
            unit: elements(&shape)?,
            shape,
            dtype,
            rows: Vec::new(),
            nrows: 0,
            next: 0,
            rows_before: 0,
        })
    }

    fn rewind(&mut self) {
        self.input.rewind();
        self.rows.clear();
        self.nrows = 0;
        self.next = 0;
        self.rows_before = 0;
    }

    /// Parses the next block; false at the end of the file.
    fn load_block(&mut self) -> Result<bool> {
        self.rows_before += self.nrows;
        self.rows.clear();
        self.nrows = 0;
        self.next = 0;
        let Some(block) = self.input.next_block()? else {
            return Ok(false);
        };
        let threads = if block.len() >= 256 << 10 {
            crate::parallel::max_threads()
        } else {
            1
        };
        let pieces = split_lines(&block, threads);
        type Parsed = std::result::Result<(Vec<u8>, usize), (usize, usize)>;
        let mut parsed: Vec<Parsed> = vec![Ok((Vec::new(), 0)); pieces.len()];
        let (unit, dtype) = (self.unit, self.dtype);
        crate::parallel::for_each_mut(&mut parsed, threads, |k, slot| {
            let mut out = Vec::with_capacity(pieces[k].len() * 2);
            let mut n = 0;
            for line in lines(pieces[k]) {
                let got = parse_line(line, dtype, &mut out);
                if got != unit {
                    *slot = Err((n, got));
                    return;
                }
                n += 1;
            }
            *slot = Ok((out, n));
        });
        for (k, p) in parsed.into_iter().enumerate() {
            match p {
                Ok((bytes, n)) => {
                    self.rows.extend_from_slice(&bytes);
                    self.nrows += n;
                }
                Err((row, got)) => {
                    let before: usize = pieces[..k].iter().map(|p| lines(p).count()).sum();
                    let shape: Vec<String> = self.shape.iter().map(i64::to_string).collect();
                    let comma = if shape.len() == 1 { "," } else { "" };
                    return Err(Error::format(format!(
                        "The data size in CSV do not match size of shape: specified \
                         shape=({}{comma}), the csv row-length={got} ({} {}, row {})",
                        shape.join(", "),
                        self.what,
                        self.input.path(),
                        self.rows_before + before + row + 1
                    )));
                }
            }
        }
        Ok(true)
    }

    /// Copies the next row into `out`; false at the end.
    fn next_row(&mut self, out: &mut [u8]) -> Result<bool> {
        while self.next >= self.nrows {
            if !self.load_block()? {
                return Ok(false);
            }
        }
        let w = out.len();
        out.copy_from_slice(&self.rows[self.next * w..(self.next + 1) * w]);
        self.next += 1;
        Ok(true)
    }
}

pub struct CsvSource {
    data: Column,
    label: Option<Column>,
    label_shape: Vec<i64>,
    dtype: DType,
    counter: u64,
    end: bool,
}

impl CsvSource {
    pub fn new(p: &Params) -> Result<CsvSource> {
        let dtype = match p.get("dtype") {
            None | Some("float32") => DType::F32,
            Some("int32") => DType::I32,
            Some("int64") => DType::I64,
            Some(v) => return Err(Error::invalid(format!("{v} is not supported for CSVIter"))),
        };
        let data_csv = p.string("data_csv", None)?;
        let data_shape = p.shape("data_shape", None)?;
        let label_csv = p.string("label_csv", Some("NULL"))?;
        let label_shape = p.shape("label_shape", Some(&[1]))?;
        let label = if label_csv == "NULL" {
            None
        } else {
            Some(Column::new(
                &label_csv,
                "label_csv",
                label_shape.clone(),
                dtype,
            )?)
        };
        Ok(CsvSource {
            data: Column::new(&data_csv, "data_csv", data_shape, dtype)?,
            label_shape: if label.is_some() {
                label_shape
            } else {
                vec![1]
            },
            label,
            dtype,
            counter: 0,
            end: false,
        })
    }
}

impl DenseSource for CsvSource {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn data_shape(&self) -> &[i64] {
        &self.data.shape
    }
    fn label_shape(&self) -> &[i64] {
        &self.label_shape
    }

    fn next_into(&mut self, data: &mut [u8], label: &mut [u8]) -> Result<Option<u64>> {
        if self.end || !self.data.next_row(data)? {
            self.end = true;
            return Ok(None);
        }
        match &mut self.label {
            Some(l) => {
                if !l.next_row(label)? {
                    return Err(Error::format(format!(
                        "label_csv {} has fewer rows than data_csv {} (no label for row {})",
                        l.input.path(),
                        self.data.input.path(),
                        self.counter + 1
                    )));
                }
            }
            None => label.fill(0),
        }
        self.counter += 1;
        Ok(Some(self.counter - 1))
    }

    fn rewind(&mut self) -> Result<()> {
        self.data.rewind();
        if let Some(l) = &mut self.label {
            l.rewind();
        }
        self.counter = 0;
        self.end = false;
        Ok(())
    }
}

/// A `CSVIter` loader from its parameters.
pub fn loader(p: &Params, batch_size: usize, round_batch: bool) -> Result<BatchLoader<CsvSource>> {
    BatchLoader::new(CsvSource::new(p)?, batch_size, round_batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_as_strtof_and_strtoll_read_them() {
        let f = |s: &str| parse_f32(s.as_bytes());
        assert_eq!(f(" 1.5"), Some(1.5));
        assert_eq!(f("-2e3x"), Some(-2000.0));
        assert_eq!(f("1e"), Some(1.0));
        assert_eq!(f(".5"), Some(0.5));
        assert_eq!(f("-inf"), Some(f32::NEG_INFINITY));
        assert!(f("NaN").unwrap().is_nan());
        assert_eq!(f(""), None);
        assert_eq!(f("abc"), None);
        assert_eq!(f("0.1"), Some(0.1f32));
        let i = |s: &str| parse_i64(s.as_bytes());
        assert_eq!(i("0x10"), Some(16));
        assert_eq!(i("010"), Some(8));
        assert_eq!(i("-7.9"), Some(-7));
        assert_eq!(i("99999999999999999999"), Some(i64::MAX));
        assert_eq!(i("x"), None);
        assert_eq!(i("0"), Some(0));
        let mut out = Vec::new();
        assert_eq!(parse_line(b"1,,3, ", DType::F32, &mut out), 2);
        assert_eq!(parse_line(b"2147483648", DType::I32, &mut out), 1);
        assert_eq!(&out[8..], &(i32::MIN).to_le_bytes());
    }

    #[test]
    fn rows_with_the_wrong_field_count_name_the_row() {
        let d = std::env::temp_dir().join(format!("mxrt-csv-{}.csv", std::process::id()));
        std::fs::write(&d, "1,2,3\n4,5,6\n7,8\n").unwrap();
        let p = Params::new([("data_csv", d.to_str().unwrap()), ("data_shape", "(3,)")]);
        let mut s = CsvSource::new(&p).unwrap();
        let (mut data, mut label) = ([0u8; 12], [0u8; 4]);
        let e = s.next_into(&mut data, &mut label).unwrap_err();
        assert!(
            e.message().contains("row-length=2") && e.message().contains("row 3"),
            "{e}"
        );
        std::fs::remove_file(&d).unwrap();
    }
}
