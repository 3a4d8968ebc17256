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

/// Parses the lines of `piece` into `out` (cleared first), `unit` values each; the rows read,
/// or the failing row's index in the piece and its value count.
fn parse_piece(
    piece: &[u8],
    unit: usize,
    dtype: DType,
    out: &mut Vec<u8>,
) -> std::result::Result<usize, (usize, usize)> {
    out.clear();
    let mut n = 0;
    if dtype == DType::F32 {
        let mut i = 0;
        while i < piece.len() {
            // empty lines are skipped, as dmlc does
            if matches!(piece[i], b'\n' | b'\r') {
                i += 1;
                continue;
            }
            out.reserve(unit * 4);
            let (got, end) = parse_line_f32(piece, i, out);
            if got != unit {
                return Err((n, got));
            }
            n += 1;
            i = end;
        }
        return Ok(n);
    }
    for line in lines(piece) {
        let got = parse_line(line, dtype, out);
        if got != unit {
            return Err((n, got));
        }
        n += 1;
    }
    Ok(n)
}

/// Reads the float32 fields of the line that starts at `s[i]` (up to the next line break or
/// the end) into `out`; returns how many there were and where the line ends. One pass over the
/// bytes: a plain decimal followed by a comma or the line's end is converted on the spot
/// (Clinger's fast path, as [`parse_f32_fast`]); any other field goes to [`parse_f32`].
fn parse_line_f32(s: &[u8], mut i: usize, out: &mut Vec<u8>) -> (usize, usize) {
    const POW10: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];
    let len = s.len();
    let mut n = 0;
    loop {
        let start = i;
        let neg = i < len && s[i] == b'-';
        i += usize::from(neg);
        let (mut m, mut digits, mut frac) = (0u32, 0u32, 0usize);
        let int_from = i;
        while i < len && s[i].is_ascii_digit() {
            // leading zeros are not significant
            digits += u32::from(m != 0 || s[i] != b'0');
            m = m.wrapping_mul(10).wrapping_add((s[i] - b'0') as u32);
            i += 1;
        }
        let mut seen = i > int_from;
        if i < len && s[i] == b'.' {
            i += 1;
            let frac_from = i;
            while i < len && s[i].is_ascii_digit() {
                digits += u32::from(m != 0 || s[i] != b'0');
                m = m.wrapping_mul(10).wrapping_add((s[i] - b'0') as u32);
                i += 1;
            }
            frac = i - frac_from;
            seen |= frac > 0;
        }
        let at_end = i == len || matches!(s[i], b',' | b'\n' | b'\r');
        if seen && at_end && digits <= 7 && frac <= 10 {
            let v = m as f32;
            let v = if frac == 0 { v } else { v / POW10[frac] };
            out.extend_from_slice(&(if neg { -v } else { v }).to_le_bytes());
            n += 1;
        } else {
            // the whole field, to the next comma or line break, through the full parser
            i = start;
            while i < len && !matches!(s[i], b',' | b'\n' | b'\r') {
                i += 1;
            }
            if let Some(v) = parse_f32(&s[start..i]) {
                out.extend_from_slice(&v.to_le_bytes());
                n += 1;
            }
        }
        if i == len || s[i] != b',' {
            return (n, i);
        }
        i += 1;
    }
}

/// One CSV file (or directory) read row by row.
struct Column {
    input: LineInput,
    what: &'static str,
    shape: Vec<i64>,
    unit: usize,
    dtype: DType,
    /// The block being parsed (kept between blocks, as are the parsed pieces' buffers, so that
    /// an epoch allocates nothing after its first block).
    block: Vec<u8>,
    /// The current block's rows, one buffer per piece parsed in parallel: `unit` values per
    /// row, and the piece's row count.
    parts: Vec<(Vec<u8>, usize)>,
    /// How many of `parts` the current block filled.
    nparts: usize,
    /// The next row: its piece and its row in the piece.
    part: usize,
    next: usize,
    /// Rows before the current block.
    rows_before: usize,
    /// Rows in the current block.
    nrows: usize,
}

impl Column {
    fn new(uri: &str, what: &'static str, shape: Vec<i64>, dtype: DType) -> Result<Column> {
        Ok(Column {
            input: LineInput::open(uri, 0, 1)?,
            what,
            unit: elements(&shape)?,
            shape,
            dtype,
            block: Vec::new(),
            parts: Vec::new(),
            nparts: 0,
            part: 0,
            next: 0,
            rows_before: 0,
            nrows: 0,
        })
    }

    fn rewind(&mut self) {
        self.input.rewind();
        self.nparts = 0;
        self.part = 0;
        self.next = 0;
        self.rows_before = 0;
        self.nrows = 0;
    }

    /// Parses the next block; false at the end of the file.
    fn load_block(&mut self) -> Result<bool> {
        self.rows_before += self.nrows;
        self.nrows = 0;
        self.nparts = 0;
        self.part = 0;
        self.next = 0;
        if !self.input.next_block_into(&mut self.block)? {
            return Ok(false);
        }
        let block = &self.block;
        let threads = if block.len() >= 256 << 10 {
            crate::parallel::max_threads()
        } else {
            1
        };
        let pieces = split_lines(block, threads);
        if self.parts.len() < pieces.len() {
            self.parts.resize_with(pieces.len(), Default::default);
        }
        let mut failed: Vec<Option<(usize, usize)>> = vec![None; pieces.len()];
        let (unit, dtype) = (self.unit, self.dtype);
        let parts = &mut self.parts[..pieces.len()];
        if pieces.len() == 1 {
            let (buf, rows) = &mut parts[0];
            match parse_piece(pieces[0], unit, dtype, buf) {
                Ok(n) => *rows = n,
                Err(e) => failed[0] = Some(e),
            }
        } else {
            let mut work: Vec<(&mut (Vec<u8>, usize), &mut Option<(usize, usize)>)> =
                parts.iter_mut().zip(failed.iter_mut()).collect();
            crate::parallel::for_each_mut(&mut work, threads, |k, (part, fail)| {
                let (buf, rows) = &mut **part;
                match parse_piece(pieces[k], unit, dtype, buf) {
                    Ok(n) => *rows = n,
                    Err(e) => **fail = Some(e),
                }
            });
        }
        if let Some((k, &Some((row, got)))) = failed.iter().enumerate().find(|(_, f)| f.is_some()) {
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
        self.nparts = pieces.len();
        self.nrows = self.parts[..self.nparts].iter().map(|p| p.1).sum();
        Ok(true)
    }

    /// Copies up to `max` next rows (`out.len() / max` bytes each) into `out` with one copy,
    /// as many as the current piece holds (parsing the next block when none is left); 0 at
    /// the end.
    fn take_rows(&mut self, out: &mut [u8], max: usize) -> Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let w = out.len() / max;
        if !self.next_row(&mut out[..w])? {
            return Ok(0);
        }
        let (rows, nrows) = &self.parts[self.part];
        let k = (nrows - self.next).min(max - 1);
        out[w..(k + 1) * w].copy_from_slice(&rows[self.next * w..(self.next + k) * w]);
        self.next += k;
        Ok(k + 1)
    }

    /// Copies the next row into `out`; false at the end.
    fn next_row(&mut self, out: &mut [u8]) -> Result<bool> {
        loop {
            while self.part < self.nparts && self.next >= self.parts[self.part].1 {
                self.part += 1;
                self.next = 0;
            }
            if self.part < self.nparts {
                break;
            }
            if !self.load_block()? {
                return Ok(false);
            }
        }
        let w = out.len();
        let rows = &self.parts[self.part].0;
        out.copy_from_slice(&rows[self.next * w..(self.next + 1) * w]);
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

    fn next_many(&mut self, data: &mut [u8], label: &mut [u8], index: &mut [u64]) -> Result<usize> {
        let n = index.len();
        if n == 0 {
            return Ok(0);
        }
        let (d, lw) = (data.len() / n, label.len() / n);
        let mut done = 0;
        while done < n && !self.end {
            let k = self.data.take_rows(&mut data[done * d..], n - done)?;
            if k == 0 {
                self.end = true;
                break;
            }
            match &mut self.label {
                Some(l) => {
                    let mut got = 0;
                    while got < k {
                        let at = (done + got) * lw;
                        let m = l.take_rows(&mut label[at..(done + k) * lw], k - got)?;
                        if m == 0 {
                            return Err(Error::format(format!(
                                "label_csv {} has fewer rows than data_csv {} (no label for \
                                 row {})",
                                l.input.path(),
                                self.data.input.path(),
                                self.counter + got as u64 + 1
                            )));
                        }
                        got += m;
                    }
                }
                None => label[done * lw..(done + k) * lw].fill(0),
            }
            for (j, i) in index[done..done + k].iter_mut().enumerate() {
                *i = self.counter + j as u64;
            }
            self.counter += k as u64;
            done += k;
        }
        Ok(done)
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
    fn the_one_pass_line_parser_reads_what_the_field_parser_reads() {
        let lines_in = [
            "1,2.5,-3.25,0.1",
            "  1.5,+2, 3 ,4e2",
            "1e,-inf,NaN,.5",
            "5.,-0,0.000000012,123456789",
            "1234567,12345678,0.1234567,1.00000001",
            "9999999,0.0000000001,-.75,7x",
        ];
        for l in lines_in {
            let mut want = Vec::new();
            let n = parse_line(l.as_bytes(), DType::F32, &mut want);
            for brk in ["", "\n", "\r\n"] {
                let text = format!("{l}{brk}");
                let mut got = Vec::new();
                let (m, end) = parse_line_f32(text.as_bytes(), 0, &mut got);
                assert_eq!((m, end), (n, l.len()), "{l:?}");
                assert_eq!(got, want, "{l:?}");
            }
        }
        // empty lines skipped, rows counted, a short row named by its index in the piece
        let mut out = Vec::new();
        let piece = b"1,2\n\n\r\n3,4\r\n5,6";
        assert_eq!(parse_piece(piece, 2, DType::F32, &mut out), Ok(3));
        let vals: Vec<f32> = out
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(vals, [1., 2., 3., 4., 5., 6.]);
        assert_eq!(
            parse_piece(b"1,2\n3\n4,5\n", 2, DType::F32, &mut out),
            Err((1, 1))
        );
        assert_eq!(
            parse_piece(b"1,2,\n", 2, DType::F32, &mut out),
            Ok(1),
            "a trailing comma's empty field holds no number"
        );
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
