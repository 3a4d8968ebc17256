//! Elementwise maps over raw pointers, split over the intra-op pool when large.
//!
//! They take pointers rather than slices because an output may be exactly one of the inputs
//! (`x += y`, `out=x`): each index reads its inputs before it writes its output, so exact
//! aliasing is well defined, and no `&mut` ever coexists with a `&` to the same memory.

use super::element::Element;
use crate::parallel::for_ranges;

/// A raw pointer that may cross into the pool's threads; each thread touches a disjoint range.
#[derive(Clone, Copy)]
pub struct Ptr<T>(pub *mut T);
// SAFETY: used only by the maps below, whose threads access disjoint index ranges of memory the
// caller vouched for.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }

    /// # Safety
    /// Element `i` must be in bounds of the caller's buffer.
    #[inline(always)]
    unsafe fn at(self, i: usize) -> *mut T {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.add(i) }
    }
}

/// `out[i] = f(a[i])` for `i < n`; `cost` is the work per element relative to an add.
///
/// # Safety
/// `a` must be valid for `n` reads and `out` for `n` writes, both aligned; `out` may be exactly
/// `a` but must not otherwise overlap it; nothing else may access `out` meanwhile.
pub unsafe fn map1<A: Element, O: Element>(
    a: *const A,
    out: *mut O,
    n: usize,
    cost: usize,
    f: impl Fn(A) -> O + Sync,
) {
    let (a, out) = (Ptr(a.cast_mut()), Ptr(out));
    for_ranges(n, cost, |s, e| {
        // the addresses as locals, and plain slices where input and output are apart: loops the
        // compiler vectorises (each element still gets the same arithmetic)
        let (a, out) = (a.get().cast_const(), out.get());
        if a.cast::<u8>() == out.cast::<u8>().cast_const() {
            let (x, y) = (out.cast::<A>().cast_const(), out);
            for i in s..e {
                // SAFETY: `i < n`; the output is exactly the input, so every element is read
                // before it is written; ranges given to different threads are disjoint.
                unsafe { *y.add(i) = f(*x.add(i)) }
            }
        } else {
            // SAFETY: `s..e` is within `n` elements of both buffers, which do not overlap
            // (the caller's contract), and this thread alone touches this range.
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts(a.add(s), e - s),
                    std::slice::from_raw_parts_mut(out.add(s), e - s),
                )
            };
            zip1(x, y, &f);
        }
    });
}

/// `out[s..e] = f(a[s..e])` over ranges split across the intra-op pool: a whole-buffer kernel
/// (such as [`vmath`](super::vmath)'s) run on each thread's range.
///
/// # Safety
/// As [`map1`]; `f(x, y, len)` must read `len` elements at `x` and write `len` at `y`, allowing
/// `y == x`.
pub unsafe fn map1_ranges<A: Element, O: Element>(
    a: *const A,
    out: *mut O,
    n: usize,
    cost: usize,
    f: unsafe fn(*const A, *mut O, usize),
) {
    let (a, out) = (Ptr(a.cast_mut()), Ptr(out));
    for_ranges(n, cost, |s, e| {
        // SAFETY: `s..e` is within `n` elements of both buffers (the caller's contract); ranges
        // given to different threads are disjoint.
        unsafe { f(a.get().add(s).cast_const(), out.get().add(s), e - s) }
    });
}

/// `out[i] = f(a[i], b[i])` for `i < n`.
///
/// # Safety
/// As [`map1`], for both inputs.
pub unsafe fn map2<A: Element, B: Element, O: Element>(
    a: *const A,
    b: *const B,
    out: *mut O,
    n: usize,
    cost: usize,
    f: impl Fn(A, B) -> O + Sync,
) {
    let (a, b, out) = (Ptr(a.cast_mut()), Ptr(b.cast_mut()), Ptr(out));
    for_ranges(n, cost, |s, e| {
        let (a, b, out) = (a.get().cast_const(), b.get().cast_const(), out.get());
        let o = out.cast::<u8>().cast_const();
        if a.cast::<u8>() == o || b.cast::<u8>() == o {
            for i in s..e {
                // SAFETY: as in `map1` (the output is exactly an input).
                unsafe { *out.add(i) = f(*a.add(i), *b.add(i)) }
            }
        } else {
            // SAFETY: as in `map1`; the inputs may overlap each other (both are only read).
            let (x, z, y) = unsafe {
                (
                    std::slice::from_raw_parts(a.add(s), e - s),
                    std::slice::from_raw_parts(b.add(s), e - s),
                    std::slice::from_raw_parts_mut(out.add(s), e - s),
                )
            };
            zip2(x, z, y, &f);
        }
    });
}

/// `y[i] = f(x[i])`. The slices are arguments so that the compiler knows the output aliases
/// nothing else (not even what `f` captures) and vectorises the loop.
#[inline]
fn zip1<A: Copy, O>(x: &[A], y: &mut [O], f: &impl Fn(A) -> O) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = f(x);
    }
}

/// `y[i] = f(x[i], z[i])` (see [`zip1`]).
#[inline]
fn zip2<A: Copy, B: Copy, O>(x: &[A], z: &[B], y: &mut [O], f: &impl Fn(A, B) -> O) {
    for ((y, &x), &z) in y.iter_mut().zip(x).zip(z) {
        *y = f(x, z);
    }
}

/// `out[i] = v` for `i < n`.
///
/// # Safety
/// `out` must be valid for `n` aligned writes, accessed by nothing else meanwhile.
pub unsafe fn fill<O: Element>(out: *mut O, n: usize, v: O) {
    let out = Ptr(out);
    for_ranges(n, 1, |s, e| {
        for i in s..e {
            // SAFETY: `i < n`, disjoint ranges per thread.
            unsafe { *out.at(i) = v }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_match_a_serial_loop_in_place_and_out_of_place() {
        // enough elements to split across threads
        let n = 2 * crate::parallel::MIN_PARALLEL_ELEMS + 3;
        let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..n).map(|i| (n - i) as f32).collect();
        let mut out = vec![0f32; n];
        // SAFETY: distinct vectors of `n` elements.
        unsafe { map2(a.as_ptr(), b.as_ptr(), out.as_mut_ptr(), n, 1, |x, y| x * y) };
        assert!(out.iter().enumerate().all(|(i, &v)| v == a[i] * b[i]));
        let mut x = a.clone();
        let p = x.as_mut_ptr();
        // SAFETY: the output is exactly the input, which the maps allow.
        unsafe { map1(p, p, n, 1, |v: f32| v + 1.0) };
        assert!(x.iter().enumerate().all(|(i, &v)| v == a[i] + 1.0));
        let mut c = vec![0i32; 5];
        // SAFETY: a vector of 5 elements.
        unsafe { fill(c.as_mut_ptr(), 5, 7) };
        assert_eq!(c, [7; 5]);
    }
}
