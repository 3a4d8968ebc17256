//! Unit tests of recording and backward on small arrays (they run under Miri too: the gradient
//! operators' kernels read and write the tape's arrays, some in place).

use super::*;
use crate::context::Context;
use crate::dtype::DType;
use crate::ndarray::NDArray;
use crate::operator::imperative::Invoke;

fn arr(v: &[f32]) -> NDArray {
    let a = NDArray::new(&[v.len() as i64], Context::cpu(0), DType::F32, false).unwrap();
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    a.sync_copy_from_bytes(&bytes).unwrap();
    a
}

fn read(a: &NDArray) -> Vec<f32> {
    a.to_bytes()
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn op(name: &'static str, inputs: &[NDArray], params: Vec<(&str, &str)>) -> NDArray {
    invoke(Invoke {
        op: name,
        called_as: name,
        inputs,
        params,
        outputs: None,
        state: None,
    })
    .unwrap()
    .remove(0)
}

/// Restores the thread's recording and training modes when a test ends.
struct Modes(bool, bool);
impl Modes {
    fn record() -> Modes {
        Modes(set_recording(true), set_training(true))
    }
}
impl Drop for Modes {
    fn drop(&mut self) {
        set_recording(self.0);
        set_training(self.1);
    }
}

#[test]
fn backward_writes_and_adds_gradients() {
    let x = arr(&[1.0, -2.0, 3.0]);
    let y = arr(&[0.5, 4.0, -1.0]);
    let (gx, gy) = (arr(&[9.0; 3]), arr(&[10.0; 3]));
    mark_variables(
        &[x.clone(), y.clone()],
        &[GradReq::Write, GradReq::Add],
        &[gx.clone(), gy.clone()],
    )
    .unwrap();
    let z = {
        let _m = Modes::record();
        // z = x * y + square(x)
        let xy = op("elemwise_mul", &[x.clone(), y.clone()], vec![]);
        let xx = op("square", &[x.clone()], vec![]);
        op("elemwise_add", &[xy, xx], vec![])
    };
    backward(BackwardArgs {
        heads: vec![z.clone()],
        head_grads: vec![],
        variables: vec![],
        retain_graph: false,
        create_graph: false,
        is_train: true,
    })
    .unwrap();
    // dz/dx = y + 2x (written), dz/dy = x (added to 10)
    assert_eq!(read(&gx), vec![2.5, 0.0, 5.0]);
    assert_eq!(read(&gy), vec![11.0, 8.0, 13.0]);
    assert_eq!(read(&z), vec![1.5, -4.0, 6.0]);
}

#[test]
fn grad_of_a_variable_used_twice_with_a_head_gradient() {
    let x = arr(&[2.0, -1.0]);
    mark_variables(&[x.clone()], &[GradReq::Write], &[arr(&[0.0; 2])]).unwrap();
    let z = {
        let _m = Modes::record();
        // z = x * x, the same array on both sides of the op
        op("elemwise_mul", &[x.clone(), x.clone()], vec![])
    };
    let g = backward(BackwardArgs {
        heads: vec![z],
        head_grads: vec![Some(arr(&[1.0, 3.0]))],
        variables: vec![x],
        retain_graph: false,
        create_graph: false,
        is_train: true,
    })
    .unwrap();
    assert_eq!(g.len(), 1);
    assert_eq!(read(&g[0]), vec![4.0, -6.0]);
}
