//! The element types kernels compute on, and dispatch from a runtime [`DType`] to a typed kernel.
//!
//! Every MXNet dtype maps to one Rust type implementing [`Element`]. Half-precision types compute
//! through `f32` (as MXNet's CPU kernels do); integer types convert through `f64`, which holds
//! every `i32`/`u32` exactly and every 64-bit integer up to 2^53. Booleans are stored as one byte
//! (`Bool`), so a buffer written by C that holds a byte other than 0 or 1 is never undefined
//! behaviour: any non-zero byte reads as true.

use crate::dtype::DType;
use half::{bf16, f16};

/// MXNet's `bool`: one byte, 0 is false and anything else is true.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Bool(pub u8);

/// A type an NDArray element can have.
pub trait Element: Copy + Send + Sync + PartialOrd + Default + std::fmt::Debug + 'static {
    /// The array dtype this type stores.
    const DTYPE: DType;
    /// True for f16, bf16, f32 and f64.
    const FLOAT: bool;
    fn to_f64(self) -> f64;
    /// Converts as MXNet's casts do on x86-64: floats to integers truncate toward zero into a
    /// 64-bit integer whose low bits are kept (`-2.0` as uint8 is 254), NaN becomes 0; to `Bool`,
    /// non-zero is true.
    fn from_f64(v: f64) -> Self;
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
    fn zero() -> Self {
        Self::from_f64(0.0)
    }
    fn one() -> Self {
        Self::from_f64(1.0)
    }
}

/// A float truncated to a 64-bit integer (saturating at its range, NaN 0); narrower integer
/// types keep its low bits, as a C cast through `cvttsd2si` does.
#[inline(always)]
fn wrap_int(v: f64) -> i64 {
    if v >= 9.223_372_036_854_775_807e18 {
        v as u64 as i64
    } else {
        v as i64
    }
}

macro_rules! int_element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            const FLOAT: bool = false;
            #[inline(always)]
            fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { wrap_int(v) as $t }
            #[inline(always)]
            fn to_f32(self) -> f32 { self as f32 }
            #[inline(always)]
            fn from_f32(v: f32) -> Self { v as $t }
            #[inline(always)]
            fn zero() -> Self { 0 }
            #[inline(always)]
            fn one() -> Self { 1 }
        }
    )*};
}
int_element!(u8 => U8, i8 => I8, i16 => I16, u16 => U16, i32 => I32, u32 => U32, i64 => I64, u64 => U64);

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    const FLOAT: bool = true;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    const FLOAT: bool = true;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
}

macro_rules! half_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            const FLOAT: bool = true;
            #[inline(always)]
            fn to_f64(self) -> f64 { self.to_f64() }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            #[inline(always)]
            fn to_f32(self) -> f32 { self.to_f32() }
            #[inline(always)]
            fn from_f32(v: f32) -> Self { <$t>::from_f32(v) }
        }
    )*};
}
half_element!(f16 => F16, bf16 => BF16);

impl Element for Bool {
    const DTYPE: DType = DType::Bool;
    const FLOAT: bool = false;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        Bool((v != 0.0) as u8)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        (self.0 != 0) as u8 as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        Bool((v != 0.0) as u8)
    }
}

/// Runs `$body` with `$T` bound to the Rust type of the runtime dtype `$dtype`:
///
/// ```ignore
/// let n = with_element!(dtype, T => count_nonzero::<T>(bytes_as::<T>(buf)));
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! with_element {
    ($dtype:expr, $T:ident => $body:expr) => {{
        use $crate::dtype::DType as __D;
        match $dtype {
            __D::F32 => {
                type $T = f32;
                $body
            }
            __D::F64 => {
                type $T = f64;
                $body
            }
            __D::F16 => {
                type $T = ::half::f16;
                $body
            }
            __D::BF16 => {
                type $T = ::half::bf16;
                $body
            }
            __D::U8 => {
                type $T = u8;
                $body
            }
            __D::I8 => {
                type $T = i8;
                $body
            }
            __D::I16 => {
                type $T = i16;
                $body
            }
            __D::U16 => {
                type $T = u16;
                $body
            }
            __D::I32 => {
                type $T = i32;
                $body
            }
            __D::U32 => {
                type $T = u32;
                $body
            }
            __D::I64 => {
                type $T = i64;
                $body
            }
            __D::U64 => {
                type $T = u64;
                $body
            }
            __D::Bool => {
                type $T = $crate::operator::kernel::element::Bool;
                $body
            }
        }
    }};
}
pub use with_element;

/// Views a byte buffer as elements of `T`.
///
/// # Panics
/// If the buffer is not aligned for `T` or its length is not a multiple of `T`'s size (array
/// buffers are 64-byte aligned and sized by their dtype, so a caller passing an array's bytes
/// never panics).
pub fn cast_slice<T: Element>(bytes: &[u8]) -> &[T] {
    let (pre, mid, post) = {
        // SAFETY: every `Element` is a plain-old-data type (integers, floats, `half` types and
        // `Bool(u8)`): any bit pattern is a valid value, so reinterpreting initialised bytes is
        // sound; `align_to` itself handles alignment.
        unsafe { bytes.align_to::<T>() }
    };
    assert!(
        pre.is_empty() && post.is_empty(),
        "buffer is not a whole, aligned {:?} slice",
        T::DTYPE
    );
    mid
}

/// Views a mutable byte buffer as elements of `T` (see [`cast_slice`]).
pub fn cast_slice_mut<T: Element>(bytes: &mut [u8]) -> &mut [T] {
    let (pre, mid, post) = {
        // SAFETY: as in `cast_slice`; any value written through the result is a valid byte pattern.
        unsafe { bytes.align_to_mut::<T>() }
    };
    assert!(
        pre.is_empty() && post.is_empty(),
        "buffer is not a whole, aligned {:?} slice",
        T::DTYPE
    );
    mid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dtype_of<T: Element>() -> DType {
        T::DTYPE
    }

    #[test]
    fn dispatch_binds_the_type_of_each_dtype() {
        for d in DType::ALL {
            assert_eq!(with_element!(d, T => dtype_of::<T>()), d);
            assert_eq!(with_element!(d, T => std::mem::size_of::<T>()), d.size());
        }
    }

    #[test]
    fn conversions_follow_c_casts() {
        assert_eq!(<i32 as Element>::from_f64(-2.7), -2);
        assert_eq!(<u8 as Element>::from_f64(300.0), 44);
        assert_eq!(<u8 as Element>::from_f64(-2.0), 254);
        assert_eq!(<i64 as Element>::from_f64(f64::NAN), 0);
        assert_eq!(Bool::from_f64(0.5), Bool(1));
        assert_eq!(Bool(7).to_f64(), 1.0);
        assert_eq!(<f16 as Element>::from_f32(1.5).to_f32(), 1.5);
        const { assert!(<f32 as Element>::FLOAT && !<i8 as Element>::FLOAT) };
    }

    #[test]
    fn byte_views_round_trip() {
        let mut buf = vec![0u64; 4];
        // SAFETY: viewing initialised u64s as bytes: same memory, u8 has no alignment needs.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, 32) };
        cast_slice_mut::<f32>(bytes).copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!(cast_slice::<f32>(bytes)[7], 8.0);
        assert_eq!(cast_slice::<f64>(bytes).len(), 4);
    }
}
