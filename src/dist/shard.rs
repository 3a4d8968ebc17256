//! Which server holds which part of a key (MXNet's `EncodeDefaultKey`): an array of fewer than
//! `MXNET_KVSTORE_BIGARRAY_BOUND` elements lives whole on server `key * 9973 mod S`; a bigger one
//! is split into `S` contiguous parts, one per server, the last taking the remainder.

/// One contiguous part of a key on one server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Index of the server (0..S) among the job's servers.
    pub server: usize,
    /// First element of the part within the key's array.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

/// The parts of a key of `len` elements over `servers` servers (at least one).
pub fn plan(key: i64, len: usize, servers: usize, bigarray_bound: usize) -> Vec<Shard> {
    assert!(servers > 0, "sharding over no servers");
    if len < bigarray_bound || servers == 1 || len < servers {
        let server = (key as i128 * 9973).rem_euclid(servers as i128) as usize;
        return vec![Shard {
            server,
            offset: 0,
            len,
        }];
    }
    let part = len / servers;
    (0..servers)
        .map(|s| Shard {
            server: s,
            offset: s * part,
            len: if s + 1 == servers {
                len - part * (servers - 1)
            } else {
                part
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_keys_go_whole_to_one_server() {
        assert_eq!(
            plan(3, 10, 2, 100),
            vec![Shard {
                server: 1,
                offset: 0,
                len: 10
            }]
        );
        assert_eq!(plan(4, 10, 3, 100)[0].server, (4 * 9973) % 3);
        assert_eq!(plan(-1, 10, 3, 100)[0].server, (-9973i64).rem_euclid(3) as usize);
    }

    #[test]
    fn big_keys_split_over_every_server() {
        let p = plan(7, 10, 3, 10);
        assert_eq!(p.iter().map(|s| s.len).collect::<Vec<_>>(), vec![3, 3, 4]);
        assert_eq!(p.iter().map(|s| s.offset).collect::<Vec<_>>(), vec![0, 3, 6]);
        assert_eq!(p.iter().map(|s| s.server).collect::<Vec<_>>(), vec![0, 1, 2]);
        // fewer elements than servers: whole
        assert_eq!(plan(7, 2, 3, 0).len(), 1);
    }
}
