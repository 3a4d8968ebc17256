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

/// A custom operator written in Rust (`y = x * factor`, and the backward `dx = dy * factor`)
/// through the core's protocol: planned by its property, run on a custom-operator thread over
/// aliases of the arrays, differentiated through the tape; property and operator released once.
mod custom_op {
    use super::*;
    use crate::error::{Error, Result};
    use crate::operator::custom::{self, CustomOp, CustomProp, TAG_IN_GRAD, TAG_OUT_GRAD};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static PROPS: AtomicUsize = AtomicUsize::new(0);
    static OPS: AtomicUsize = AtomicUsize::new(0);

    struct Prop(f32);
    struct Op(f32);
    impl Drop for Prop {
        fn drop(&mut self) {
            PROPS.fetch_sub(1, Ordering::SeqCst);
        }
    }
    impl Drop for Op {
        fn drop(&mut self) {
            OPS.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn scaled(a: &NDArray, f: f32) -> Vec<u8> {
        read(a).iter().flat_map(|x| (x * f).to_le_bytes()).collect()
    }

    impl CustomProp for Prop {
        fn list_arguments(&self) -> Result<Vec<String>> {
            Ok(vec!["data".into()])
        }
        fn list_outputs(&self) -> Result<Vec<String>> {
            Ok(vec!["output".into()])
        }
        fn list_auxiliary_states(&self) -> Result<Vec<String>> {
            Ok(vec![])
        }
        fn infer_shape(&self, shapes: Vec<Vec<i64>>) -> Result<Vec<Vec<i64>>> {
            Ok(vec![shapes[0].clone(), shapes[0].clone()])
        }
        fn infer_type(&self, _: Vec<i32>) -> Result<Option<Vec<i32>>> {
            Ok(None)
        }
        fn infer_storage_type(&self, _: Vec<i32>) -> Result<Option<Vec<i32>>> {
            Ok(None)
        }
        fn declare_backward_dependency(
            &self,
            og: &[i32],
            _: &[i32],
            _: &[i32],
        ) -> Result<Vec<i32>> {
            Ok(og.to_vec())
        }
        fn create_operator(
            &self,
            ctx: &str,
            _: &[Vec<i64>],
            _: &[i32],
        ) -> Result<Box<dyn CustomOp>> {
            assert_eq!(ctx, "cpu(0)");
            OPS.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(Op(self.0)))
        }
    }

    impl CustomOp for Op {
        fn forward(&self, a: Vec<NDArray>, tags: &[i32], reqs: &[i32], _: bool) -> Result<()> {
            assert_eq!((tags, reqs), (&[0, 1][..], &[1][..]));
            if self.0 < 0.0 {
                return Err(Error::invalid("negative factors are refused"));
            }
            // the callback may wait: it runs on a custom-operator thread, over aliases
            a[1].sync_copy_from_bytes(&scaled(&a[0], self.0))
        }
        fn backward(&self, a: Vec<NDArray>, tags: &[i32], reqs: &[i32], _: bool) -> Result<()> {
            // output gradient, argument and output (not declared: none arrays), input gradient
            assert_eq!(tags, &[TAG_OUT_GRAD, 0, 1, TAG_IN_GRAD]);
            assert!(a[1].is_none() && a[2].is_none() && reqs == [1]);
            a[3].sync_copy_from_bytes(&scaled(&a[0], self.0))
        }
    }

    fn register() {
        custom::register_creator(
            "rust_scale",
            Arc::new(|_: &str, kw: &[(&str, &str)]| {
                let f = kw
                    .iter()
                    .find(|(k, _)| *k == "factor")
                    .map_or("1", |(_, v)| *v);
                PROPS.fetch_add(1, Ordering::SeqCst);
                Ok(
                    Box::new(Prop(f.parse().map_err(|_| Error::invalid("factor"))?))
                        as Box<dyn CustomProp>,
                )
            }),
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // runs on threads that wait for the engine
    fn forward_backward_and_release() {
        register();
        let x = arr(&[1.0, -2.0, 4.0]);
        let gx = arr(&[0.0; 3]);
        mark_variables(
            std::slice::from_ref(&x),
            &[GradReq::Write],
            std::slice::from_ref(&gx),
        )
        .unwrap();
        let y = {
            let _m = Modes::record();
            op(
                "Custom",
                std::slice::from_ref(&x),
                vec![("op_type", "rust_scale"), ("factor", "2.5")],
            )
        };
        assert_eq!(read(&y), [2.5, -5.0, 10.0]);
        backward(BackwardArgs {
            heads: vec![y.clone()],
            head_grads: vec![Some(arr(&[1.0, 2.0, 3.0]))],
            variables: vec![],
            retain_graph: false,
            create_graph: false,
            is_train: true,
        })
        .unwrap();
        assert_eq!(read(&gx), [2.5, 5.0, 7.5]);

        // a failing forward fails the op: the call succeeds, reading the output reports it
        let bad = op(
            "Custom",
            std::slice::from_ref(&x),
            vec![("op_type", "rust_scale"), ("factor", "-1")],
        );
        let err = bad.wait_to_read().unwrap_err();
        assert!(
            err.message().contains("negative factors are refused"),
            "{}",
            err.message()
        );
        drop((y, bad));
        crate::engine::Engine::global().unwrap().wait_for_all().ok();
        assert_eq!(PROPS.load(Ordering::SeqCst), 0, "every property released");
        assert_eq!(OPS.load(Ordering::SeqCst), 0, "every operator released");
    }
}
