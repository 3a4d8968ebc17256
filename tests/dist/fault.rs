//! One process of a distributed job that fails on purpose (run by tests/dist/run.sh under
//! mxrt-launch): `dist_fault panic` makes the last worker panic on another thread after one
//! round, while the others wait for its next push. The job must end at once (the panic aborts
//! it), not hang.

use mxrt::kvstore::Keys;
use mxrt::ndarray::NDArray;
use mxrt::{Context, DType};

fn array(v: f32) -> NDArray {
    let a = NDArray::new(&[4], Context::cpu(0), DType::F32, false).unwrap();
    let bytes: Vec<u8> = [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect();
    a.sync_copy_from_bytes(&bytes).unwrap();
    a
}

fn main() {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let kv = mxrt::dist::create("dist_sync").expect("create");
    if mxrt::dist::Role::from_env().unwrap() != mxrt::dist::Role::Worker {
        kv.run_server(&mut |_, _| {}).expect("serve");
        return;
    }
    let (rank, size) = (kv.rank(), kv.group_size());
    let w = array(0.0);
    kv.init(Keys::Int(&[1]), &[&w]).unwrap();
    for round in 0..3 {
        if scenario == "panic" && round == 1 && rank == size - 1 {
            std::thread::spawn(|| panic!("a worker thread fails on purpose"))
                .join()
                .ok();
        }
        kv.push(Keys::Int(&[1]), &[&w], 0).unwrap();
        kv.pull(Keys::Int(&[1]), &[&w], 0, true).unwrap();
    }
    kv.shutdown().unwrap();
    println!("ok fault rank {rank}");
}
