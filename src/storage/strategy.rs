//! Bucketing strategies of the pooled manager: how a requested size maps to the size of the block
//! that is actually allocated and cached. Blocks are reused only for requests that round to the
//! same block size, so the rounded size doubles as the bucket key.

use crate::error::{Error, Result};

/// Smallest page size the pools accept (MXNet's `NDEV` constant).
pub const MIN_PAGE_SIZE: usize = 32;
/// log2 of the largest block the Round strategy was designed for (16 GiB, MXNet's `LOG2_MAX_MEM`);
/// also the upper bound of the linear cut-off.
pub const LOG2_MAX_MEM: u32 = 34;
/// Lower bound of the Round strategy's linear cut-off (2^20 = 1 MiB).
pub const MIN_ROUND_CUTOFF: u32 = 20;

/// How a pool rounds sizes. Chosen by `MXNET_{CPU,GPU}_MEM_POOL_TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// `"Naive"`: round up to a multiple of `page_size`; a result above `large_alloc_round_size`
    /// is rounded again to a multiple of that. Blocks are reused for equal rounded sizes.
    Naive {
        page_size: usize,
        large_alloc_round_size: usize,
    },
    /// `"Round"`: powers of two from `2^log2_page` up to `2^cutoff`, then multiples of `2^cutoff`.
    Round { log2_page: u32, cutoff: u32 },
    /// `"Unpooled"`: every allocation goes to the device and every free back to it; no rounding.
    Unpooled,
}

/// Number of bits needed to write `a` (at least 1): MXNet's `ilog2ul`. For `a = 2^k - 1` this is
/// `k`, so `bits_needed(s - 1)` is `ceil(log2(s))` for `s >= 2`.
pub(crate) fn bits_needed(a: usize) -> u32 {
    (usize::BITS - a.leading_zeros()).max(1)
}

fn round_to_multiple(size: usize, multiple: usize) -> Option<usize> {
    size.div_ceil(multiple).checked_mul(multiple)
}

impl Strategy {
    /// The pool type name as written in the environment variable.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Naive { .. } => "Naive",
            Strategy::Round { .. } => "Round",
            Strategy::Unpooled => "Unpooled",
        }
    }

    /// Whether freed blocks are kept for reuse.
    pub fn is_pooled(&self) -> bool {
        !matches!(self, Strategy::Unpooled)
    }

    /// Size of the block that serves a request of `size` bytes (`size > 0`). Requests that give
    /// the same block size share cached blocks. Fails only when the rounded size overflows.
    pub fn block_size(&self, size: usize) -> Result<usize> {
        debug_assert!(size > 0);
        let rounded = match *self {
            Strategy::Unpooled => Some(size),
            Strategy::Naive {
                page_size,
                large_alloc_round_size,
            } => round_to_multiple(size, page_size).and_then(|s| {
                if s > large_alloc_round_size {
                    round_to_multiple(s, large_alloc_round_size)
                } else {
                    Some(s)
                }
            }),
            Strategy::Round { log2_page, cutoff } => {
                let log_size = bits_needed(size - 1);
                if log_size > cutoff {
                    // Linear range: the next multiple of 2^cutoff.
                    round_to_multiple(size, 1usize << cutoff)
                } else {
                    Some(1usize << log_size.max(log2_page))
                }
            }
        };
        rounded.ok_or_else(|| {
            Error::out_of_memory(format!(
                "cannot allocate {size} bytes: the size overflows when rounded"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAIVE: Strategy = Strategy::Naive {
        page_size: 4096,
        large_alloc_round_size: 2 << 20,
    };

    #[test]
    fn bits_needed_matches_ilog2ul() {
        assert_eq!(bits_needed(0), 1);
        assert_eq!(bits_needed(1), 1);
        assert_eq!(bits_needed(2), 2);
        assert_eq!(bits_needed(31), 5);
        assert_eq!(bits_needed(32), 6);
        assert_eq!(bits_needed(4095), 12);
        assert_eq!(bits_needed(4096), 13);
    }

    #[test]
    fn naive_rounds_to_pages_then_large_multiples() {
        assert_eq!(NAIVE.block_size(1).unwrap(), 4096);
        assert_eq!(NAIVE.block_size(4096).unwrap(), 4096);
        assert_eq!(NAIVE.block_size(4097).unwrap(), 8192);
        assert_eq!(NAIVE.block_size(2 << 20).unwrap(), 2 << 20);
        // Just above the large-allocation size: rounded to the next 2 MiB multiple.
        assert_eq!(NAIVE.block_size((2 << 20) + 1).unwrap(), 4 << 20);
        assert_eq!(NAIVE.block_size(5 << 20).unwrap(), 6 << 20);
        let odd = Strategy::Naive {
            page_size: 100,
            large_alloc_round_size: 1000,
        };
        assert_eq!(odd.block_size(250).unwrap(), 300);
        assert_eq!(odd.block_size(1001).unwrap(), 2000);
        assert!(NAIVE.block_size(usize::MAX - 10).is_err());
    }

    #[test]
    fn round_is_power_of_two_then_linear() {
        // MXNet's storage_test: cutoff 20, page 4096.
        let round = Strategy::Round {
            log2_page: 12,
            cutoff: 20,
        };
        assert_eq!(round.block_size(32).unwrap(), 4096);
        assert_eq!(round.block_size(4095).unwrap(), 4096);
        assert_eq!(round.block_size(4097).unwrap(), 8192);
        assert_eq!(round.block_size(1 << 20).unwrap(), 1 << 20);
        assert_eq!(round.block_size((1 << 20) + 1).unwrap(), 2 << 20);
        assert_eq!(round.block_size(2097153).unwrap(), 3 << 20);
        assert_eq!(round.block_size(3145728).unwrap(), 3 << 20);
        assert_eq!(round.block_size(3145729).unwrap(), 4 << 20);
        let small_page = Strategy::Round {
            log2_page: 5,
            cutoff: 24,
        };
        assert_eq!(small_page.block_size(1).unwrap(), 32);
        assert_eq!(small_page.block_size(33).unwrap(), 64);
        assert_eq!(small_page.block_size((1 << 24) + 5).unwrap(), 2 << 24);
    }

    #[test]
    fn unpooled_keeps_the_size() {
        assert_eq!(Strategy::Unpooled.block_size(1234).unwrap(), 1234);
        assert!(!Strategy::Unpooled.is_pooled());
        assert!(NAIVE.is_pooled());
    }
}
