#!/usr/bin/python3
"""scripts/make_examples.py — writes the example programs in examples/.

    /usr/bin/python3 scripts/make_examples.py [--pe build/bin/pe]

For each model it writes <model>_infer.json (the inference program) and
<model>_infer_startup.json (the startup program that initializes its
parameters), and for each training model <model>_forward.json (the forward pass with its
loss, what `pe train` takes) and <model>_forward_startup.json, then converts
all of them to the binary form (.pe) with `pe convert`, so the two forms
always come from the same source. The models:

  mlp  x [-1, 784] -> fc 512 relu -> fc 256 relu -> fc 10 -> softmax -> prob
  cnn  img [-1, 1, 28, 28] -> conv5x5(16) batch_norm relu maxpool2
       -> conv5x5(32)+bias relu maxpool2 -> reshape2 [-1, 1568]
       -> fc 128 relu -> fc 10 -> softmax -> prob

Training (forward + loss; label int64 [-1, 1]; loss = mean of
softmax_with_cross_entropy, acc = accuracy of the top-1 logit):

  mlp_forward  x [-1, 784] -> fc 512 relu -> fc 256 relu -> fc 10 -> loss, acc
  cnn_forward  img [-1, 1, 28, 28] -> conv5x5(8)+bias relu maxpool2
               -> conv5x5(16)+bias relu maxpool2 -> reshape2 [-1, 784]
               -> fc 64 relu -> fc 10 -> loss, acc

The ops and var names follow what Paddle's fluid.layers.fc / conv2d /
batch_norm / pool2d emit (fc_0.w_0, fc_0.tmp_0, ...), so a Paddle user can
read the programs. Parameters are declared persistable + is_parameter in both
programs. Weights are Xavier-uniform (uniform_random, fixed seeds), biases
small constants (fill_constant); batch_norm's scale/mean/variance are random
in a narrow range rather than Paddle's 1/0/1 so that every term of its
formula shows in the example tests (tests/python/test_examples.py).
"""
import argparse
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pe_json import REPO, Program, pe_bin  # noqa: E402

EXAMPLES = os.path.join(REPO, "examples")


class Model:
    """Builds an inference program and its startup program side by side."""

    def __init__(self):
        self.main = Program()
        self.startup = Program()
        self.seed = 0

    def param(self, name, dims, init, stop_gradient=False, **attrs):
        """Declares a parameter in both programs and an initializer op in startup.
        init: "xavier" (uniform_random), "uniform", or "constant"."""
        for p in (self.main, self.startup):
            p.var(name, "float32", dims, persistable=True, is_parameter=True,
                  stop_gradient=stop_gradient)
        if init == "constant":
            self.startup.op("fill_constant", {}, {"Out": [name]},
                            {"shape": dims, "dtype": 0, "value": attrs["value"]})
            return name
        self.seed += 1
        if init == "xavier":
            fan_in = dims[0] if len(dims) == 2 else int(math.prod(dims[1:]))
            fan_out = dims[1] if len(dims) == 2 else dims[0] * int(math.prod(dims[2:]))
            lim = math.sqrt(6.0 / (fan_in + fan_out))
            lo, hi = -lim, lim
        else:
            lo, hi = attrs["min"], attrs["max"]
        self.startup.op("uniform_random", {}, {"Out": [name]},
                        {"shape": dims, "dtype": 0, "min": lo, "max": hi, "seed": self.seed})
        return name

    def tmp(self, name, dims):
        return self.main.var(name, "float32", dims)

    def fc(self, idx, x, in_dim, out_dim, act, bias_value):
        """Paddle's fc: mul -> elementwise_add(axis=1) [-> act]."""
        w = self.param("fc_%d.w_0" % idx, [in_dim, out_dim], "xavier")
        b = self.param("fc_%d.b_0" % idx, [out_dim], "constant", value=bias_value)
        t0 = self.tmp("fc_%d.tmp_0" % idx, [-1, out_dim])
        self.main.op("mul", {"X": [x], "Y": [w]}, {"Out": [t0]}, {"x_num_col_dims": 1, "y_num_col_dims": 1})
        t1 = self.tmp("fc_%d.tmp_1" % idx, [-1, out_dim])
        self.main.op("elementwise_add", {"X": [t0], "Y": [b]}, {"Out": [t1]}, {"axis": 1})
        if act is None:
            return t1
        t2 = self.tmp("fc_%d.tmp_2" % idx, [-1, out_dim])
        self.main.op(act, {"X": [t1]}, {"Out": [t2]})
        return t2

    def softmax(self, x, classes):
        prob = self.tmp("prob", [-1, classes])
        self.main.op("softmax", {"X": [x]}, {"Out": [prob]}, {"axis": -1})
        return prob


def build_mlp():
    m = Model()
    m.main.var("x", "float32", [-1, 784])
    h = m.fc(0, "x", 784, 512, "relu", 0.01)
    h = m.fc(1, h, 512, 256, "relu", 0.01)
    logits = m.fc(2, h, 256, 10, None, 0.0)
    m.softmax(logits, 10)
    return m


def build_cnn():
    m = Model()
    m.main.var("img", "float32", [-1, 1, 28, 28])
    # conv2d_0: 1 -> 16, 5x5, pad 2 (no bias: batch_norm follows, as in Paddle models)
    w0 = m.param("conv2d_0.w_0", [16, 1, 5, 5], "xavier")
    c0 = m.tmp("conv2d_0.tmp_0", [-1, 16, 28, 28])
    m.main.op("conv2d", {"Input": ["img"], "Filter": [w0]}, {"Output": [c0]},
              {"strides": [1, 1], "paddings": [2, 2], "dilations": [1, 1], "groups": 1})
    scale = m.param("batch_norm_0.w_0", [16], "uniform", min=0.5, max=1.5)
    bias = m.param("batch_norm_0.b_0", [16], "constant", value=0.05)
    mean = m.param("batch_norm_0.w_1", [16], "uniform", stop_gradient=True, min=-0.1, max=0.1)
    var = m.param("batch_norm_0.w_2", [16], "uniform", stop_gradient=True, min=0.5, max=1.5)
    bn = m.tmp("batch_norm_0.tmp_2", [-1, 16, 28, 28])
    m.main.op("batch_norm", {"X": [c0], "Scale": [scale], "Bias": [bias], "Mean": [mean],
                             "Variance": [var]}, {"Y": [bn]},
              {"epsilon": 1e-5, "momentum": 0.9, "is_test": True, "data_layout": "NCHW"})
    r0 = m.tmp("relu_0.tmp_0", [-1, 16, 28, 28])
    m.main.op("relu", {"X": [bn]}, {"Out": [r0]})
    p0 = m.tmp("pool2d_0.tmp_0", [-1, 16, 14, 14])
    m.main.op("pool2d", {"X": [r0]}, {"Out": [p0]},
              {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0]})
    # conv2d_1: 16 -> 32, 5x5, pad 2, with a bias added like Paddle's conv2d layer does
    w1 = m.param("conv2d_1.w_0", [32, 16, 5, 5], "xavier")
    b1 = m.param("conv2d_1.b_0", [32], "constant", value=0.01)
    c1 = m.tmp("conv2d_1.tmp_0", [-1, 32, 14, 14])
    m.main.op("conv2d", {"Input": [p0], "Filter": [w1]}, {"Output": [c1]},
              {"strides": [1, 1], "paddings": [2, 2], "dilations": [1, 1], "groups": 1})
    c1b = m.tmp("conv2d_1.tmp_1", [-1, 32, 14, 14])
    m.main.op("elementwise_add", {"X": [c1], "Y": [b1]}, {"Out": [c1b]}, {"axis": 1})
    r1 = m.tmp("conv2d_1.tmp_2", [-1, 32, 14, 14])
    m.main.op("relu", {"X": [c1b]}, {"Out": [r1]})
    p1 = m.tmp("pool2d_1.tmp_0", [-1, 32, 7, 7])
    m.main.op("pool2d", {"X": [r1]}, {"Out": [p1]},
              {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0]})
    flat = m.tmp("reshape2_0.tmp_0", [-1, 32 * 7 * 7])
    m.main.op("reshape2", {"X": [p1]}, {"Out": [flat]}, {"shape": [-1, 32 * 7 * 7]})
    h = m.fc(0, flat, 32 * 7 * 7, 128, "relu", 0.01)
    logits = m.fc(1, h, 128, 10, None, 0.0)
    m.softmax(logits, 10)
    return m


def add_loss(m, logits, classes):
    """Training head: softmax_with_cross_entropy against int64 labels [-1, 1],
    mean -> `loss` [1]; top_k + accuracy on the logits -> `acc` [1] (what
    Paddle's fluid.layers.accuracy emits; fetch it with `pe train --fetch acc`)."""
    m.main.var("label", "int64", [-1, 1])
    sm = m.tmp("softmax_with_cross_entropy_0.tmp_0", [-1, classes])
    ce = m.tmp("softmax_with_cross_entropy_0.tmp_1", [-1, 1])
    m.main.op("softmax_with_cross_entropy", {"Logits": [logits], "Label": ["label"]},
              {"Softmax": [sm], "Loss": [ce]}, {"soft_label": False, "axis": -1})
    m.tmp("loss", [1])
    m.main.op("mean", {"X": [ce]}, {"Out": ["loss"]})
    m.tmp("top_k_0.tmp_0", [-1, 1])
    m.main.var("top_k_0.tmp_1", "int64", [-1, 1])
    m.main.op("top_k", {"X": [logits]}, {"Out": ["top_k_0.tmp_0"], "Indices": ["top_k_0.tmp_1"]}, {"k": 1})
    m.tmp("acc", [1])
    m.main.op("accuracy", {"Out": ["top_k_0.tmp_0"], "Indices": ["top_k_0.tmp_1"], "Label": ["label"]},
              {"Accuracy": ["acc"]})


def build_mlp_forward():
    """The MLP with its loss, for `pe train`."""
    m = Model()
    m.main.var("x", "float32", [-1, 784])
    h = m.fc(0, "x", 784, 512, "relu", 0.0)
    h = m.fc(1, h, 512, 256, "relu", 0.0)
    logits = m.fc(2, h, 256, 10, None, 0.0)
    add_loss(m, logits, 10)
    return m


def conv_relu_pool(m, idx, x, cin, cout, hw):
    """conv2d 5x5 pad 2 + bias (elementwise_add axis 1) -> relu -> max pool 2x2."""
    w = m.param("conv2d_%d.w_0" % idx, [cout, cin, 5, 5], "xavier")
    b = m.param("conv2d_%d.b_0" % idx, [cout], "constant", value=0.0)
    c = m.tmp("conv2d_%d.tmp_0" % idx, [-1, cout, hw, hw])
    m.main.op("conv2d", {"Input": [x], "Filter": [w]}, {"Output": [c]},
              {"strides": [1, 1], "paddings": [2, 2], "dilations": [1, 1], "groups": 1})
    cb = m.tmp("conv2d_%d.tmp_1" % idx, [-1, cout, hw, hw])
    m.main.op("elementwise_add", {"X": [c], "Y": [b]}, {"Out": [cb]}, {"axis": 1})
    r = m.tmp("conv2d_%d.tmp_2" % idx, [-1, cout, hw, hw])
    m.main.op("relu", {"X": [cb]}, {"Out": [r]})
    p = m.tmp("pool2d_%d.tmp_0" % idx, [-1, cout, hw // 2, hw // 2])
    m.main.op("pool2d", {"X": [r]}, {"Out": [p]},
              {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0]})
    return p


def build_cnn_forward():
    """A small CNN with its loss, for `pe train`: conv 1->8, conv 8->16, fc 784->64, fc 64->10."""
    m = Model()
    m.main.var("img", "float32", [-1, 1, 28, 28])
    p0 = conv_relu_pool(m, 0, "img", 1, 8, 28)
    p1 = conv_relu_pool(m, 1, p0, 8, 16, 14)
    flat = m.tmp("reshape2_0.tmp_0", [-1, 16 * 7 * 7])
    m.main.op("reshape2", {"X": [p1]}, {"Out": [flat]}, {"shape": [-1, 16 * 7 * 7]})
    h = m.fc(0, flat, 16 * 7 * 7, 64, "relu", 0.0)
    logits = m.fc(1, h, 64, 10, None, 0.0)
    add_loss(m, logits, 10)
    return m


MODELS = {"mlp": build_mlp, "cnn": build_cnn}
# Forward programs with their loss (training): <name>_forward.json + <name>_forward_startup.json.
TRAIN_MODELS = {"mlp": build_mlp_forward, "cnn": build_cnn_forward}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pe", default=pe_bin(), help="the pe binary used for `pe convert` (default %(default)s)")
    ap.add_argument("--json-only", action="store_true", help="write the .json files only")
    args = ap.parse_args()
    os.makedirs(EXAMPLES, exist_ok=True)
    outputs = [("%s_%s" % (name, kind), prog) for name, build in MODELS.items()
               for m in [build()] for kind, prog in (("infer", m.main), ("infer_startup", m.startup))]
    outputs += [("%s_%s" % (name, kind), prog) for name, build in TRAIN_MODELS.items()
                for m in [build()] for kind, prog in (("forward", m.main), ("forward_startup", m.startup))]
    for base, prog in outputs:
        js = os.path.join(EXAMPLES, base + ".json")
        prog.save(js)
        print("wrote", os.path.relpath(js, REPO))
        if args.json_only:
            continue
        pe = js[:-len(".json")] + ".pe"
        r = subprocess.run([args.pe, "convert", js, pe], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("make_examples: `pe convert %s %s` failed (%d): %s"
                     % (js, pe, r.returncode, r.stderr.strip()))
        print("wrote", os.path.relpath(pe, REPO))


if __name__ == "__main__":
    main()
