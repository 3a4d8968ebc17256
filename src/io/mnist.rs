//! `MNISTIter`: MNIST's idx files (big-endian header, then bytes) loaded whole, optionally cut
//! to part `part_index` of `num_parts` and shuffled once with MXNet's generator and algorithm
//! (so `shuffle=True, seed=s` gives MXNet's order). A final partial batch is dropped; pads are 0
//! and the index vector is all zeros, as in MXNet.
//!
//! The pixels stay bytes (a quarter of the float32 dataset's memory traffic) and each batch is
//! scaled by 1/256 into float32 straight into its new array: one pass, no staging copy. A
//! power-of-two scale is exact, so the values are MXNet's bit for bit.

use super::batch::{Batch, Loader, dense_array, fresh_array_with};
use super::params::Params;
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::sync::Arc;

/// std::mt19937 (32-bit Mersenne Twister), seeded as `std::mt19937(seed)`.
pub struct Mt19937 {
    state: [u32; 624],
    at: usize,
}

impl Mt19937 {
    pub fn new(seed: u32) -> Mt19937 {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            state[i] = 1_812_433_253u32
                .wrapping_mul(state[i - 1] ^ (state[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, at: 624 }
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.at >= 624 {
            for k in 0..624 {
                let y = (self.state[k] & 0x8000_0000) | (self.state[(k + 1) % 624] & 0x7fff_ffff);
                let mag = if y & 1 != 0 { 0x9908_b0df } else { 0 };
                self.state[k] = self.state[(k + 397) % 624] ^ (y >> 1) ^ mag;
            }
            self.at = 0;
        }
        let mut y = self.state[self.at];
        self.at += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// A uniform integer in `[0, hi]` as the libstdc++ MXNet 1.9.1's wheel was built with draws
    /// it (`uniform_int_distribution`: divide the generator's range into equal buckets, reject
    /// draws past the last whole bucket).
    fn uniform(&mut self, hi: u64) -> u64 {
        let range = u32::MAX as u64;
        let buckets = hi + 1;
        let scaling = range / buckets;
        let past = buckets * scaling;
        loop {
            let r = self.next_u32() as u64;
            if r < past {
                return r / scaling;
            }
        }
    }

    /// `std::shuffle(v.begin(), v.end(), *self)` as that libstdc++ does it.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in 1..v.len() {
            let j = self.uniform(i as u64) as usize;
            v.swap(i, j);
        }
    }
}

/// The whole (part of the) dataset in memory.
struct Data {
    /// The image file as read; the part's pixels start at `first` (record order of the file).
    file: Vec<u8>,
    first: usize,
    /// Instances in the part.
    count: usize,
    /// Record `i` of the (shuffled) data is record `order[i]` of the part; `None`: in file order.
    order: Option<Vec<u32>>,
    /// One per instance, in the (shuffled) order.
    labels: Vec<f32>,
    pixels: usize,
}

impl Data {
    /// The pixels of instance `i` of the part, in file order.
    fn image(&self, i: usize) -> &[u8] {
        let at = self.first + i * self.pixels;
        &self.file[at..at + self.pixels]
    }

    /// Writes instances `[a, b)` of the (shuffled) data into `out`, scaled by 1/256.
    fn scale_into(&self, a: usize, b: usize, out: &mut [f32]) {
        let px = self.pixels;
        match &self.order {
            None => {
                let at = self.first + a * px;
                scale(&self.file[at..at + (b - a) * px], out);
            }
            Some(order) => {
                for (k, o) in out.chunks_exact_mut(px.max(1)).enumerate() {
                    scale(self.image(order[a + k] as usize), o);
                }
            }
        }
    }
}

/// `out[i] = src[i] / 256` (exact: a power-of-two scale of an integer below 2^24).
fn scale(src: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked just above).
        return unsafe { scale_avx512(src, out) };
    }
    scale_plain(src, out)
}

#[inline(always)]
fn scale_plain(src: &[u8], out: &mut [f32]) {
    for (o, &b) in out.iter_mut().zip(src) {
        *o = b as f32 * (1.0 / 256.0);
    }
}

/// The same loop compiled for AVX-512 (16 pixels per instruction).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn scale_avx512(src: &[u8], out: &mut [f32]) {
    scale_plain(src, out)
}

pub struct MnistLoader {
    data: Arc<Data>,
    batch_size: usize,
    data_shape: Vec<i64>,
    at: usize,
}

fn read_u32_be(bytes: &[u8], at: usize, path: &str) -> Result<i32> {
    bytes
        .get(at..at + 4)
        .map(|b| i32::from_be_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| Error::format(format!("invalid mnist format: {path} is too short")))
}

/// Records `[floor(count / n * k), floor(count / n * (k + 1)))`, computed in double as MXNet.
fn part(count: usize, num_parts: i64, part_index: i64) -> (usize, usize) {
    let f = |k: i64| (count as f64 / num_parts as f64 * k as f64) as usize;
    (f(part_index), f(part_index + 1))
}

impl MnistLoader {
    pub fn new(p: &Params) -> Result<MnistLoader> {
        let image = p.string("image", Some("./train-images-idx3-ubyte"))?;
        let label = p.string("label", Some("./train-labels-idx1-ubyte"))?;
        let batch_size = p.int_at_least("batch_size", Some(128), 1)? as usize;
        let shuffle = p.bool("shuffle", true)?;
        let flat = p.bool("flat", false)?;
        let seed = p.int("seed", Some(0))?;
        let silent = p.bool("silent", false)?;
        let num_parts = p.int("num_parts", Some(1))?;
        let part_index = p.int("part_index", Some(0))?;
        if num_parts < 1 || part_index < 0 || part_index >= num_parts {
            return Err(Error::invalid(format!(
                "part_index {part_index} must be in [0, num_parts) with num_parts {num_parts} >= 1"
            )));
        }
        let read = |path: &str| {
            std::fs::read(path).map_err(|e| Error::io(format!("cannot open {path}: {e}")))
        };
        let img = read(&image)?;
        let (count, rows, cols) = (
            read_u32_be(&img, 4, &image)?,
            read_u32_be(&img, 8, &image)?,
            read_u32_be(&img, 12, &image)?,
        );
        if count < 0 || rows <= 0 || cols <= 0 {
            return Err(Error::format(format!(
                "invalid mnist format: {image} declares {count} images of {rows}x{cols}"
            )));
        }
        let pixels = rows as usize * cols as usize;
        let (start, end) = part(count as usize, num_parts, part_index);
        let body = &img[16..];
        end.checked_mul(pixels)
            .filter(|&n| n <= body.len())
            .ok_or_else(|| {
                Error::format(format!(
                    "invalid mnist format: {image} declares {count} images of {rows}x{cols} \
                     but holds {} bytes of pixels",
                    body.len()
                ))
            })?;
        let lab = read(&label)?;
        let lcount = read_u32_be(&lab, 4, &label)?.max(0) as usize;
        let (lstart, lend) = part(lcount, num_parts, part_index);
        let lbody = &lab[8..];
        if lend > lbody.len() {
            return Err(Error::format(format!(
                "invalid mnist format: {label} declares {lcount} labels but holds {}",
                lbody.len()
            )));
        }
        let mut labels: Vec<f32> = lbody[lstart..lend].iter().map(|&b| b as f32).collect();
        let n = end - start;
        if labels.len() < n {
            return Err(Error::format(format!(
                "{label} has {} labels for the {n} images of {image}",
                labels.len()
            )));
        }
        labels.truncate(n);
        let order = if shuffle {
            let mut order: Vec<u32> = (0..n as u32).collect();
            Mt19937::new(seed as u32).shuffle(&mut order);
            // record i of the shuffled data is record order[i] of the file
            labels = order.iter().map(|&src| labels[src as usize]).collect();
            Some(order)
        } else {
            None
        };
        let data_shape = if flat {
            vec![batch_size as i64, pixels as i64]
        } else {
            vec![batch_size as i64, 1, rows as i64, cols as i64]
        };
        if !silent {
            let shape: Vec<String> = data_shape.iter().map(i64::to_string).collect();
            eprintln!(
                "MNISTIter: load {n} images, shuffle={}, shape=[{}]",
                shuffle as i32,
                shape.join(",")
            );
        }
        Ok(MnistLoader {
            data: Arc::new(Data {
                file: img,
                first: 16 + start * pixels,
                count: n,
                order,
                labels,
                pixels,
            }),
            batch_size,
            data_shape,
            at: 0,
        })
    }
}

impl Loader for MnistLoader {
    fn next_batch(&mut self) -> Result<Option<Batch>> {
        let n = self.data.count;
        if self.at + self.batch_size > n {
            return Ok(None);
        }
        let (a, b) = (self.at, self.at + self.batch_size);
        let d = &self.data;
        let data = fresh_array_with(&self.data_shape, DType::F32, |bytes| {
            d.scale_into(a, b, f32_slice_mut(bytes))
        })?;
        let label = dense_array(
            &[self.batch_size as i64],
            DType::F32,
            f32_bytes(&self.data.labels[a..b]),
        )?;
        self.at = b;
        Ok(Some(Batch {
            data,
            label,
            index: vec![0; self.batch_size],
            pad: 0,
            wrapped: false,
        }))
    }

    fn before_first(&mut self, _keep_wrap: bool) -> Result<()> {
        self.at = 0;
        Ok(())
    }
}

/// The floats of a 4-byte aligned byte buffer (an array's memory).
fn f32_slice_mut(bytes: &mut [u8]) -> &mut [f32] {
    assert_eq!(bytes.as_ptr().align_offset(4), 0, "array memory is aligned");
    // SAFETY: the buffer is 4-byte aligned (checked) and every bit pattern is a valid f32; the
    // slice covers the buffer's whole floats and borrows it mutably for its lifetime.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<f32>(), bytes.len() / 4) }
}

/// The bytes of a float slice (little-endian hosts, as every platform mxrt builds for).
fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and any byte is a valid u8; the slice covers exactly the
    // floats' memory and borrows `v` for its lifetime.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_standard_sequence() {
        // the C++ standard's check: the 10000th value of a default-seeded mt19937
        let mut g = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10000 {
            last = g.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn shuffle_is_a_seeded_permutation_in_mxnets_order() {
        // the order libmxnet.so's MNISTIter gives 10 records with seed 0
        let mut v: Vec<u32> = (0..10).collect();
        Mt19937::new(0).shuffle(&mut v);
        assert_eq!(v, vec![0, 2, 3, 5, 9, 1, 6, 8, 4, 7]);
        let mut w: Vec<u32> = (0..1000).collect();
        Mt19937::new(3).shuffle(&mut w);
        let mut sorted = w.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(w, sorted);
    }

    #[test]
    fn parts_cover_the_records_once() {
        for count in [0, 1, 7, 100, 60000] {
            for n in 1..5 {
                let mut next = 0;
                for k in 0..n {
                    let (a, b) = part(count, n, k);
                    assert_eq!(a, next);
                    next = b;
                }
                assert_eq!(next, count);
            }
        }
    }
}
