//! 2-bit gradient compression (MXNet's `{'type': '2bit', 'threshold': t}`).
//!
//! Each worker keeps a residual per pushed array. For a push, `residual += gradient`; where the
//! residual reaches `t` the worker sends `+t` and subtracts `t`, where it reaches `-t` it sends
//! `-t` and adds `t`, elsewhere it sends 0. So the residual keeps the error and nothing is lost
//! over rounds, only delayed. Codes take 2 bits, 16 per 32-bit word on the wire; the server
//! expands them back to floats before summing. Pulls and inits are not compressed.

use crate::error::{Error, Result};

const ZERO: u32 = 0b00;
const POS: u32 = 0b01;
const NEG: u32 = 0b10;

/// MXNet's default threshold.
pub const DEFAULT_THRESHOLD: f32 = 0.5;

/// Compression settings parsed from `MXKVStoreSetGradientCompression`'s key/value strings:
/// `Some(threshold)` for 2-bit, `None` for `type=none` (compression off).
pub fn parse_params(params: &[(&str, &str)]) -> Result<Option<f32>> {
    let mut kind: Option<String> = None;
    let mut threshold = DEFAULT_THRESHOLD;
    for &(k, v) in params {
        match k {
            "type" => kind = Some(v.trim().trim_matches('\'').to_ascii_lowercase()),
            "threshold" => {
                threshold = v
                    .trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|t| *t > 0.0 && t.is_finite())
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "gradient compression threshold {v:?} is not a positive number"
                        ))
                    })?
            }
            other => {
                return Err(Error::invalid(format!(
                    "unknown gradient compression parameter '{other}' (accepted: type, threshold)"
                )));
            }
        }
    }
    match kind.as_deref() {
        Some("2bit") => Ok(Some(threshold)),
        Some("none") => Ok(None),
        Some(other) => Err(Error::not_supported(format!(
            "gradient compression type '{other}' is not supported (accepted: '2bit', 'none')"
        ))),
        None => Err(Error::invalid(
            "gradient compression needs a 'type' parameter ('2bit')",
        )),
    }
}

/// Bytes of the packed codes of `n` values.
pub fn packed_len(n: usize) -> usize {
    n.div_ceil(16) * 4
}

/// Folds `grad` into `residual` and writes the codes of what is sent into `out`
/// (`packed_len(grad.len())` bytes).
pub fn compress(grad: &[f32], residual: &mut [f32], threshold: f32, out: &mut [u8]) {
    assert_eq!(grad.len(), residual.len(), "residual of another length");
    assert_eq!(out.len(), packed_len(grad.len()), "code buffer of another length");
    for (w, chunk) in out.chunks_exact_mut(4).enumerate() {
        let mut word = 0u32;
        let lo = w * 16;
        let hi = (lo + 16).min(grad.len());
        for i in lo..hi {
            let r = residual[i] + grad[i];
            let code = if r >= threshold {
                residual[i] = r - threshold;
                POS
            } else if r <= -threshold {
                residual[i] = r + threshold;
                NEG
            } else {
                residual[i] = r;
                ZERO
            };
            word |= code << (2 * (i - lo));
        }
        chunk.copy_from_slice(&word.to_le_bytes());
    }
}

/// Expands codes back into `out` (`+threshold`, `-threshold` or 0 per value).
pub fn decompress(codes: &[u8], threshold: f32, out: &mut [f32]) -> Result<()> {
    if codes.len() != packed_len(out.len()) {
        return Err(Error::format(format!(
            "compressed push of {} bytes for {} values (expected {})",
            codes.len(),
            out.len(),
            packed_len(out.len())
        )));
    }
    for (i, o) in out.iter_mut().enumerate() {
        let w = u32::from_le_bytes(codes[i / 16 * 4..i / 16 * 4 + 4].try_into().expect("4 bytes"));
        *o = match (w >> (2 * (i % 16))) & 0b11 {
            POS => threshold,
            NEG => -threshold,
            _ => 0.0,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residual_keeps_the_error_over_rounds() {
        let t = 0.5;
        let g = [0.3f32, -0.7, 1.6, 0.0, -0.2];
        let mut res = [0.0f32; 5];
        let mut codes = vec![0u8; packed_len(5)];
        let mut sent = [0.0f32; 5];
        let mut total_sent = [0.0f32; 5];
        for _ in 0..3 {
            compress(&g, &mut res, t, &mut codes);
            decompress(&codes, t, &mut sent).unwrap();
            for i in 0..5 {
                total_sent[i] += sent[i];
            }
        }
        // three rounds pushed 3g; what was sent plus what is kept equals it (1.6 sends only 0.5
        // a round: its residual grows)
        for i in 0..5 {
            assert!((total_sent[i] + res[i] - 3.0 * g[i]).abs() < 1e-6, "{i}");
        }
        // round 1 of 0.3 sends nothing, round 2 reaches 0.6 and sends +0.5
        let mut res = [0.0f32; 1];
        let mut c = vec![0u8; 4];
        let mut s = [9.0f32];
        compress(&[0.3], &mut res, t, &mut c);
        decompress(&c, t, &mut s).unwrap();
        assert_eq!(s[0], 0.0);
        compress(&[0.3], &mut res, t, &mut c);
        decompress(&c, t, &mut s).unwrap();
        assert_eq!(s[0], 0.5);
        assert!((res[0] - 0.1).abs() < 1e-6);
    }

    #[test]
    fn sixteen_values_per_word() {
        assert_eq!(packed_len(0), 0);
        assert_eq!(packed_len(16), 4);
        assert_eq!(packed_len(17), 8);
        let g: Vec<f32> = (0..33).map(|i| if i % 3 == 0 { 1.0 } else if i % 3 == 1 { -1.0 } else { 0.0 }).collect();
        let mut res = vec![0.0; 33];
        let mut c = vec![0u8; packed_len(33)];
        compress(&g, &mut res, 0.25, &mut c);
        let mut out = vec![0.0; 33];
        decompress(&c, 0.25, &mut out).unwrap();
        for i in 0..33 {
            assert_eq!(out[i], g[i] * 0.25);
        }
        assert!(decompress(&c[..4], 0.25, &mut out).is_err());
    }

    #[test]
    fn params_parse() {
        assert_eq!(parse_params(&[("type", "2bit")]).unwrap(), Some(0.5));
        assert_eq!(
            parse_params(&[("type", "2bit"), ("threshold", "0.25")]).unwrap(),
            Some(0.25)
        );
        assert_eq!(parse_params(&[("type", "none")]).unwrap(), None);
        assert!(parse_params(&[("type", "1bit")]).is_err());
        assert!(parse_params(&[("threshold", "1")]).is_err());
        assert!(parse_params(&[("type", "2bit"), ("threshold", "-1")]).is_err());
        assert!(parse_params(&[("type", "2bit"), ("foo", "1")]).is_err());
    }
}
