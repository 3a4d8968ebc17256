"""Short training runs from fixed parameters, for test_training.py: a Gluon ResNet-18 (64x64
images, batch 4, 3 SGD steps with momentum) and a 2-layer LSTM language model (Embedding -> LSTM -> Dense,
softmax cross-entropy, 4 SGD steps) built either from the fused `rnn.LSTM` layer or from
`LSTMCell`s unrolled over the sequence, on the same parameters. Every parameter starts from a
numpy generator, so two runs (two libraries, or the two LSTM builds) start from the same point.

Usage: training_script.py resnet | lm_fused | lm_fused_imperative | lm_unrolled
Prints JSON: the loss of every step and the parameters after the last one."""
import json
import sys

import numpy as np

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn, rnn

VOCAB, EMBED, HIDDEN, LAYERS, SEQ, BATCH, LM_STEPS = 40, 12, 64, 2, 6, 16, 4


def summary(a):
    """A parameter as the test compares it: all values when small, else a fixed sample and
    its norm."""
    v = a.asnumpy().astype(np.float64).ravel()
    if v.size <= 4096:
        return {"values": v.tolist()}
    idx = np.random.RandomState(5).choice(v.size, 256, replace=False)
    return {"sample": v[idx].tolist(), "norm": float(np.linalg.norm(v))}


def resnet():
    from mxnet.gluon.model_zoo import vision
    net = vision.get_model("resnet18_v1", pretrained=False, classes=10)
    net.initialize()
    net(mx.nd.zeros((1, 3, 64, 64)))
    rs = np.random.RandomState(0)
    params = net.collect_params()
    for name in sorted(params.keys()):
        p = params[name]
        if name.endswith("running_var") or name.endswith("gamma"):
            v = rs.uniform(0.8, 1.2, p.shape)
        elif name.endswith("running_mean") or name.endswith("beta") or name.endswith("bias"):
            v = rs.uniform(-0.1, 0.1, p.shape)
        else:
            fan_in = int(np.prod(p.shape[1:]))
            v = rs.normal(0, np.sqrt(2.0 / fan_in), p.shape)
        p.set_data(mx.nd.array(v))
    net.hybridize()
    x = mx.nd.array(rs.uniform(-1, 1, (4, 3, 64, 64)))
    y = mx.nd.array([1, 3, 5, 7])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.001, "momentum": 0.9})
    losses = []
    for _ in range(3):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(x.shape[0])
        losses.append(float(loss.mean().asscalar()))
    out = {"losses": losses}
    # a fixed set of parameters: the first and last convolutions, the first BatchNorm's (with
    # its running statistics), the classifier; by role (names carry a per-process counter)
    names = sorted(params.keys())
    roles = ["conv0_weight", "batchnorm0_gamma", "batchnorm0_beta", "batchnorm0_running_mean",
             "batchnorm0_running_var", "dense0_weight", "dense0_bias"]
    for role in roles:
        out[role] = summary(params[net.prefix + role].data())
    out["last_conv_weight"] = summary(params[names[-1]].data())
    out["logits"] = net(x).asnumpy().astype(np.float64).ravel().tolist()
    return out


def lm_arrays():
    """The language model's parameters by role, and its data."""
    rs = np.random.RandomState(1)
    u = lambda *shape: rs.uniform(-0.3, 0.3, shape)
    p = {"embed": u(VOCAB, EMBED), "dense_w": u(VOCAB, HIDDEN), "dense_b": u(VOCAB)}
    for l in range(LAYERS):
        inp = EMBED if l == 0 else HIDDEN
        p[f"l{l}_i2h_weight"] = u(4 * HIDDEN, inp)
        p[f"l{l}_h2h_weight"] = u(4 * HIDDEN, HIDDEN)
        p[f"l{l}_i2h_bias"] = u(4 * HIDDEN)
        p[f"l{l}_h2h_bias"] = u(4 * HIDDEN)
    tokens = rs.randint(0, VOCAB, (SEQ + 1, BATCH))
    return p, tokens[:-1], tokens[1:]


class FusedLM(gluon.HybridBlock):
    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.lstm = rnn.LSTM(HIDDEN, num_layers=LAYERS, layout="TNC", input_size=EMBED)
            self.dense = nn.Dense(VOCAB, flatten=False, in_units=HIDDEN)

    def hybrid_forward(self, F, x):
        return self.dense(self.lstm(self.embed(x)))

    def lstm_params(self, l, role):
        return getattr(self.lstm, f"l{l}_{role}")


class UnrolledLM(gluon.HybridBlock):
    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.cells = rnn.HybridSequentialRNNCell()
            for l in range(LAYERS):
                self.cells.add(rnn.LSTMCell(HIDDEN, input_size=EMBED if l == 0 else HIDDEN))
            self.dense = nn.Dense(VOCAB, flatten=False, in_units=HIDDEN)

    def hybrid_forward(self, F, x):
        # begin_state left to unroll: zeros whose batch the graph infers when hybridized
        out, _ = self.cells.unroll(SEQ, self.embed(x), layout="TNC", merge_outputs=True)
        return self.dense(out)

    def lstm_params(self, l, role):
        return getattr(self.cells[l], role)


def lm(kind):
    arrays, data, label = lm_arrays()
    net = UnrolledLM() if kind == "lm_unrolled" else FusedLM()
    net.initialize()
    net.embed.weight.set_data(mx.nd.array(arrays["embed"]))
    net.dense.weight.set_data(mx.nd.array(arrays["dense_w"]))
    net.dense.bias.set_data(mx.nd.array(arrays["dense_b"]))
    for l in range(LAYERS):
        for role in ("i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"):
            net.lstm_params(l, role).set_data(mx.nd.array(arrays[f"l{l}_{role}"]))
    if kind != "lm_fused_imperative":
        net.hybridize()
    x, y = mx.nd.array(data), mx.nd.array(label)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    losses = []
    for _ in range(LM_STEPS):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(BATCH)
        losses.append(float(loss.mean().asscalar()))
    out = {"losses": losses,
           "embed": summary(net.embed.weight.data()),
           "dense_w": summary(net.dense.weight.data()),
           "dense_b": summary(net.dense.bias.data())}
    out["moved"] = {}
    for l in range(LAYERS):
        for role in ("i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"):
            final = net.lstm_params(l, role).data()
            out[f"l{l}_{role}"] = summary(final)
            start = arrays[f"l{l}_{role}"]
            out["moved"][f"l{l}_{role}"] = float(abs(final.asnumpy() - start).max())
    return out


def main():
    kind = sys.argv[1]
    result = resnet() if kind == "resnet" else lm(kind)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
