/* tests/unit/test_ops_empty.c — every op of ops/ops.def on tensors with a
 * zero-size dim (an empty batch, an empty axis, K = 0, 0-element params, a
 * 0 in a fill shape): forward and, for differentiable ops, backward (the
 * grad ops that the op's grad maker emits, through pe_gradients).
 *
 * Each row of `k_rows` is one op with its inputs (dtype and dims), attrs,
 * outputs and what its first output must be: its dims, and where the value
 * is a fact (a sum over an empty axis is 0, a mean over 0 elements is NaN),
 * every element; or the error it must give. The expected results follow
 * PyTorch 1.13 (torch.sum / torch.mean / F.cross_entropy / F.batch_norm on
 * empty inputs; argmax over an empty axis and reshape's ambiguous -1 are
 * errors there too). The backward run checks that every input gradient has
 * its input's dims. test_every_op_is_covered checks that every op type of
 * ops.def is run here, as a row or as a grad op a row's backward makes, or
 * stands in `k_excluded` with the reason: a new op cannot skip this table.
 *
 * test_train_empty_batch trains the MLP and the CNN of models.h on an empty
 * batch with the Executor and the ParallelExecutor: the loss is NaN (the
 * mean of 0 rows, as torch.mean), every parameter gradient is 0 (a sum over
 * 0 rows), so SGD leaves the parameters as they were, and the next batch
 * trains as usual; 0 rows over 2 places stays an error (fewer rows than
 * places). test_list_feed_with_an_empty_place: a list feed giving one of 2
 * places 0 rows trains like the Executor on the other place's rows.
 * test_empty_parameter: a 0-element parameter trained by SGD, Momentum and
 * Adam with the Executor and on 1 and 2 places (sharded updates). Runs in
 * the ASan build (ASan + UBSan) with the rest of ctest. */
#include "tests/unit/op_test_util.h"
#include "tests/unit/models.h"

#include <stdlib.h>

#include "pe/ops.h"
#include "pe/passes.h"

typedef struct empty_row {
    const char *op;
    const char *ins;    /* "Slot=f[0,3] ..."; dtype f fp32, d fp64, i int32, l int64, b bool; a slot may repeat;
                         * "f[0,3]{0,0}": with a LoD (offsets, levels split by '/') */
    const char *outs;   /* output slots, in order; a slot may repeat ("Out Out": two parts) */
    const char *attrs;  /* "name=value ...", types from the registry; lists comma-separated */
    const char *want;   /* dims of the first output, "[0,3]" */
    const char *value;  /* NULL, or every element of the first output: "0", "nan", "1.5" */
    const char *err;    /* non-NULL: the forward run must fail with this in the message */
    bool grad;          /* also run the backward of the first output */
} empty_row;

static const empty_row k_rows[] = {
    /* elementwise */
    {"elementwise_add", "X=f[0,3] Y=f[3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"elementwise_sub", "X=f[0,3] Y=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"elementwise_mul", "X=f[0,3] Y=f[3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"elementwise_div", "X=f[2,0] Y=f[2,0]", "Out", "", "[2,0]", NULL, NULL, true},
    {"elementwise_max", "X=f[0,3] Y=f[3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"elementwise_min", "X=f[2,0] Y=f[2,0]", "Out", "", "[2,0]", NULL, NULL, true},
    {"elementwise_pow", "X=d[0,3] Y=d[1,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"elementwise_mod", "X=f[0,3] Y=f[3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"elementwise_floordiv", "X=l[0,3] Y=l[3]", "Out", "", "[0,3]", NULL, NULL, false}, /* Y's 0s are never read */
    {"equal", "X=f[0,3] Y=f[3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"not_equal", "X=i[0,3] Y=i[0,3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"less_than", "X=d[2,0] Y=d[2,1]", "Out", "", "[2,0]", NULL, NULL, false},
    {"less_equal", "X=l[0] Y=l[1]", "Out", "", "[0]", NULL, NULL, false},
    {"greater_than", "X=b[0,3] Y=b[3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"greater_equal", "X=f[3,0] Y=f[3,1]", "Out", "axis=0", "[3,0]", NULL, NULL, false},
    {"logical_and", "X=b[0,3] Y=b[3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"logical_or", "X=b[0,3] Y=b[0,3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"logical_xor", "X=b[2,0] Y=b[1,0]", "Out", "", "[2,0]", NULL, NULL, false},
    {"logical_not", "X=b[0,3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"where", "Condition=b[0,3] X=f[0,3] Y=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"where", "Condition=b[2,0] X=l[2,0] Y=l[2,0]", "Out", "", "[2,0]", NULL, NULL, false},
    {"logical_and", "X=b[0,3] Y=f[3]", "Out", "", NULL, NULL, "they must match", false},
    {"relu", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"sigmoid", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"tanh", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"scale", "X=f[0,3]", "Out", "scale=2", "[0,3]", NULL, NULL, true},
    {"cast", "X=f[0,3]", "Out", "out_dtype=1", "[0,3]", NULL, NULL, true},
    /* math: empty batch, K = 0 (the product is zeros), an empty output column */
    {"mul", "X=f[0,3] Y=f[3,4]", "Out", "", "[0,4]", NULL, NULL, true},
    {"mul", "X=f[2,0] Y=f[0,4]", "Out", "", "[2,4]", "0", NULL, true},
    {"mul", "X=f[2,3] Y=f[3,0]", "Out", "", "[2,0]", NULL, NULL, true},
    {"matmul", "X=f[0,3] Y=f[3,4]", "Out", "", "[0,4]", NULL, NULL, true},
    {"matmul", "X=f[2,0] Y=f[0,4]", "Out", "alpha=2", "[2,4]", "0", NULL, true},
    {"matmul_v2", "X=f[2,0] Y=f[0,4]", "Out", "", "[2,4]", "0", NULL, true},
    {"matmul_v2", "X=f[0,2,3] Y=f[3,4]", "Out", "", "[0,2,4]", NULL, NULL, true},
    {"lookup_table_v2", "W=f[5,3] Ids=l[0]", "Out", "", "[0,3]", NULL, NULL, true},
    {"lookup_table", "W=f[5,3] Ids=l[0,1]", "Out", "", "[0,3]", NULL, NULL, true},
    {"layer_norm", "X=f[0,4] Scale=f[4] Bias=f[4]", "Y Mean Variance", "", "[0,4]", NULL, NULL, true},
    /* reductions: sum over nothing is 0, mean over nothing is NaN (torch.sum / torch.mean) */
    {"mean", "X=f[0,3]", "Out", "", "[1]", "nan", NULL, true},
    {"sum", "X=f[0,3] X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"softmax", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"softmax", "X=f[2,0]", "Out", "", "[2,0]", NULL, NULL, true},
    {"arg_max", "X=f[0,3]", "Out", "", "[0]", NULL, NULL, false},
    {"arg_max", "X=f[2,0]", "Out", "", NULL, NULL, "empty along the reduced axis", false},
    {"top_k", "X=f[0,5]", "Out Indices", "k=2", "[0,2]", NULL, NULL, false},
    /* accuracy of 0 samples is 0, not NaN (Paddle's op; torchmetrics' zero_division default) */
    {"accuracy", "Out=f[0,1] Indices=l[0,1] Label=l[0,1]", "Accuracy Correct Total", "", "[1]", "0", NULL, false},
    {"reduce_sum", "X=f[0,3]", "Out", "dim=0", "[3]", "0", NULL, true},
    {"reduce_sum", "X=f[0,3]", "Out", "reduce_all=true", "[1]", "0", NULL, true},
    {"reduce_mean", "X=f[0,3]", "Out", "dim=0", "[3]", "nan", NULL, true},
    {"reduce_mean", "X=f[0,3]", "Out", "dim=1", "[0]", NULL, NULL, true},
    /* reduce_max / min / prod / any / all: prod over nothing is 1, any false, all
     * true (torch); max / min over nothing have no value (an error, as torch.amax) */
    {"reduce_max", "X=f[0,3]", "Out", "dim=1", "[0]", NULL, NULL, true},
    {"reduce_max", "X=f[0,3]", "Out", "dim=0", NULL, NULL, "empty along the reduced dims", false},
    {"reduce_min", "X=d[2,0]", "Out", "dim=0", "[0]", NULL, NULL, true},
    {"reduce_min", "X=l[2,0]", "Out", "reduce_all=true", NULL, NULL, "empty along the reduced dims", false},
    {"reduce_prod", "X=f[0,3]", "Out", "dim=0", "[3]", "1", NULL, true},
    {"reduce_prod", "X=i[3,0]", "Out", "dim=1 keep_dim=true", "[3,1]", "1", NULL, false},
    {"reduce_any", "X=b[0,3]", "Out", "dim=0", "[3]", "0", NULL, false},
    {"reduce_all", "X=b[3,0]", "Out", "dim=1", "[3]", "1", NULL, false},
    {"reduce_all", "X=b[0]", "Out", "reduce_all=true", "[1]", "1", NULL, false},
    /* activations */
    {"leaky_relu", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"gelu", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"log_softmax", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"log_softmax", "X=f[2,0]", "Out", "", "[2,0]", NULL, NULL, true},
    {"dropout", "X=f[0,3]", "Out Mask", "", "[0,3]", NULL, NULL, true},
    /* math unary ops (ops/math_unary.c); clip checks its attrs even on no elements */
    {"exp", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"log", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"sqrt", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"rsqrt", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"square", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"abs", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"sign", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"floor", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"ceil", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"round", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"pow", "X=f[0,3]", "Out", "factor=2", "[0,3]", NULL, NULL, true},
    {"clip", "X=f[0,3]", "Out", "min=-1 max=1", "[0,3]", NULL, NULL, true},
    {"relu6", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"elu", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"softplus", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"swish", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"hard_sigmoid", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"selu", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"clip", "X=d[2,0]", "Out", "min=1 max=0", NULL, NULL, "is greater than attr max", false},
    /* losses: one loss per row, so 0 rows give an empty loss (its mean is NaN) */
    {"softmax_with_cross_entropy", "Logits=f[0,5] Label=l[0,1]", "Loss Softmax", "", "[0,1]", NULL, NULL, true},
    {"softmax_with_cross_entropy", "Logits=f[0,5] Label=f[0,5]", "Loss Softmax", "soft_label=true", "[0,1]", NULL,
     NULL, true},
    {"cross_entropy", "X=f[0,5] Label=l[0,1]", "Y", "", "[0,1]", NULL, NULL, true},
    {"cos_sim", "X=f[0,4] Y=f[0,4]", "Out XNorm YNorm", "", "[0,1]", NULL, NULL, true},
    {"cos_sim", "X=f[0,4] Y=f[1,4]", "Out XNorm YNorm", "", "[0,1]", NULL, NULL, true},
    {"cos_sim", "X=f[3,0] Y=f[3,0]", "Out XNorm YNorm", "", "[3,1]", "nan", NULL, true},
    {"cos_sim", "X=f[3,4] Y=f[2,4]", "Out XNorm YNorm", "", NULL, NULL, "or with 1 as the first dim", false},
    {"sigmoid_cross_entropy_with_logits", "X=f[0,5] Label=f[0,5]", "Out", "normalize=true", "[0,5]", NULL, NULL, true},
    {"sigmoid_cross_entropy_with_logits", "X=f[2,5] Label=d[2,5]", "Out", "", NULL, NULL, "one probability per logit", false},
    {"label_smooth", "X=f[0,5]", "Out", "epsilon=0.1", "[0,5]", NULL, NULL, true},
    {"label_smooth", "X=f[2,0] PriorDist=f[1,0]", "Out", "epsilon=0.1", "[2,0]", NULL, NULL, true},
    {"label_smooth", "X=f[2,3] PriorDist=f[1,4]", "Out", "", NULL, NULL, "expected 3 values", false},
    {"square_error_cost", "X=f[0,1] Y=f[0,1]", "Out", "", "[0,1]", NULL, NULL, true},
    /* shape and data movement */
    {"reshape2", "X=f[0,3]", "Out XShape", "shape=-1,3", "[0,3]", NULL, NULL, true},
    {"reshape2", "X=f[0,3]", "Out XShape", "shape=0,-1", NULL, NULL, "cannot infer the -1", false},
    {"transpose2", "X=f[0,3]", "Out XShape", "axis=1,0", "[3,0]", NULL, NULL, true},
    {"concat", "X=f[0,3] X=f[2,3]", "Out", "", "[2,3]", NULL, NULL, true},
    {"concat", "X=f[0,3] X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"split", "X=f[0,3]", "Out Out", "num=2", "[0,3]", NULL, NULL, true},
    {"split", "X=f[0,3]", "Out Out", "sections=0,-1", "[0,3]", NULL, NULL, true},
    {"split", "X=f[2,3]", "Out Out", "sections=0,3 axis=1", "[2,0]", NULL, NULL, true},
    /* stack / unstack: empty parts, an empty whole; unstack's num must be dims[axis] */
    {"stack", "X=f[0,3] X=f[0,3]", "Y", "axis=1", "[0,2,3]", NULL, NULL, true},
    {"stack", "X=f[2,0] X=f[2,0]", "Y", "axis=-1", "[2,0,2]", NULL, NULL, true},
    {"unstack", "X=f[0,2]", "Y Y", "axis=1 num=2", "[0]", NULL, NULL, true},
    {"unstack", "X=f[2,0,3]", "Y Y", "num=2", "[0,3]", NULL, NULL, true},
    {"unstack", "X=f[2,3]", "Y Y", "num=3", NULL, NULL, "attr num", false},
    /* tile / expand_v2 (empty X, a broadcast to 0), cumsum, assign, shape, increment */
    {"tile", "X=f[0,3]", "Out", "repeat_times=2,2", "[0,6]", NULL, NULL, true},
    {"tile", "X=f[2,3]", "Out", "repeat_times=0", NULL, NULL, "repeats must be positive", false},
    {"expand_v2", "X=f[0,1]", "Out", "shape=0,4", "[0,4]", NULL, NULL, true},
    {"expand_v2", "X=f[2,1]", "Out", "shape=2,0", "[2,0]", NULL, NULL, true},
    {"expand_v2", "X=f[2,3]", "Out", "shape=2,4", NULL, NULL, "does not fit", false},
    {"cumsum", "X=f[0,3]", "Out", "axis=0", "[0,3]", NULL, NULL, true},
    {"cumsum", "X=d[2,0]", "Out", "flatten=true", "[0]", NULL, NULL, true},
    {"assign", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"shape", "Input=f[0,3]", "Out", "", "[2]", NULL, NULL, false},
    {"increment", "X=f[0]", "Out", "", NULL, NULL, "expected one element", false},
    {"increment", "X=f[1]", "Out", "step=1", "[1]", "1.5", NULL, false},
    /* gather / gather_nd / scatter: no indices, empty rows; an index into an empty axis; one_hot */
    {"gather", "X=f[4,3] Index=l[0]", "Out", "", "[0,3]", NULL, NULL, true},
    {"gather", "X=f[0,3] Index=i[0]", "Out", "", "[0,3]", NULL, NULL, true},
    {"gather", "X=f[0,2] Index=l[3]", "Out", "axis=1", "[0,3]", NULL, NULL, true},
    {"gather", "X=f[0,3] Index=l[2]", "Out", "", NULL, NULL, "outside [0, 0)", false},
    {"gather_nd", "X=f[4,3] Index=l[0,1]", "Out", "", "[0,3]", NULL, NULL, true},
    {"gather_nd", "X=f[0,3] Index=l[2,0]", "Out", "", "[2,0,3]", NULL, NULL, true},
    {"scatter", "X=f[0,3] Ids=l[0] Updates=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"scatter", "X=f[3,0] Ids=l[2] Updates=f[2,0]", "Out", "overwrite=false", "[3,0]", NULL, NULL, true},
    {"scatter", "X=f[3,2] Ids=l[0] Updates=f[0,2]", "Out", "overwrite=false", "[3,2]", "0.5", NULL, true},
    {"one_hot_v2", "X=l[0]", "Out", "depth=4", "[0,4]", NULL, NULL, false},
    {"one_hot_v2", "X=i[2]", "Out", "", NULL, NULL, "attr depth", false},
    {"one_hot", "X=l[0,1]", "Out", "depth=3", "[0,3]", NULL, NULL, false},
    {"one_hot", "X=l[2,3]", "Out", "depth=3", NULL, NULL, "last dim to be 1", false},
    /* pad / pad2d / pad3d: empty batches, constant pads of an empty dim; modes that repeat need data */
    {"pad", "X=f[0,3]", "Out", "paddings=1,1,0,2", "[2,5]", "0", NULL, true},
    {"pad", "X=f[2,0]", "Out", "paddings=0,0,0,0", "[2,0]", NULL, NULL, true},
    {"pad", "X=f[2,3]", "Out", "paddings=1,1", NULL, NULL, "expected 4", false},
    {"pad2d", "X=f[0,2,3,3]", "Out", "paddings=1,1,1,1 mode=reflect", "[0,2,5,5]", NULL, NULL, true},
    {"pad2d", "X=f[1,2,0,3]", "Out", "paddings=1,1,0,0 pad_value=2", "[1,2,2,3]", "2", NULL, true},
    {"pad2d", "X=f[1,2,0,3]", "Out", "paddings=1,1,0,0 mode=edge", NULL, NULL, "nothing to repeat", false},
    {"pad2d", "X=f[1,1,2,2]", "Out", "paddings=2,0,0,0 mode=reflect", NULL, NULL, "each pad < the dim", false},
    {"pad3d", "X=f[0,1,2,2,2]", "Out", "paddings=1,1,1,1,1,1 mode=circular", "[0,1,4,4,4]", NULL, NULL, true},
    {"pad3d", "X=f[1,1,2,2,2]", "Out", "mode=wrap", NULL, NULL, "attr mode", false},
    {"slice", "Input=f[4,3]", "Out", "axes=0 starts=2 ends=2", "[0,3]", NULL, NULL, true},
    {"slice", "Input=f[0,3]", "Out", "axes=1 starts=0 ends=2", "[0,2]", NULL, NULL, true},
    {"flatten_contiguous_range", "X=f[0,3,2]", "Out XShape", "", "[0,6]", NULL, NULL, true},
    {"flatten2", "X=f[0,3,2]", "Out XShape", "", "[0,6]", NULL, NULL, true},
    {"squeeze2", "X=f[0,1,3]", "Out XShape", "axes=1", "[0,3]", NULL, NULL, true},
    {"unsqueeze2", "X=f[0,3]", "Out XShape", "axes=1", "[0,1,3]", NULL, NULL, true},
    {"fill_constant", "", "Out", "shape=0,3 value=1", "[0,3]", NULL, NULL, false},
    /* nn through oneDNN: N = 0 (oneDNN is never called with it) */
    {"conv2d", "Input=f[0,2,5,5] Filter=f[4,2,3,3] Bias=f[4]", "Output", "", "[0,4,3,3]", NULL, NULL, true},
    {"pool2d", "X=f[0,2,4,4]", "Out", "ksize=2,2 strides=2,2", "[0,2,2,2]", NULL, NULL, true},
    {"depthwise_conv2d", "Input=f[0,3,5,5] Filter=f[3,1,3,3]", "Output", "groups=3 paddings=1,1", "[0,3,5,5]", NULL,
     NULL, true},
    {"conv2d_transpose", "Input=f[0,4,3,3] Filter=f[4,2,3,3]", "Output", "strides=2,2 paddings=1,1 output_padding=1,1",
     "[0,2,6,6]", NULL, NULL, true},
    {"conv2d_transpose", "Input=f[2,4,3,3] Filter=f[4,0,3,3]", "Output", "", NULL, NULL, "empty dimension", false},
    {"nearest_interp_v2", "X=f[0,2,3,3]", "Out", "out_h=6 out_w=5", "[0,2,6,5]", NULL, NULL, true},
    {"bilinear_interp_v2", "X=f[2,0,3,3]", "Out", "scale=2,1.5 align_corners=false align_mode=0", "[2,0,6,4]", NULL,
     NULL, true},
    {"bilinear_interp_v2", "X=f[1,2,0,3]", "Out", "out_h=2 out_w=2", NULL, NULL, "empty plane", false},
    {"group_norm", "X=f[0,4,2,2] Scale=f[4] Bias=f[4]", "Y Mean Variance", "groups=2", "[0,4,2,2]", NULL, NULL, true},
    {"instance_norm", "X=f[0,3,2,2] Scale=f[3] Bias=f[3]", "Y SavedMean SavedVariance", "", "[0,3,2,2]", NULL, NULL,
     true},
    {"instance_norm", "X=f[2,0,3]", "Y SavedMean SavedVariance", "", "[2,0,3]", NULL, NULL, true},
    {"group_norm", "X=f[2,0,3]", "Y Mean Variance", "groups=2", "[2,0,3]", NULL, NULL, true},
    {"group_norm", "X=f[2,4,0] Scale=f[4]", "Y Mean Variance", "groups=2", "[2,4,0]", NULL, NULL, true},
    {"group_norm", "X=f[2,6,3]", "Y Mean Variance", "groups=4", NULL, NULL, "divide X", false},
    {"pool2d", "X=f[0,2,4,4]", "Out", "ksize=2,2 pooling_type=avg", "[0,2,3,3]", NULL, NULL, true},
    {"batch_norm", "X=f[0,3,2,2] Scale=f[3] Bias=f[3] Mean=f[3] Variance=f[3]",
     "Y MeanOut VarianceOut SavedMean SavedVariance", "", "[0,3,2,2]", NULL, NULL, true},
    {"batch_norm", "X=f[0,3,2,2] Scale=f[3] Bias=f[3] Mean=f[3] Variance=f[3]", "Y", "is_test=true", "[0,3,2,2]",
     NULL, NULL, false},
    /* initializers and fills with a 0 in the shape */
    {"uniform_random", "", "Out", "shape=0,3", "[0,3]", NULL, NULL, false},
    {"gaussian_random", "", "Out", "shape=3,0", "[3,0]", NULL, NULL, false},
    {"truncated_gaussian_random", "", "Out", "shape=0", "[0]", NULL, NULL, false},
    {"assign_value", "", "Out", "shape=0,2", "[0,2]", NULL, NULL, false},
    {"fill_any_like", "X=f[0,3]", "Out", "value=1", "[0,3]", NULL, NULL, false},
    /* optimizers on 0-element params (and a merged op with an empty member) */
    {"sgd", "Param=f[0] Grad=f[0] LearningRate=f[1]", "ParamOut", "", "[0]", NULL, NULL, false},
    {"momentum", "Param=f[0,3] Grad=f[0,3] Velocity=f[0,3] LearningRate=f[1]", "ParamOut VelocityOut", "", "[0,3]",
     NULL, NULL, false},
    {"adam",
     "Param=f[0] Grad=f[0] LearningRate=f[1] Moment1=f[0] Moment2=f[0] Beta1Pow=f[1] Beta2Pow=f[1]",
     "ParamOut Moment1Out Moment2Out", "", "[0]", NULL, NULL, false},
    {"adagrad", "Param=f[0] Grad=f[0] Moment=f[0] LearningRate=f[1]", "ParamOut MomentOut", "", "[0]", NULL, NULL,
     false},
    {"rmsprop", "Param=f[0,3] MeanSquare=f[0,3] Grad=f[0,3] Moment=f[0,3] LearningRate=f[1] MeanGrad=f[0,3]",
     "ParamOut MomentOut MeanSquareOut MeanGradOut", "centered=true", "[0,3]", NULL, NULL, false},
    {"adamax", "Param=f[0] Grad=f[0] LearningRate=f[1] Moment=f[0] InfNorm=f[0] Beta1Pow=f[1]",
     "ParamOut MomentOut InfNormOut", "", "[0]", NULL, NULL, false},
    {"adamw",
     "Param=f[0] Grad=f[0] LearningRate=f[1] Moment1=f[0] Moment2=f[0] Beta1Pow=f[1] Beta2Pow=f[1]",
     "ParamOut Moment1Out Moment2Out", "with_decay=true", "[0]", NULL, NULL, false},
    {"lamb",
     "Param=f[0] Grad=f[0] LearningRate=f[1] Moment1=f[0] Moment2=f[0] Beta1Pow=f[1] Beta2Pow=f[1]",
     "ParamOut Moment1Out Moment2Out", "weight_decay=0.01", "[0]", NULL, NULL, false},
    {"clip_by_global_norm", "X=f[0] X=f[2]", "Out Out", "max_global_norm=1", "[0]", NULL, NULL, false},
    {"clip_by_global_norm", "X=f[0,3]", "Out", "max_global_norm=1", "[0,3]", NULL, NULL, false},
    /* more shapes of the same ops: an empty reduced axis, an empty last dim, an empty piece */
    {"reduce_sum", "X=f[3,0]", "Out", "dim=1", "[3]", "0", NULL, true},
    {"reduce_sum", "X=f[3,0,2]", "Out", "dim=0 keep_dim=true", "[1,0,2]", NULL, NULL, true},
    {"reduce_mean", "X=f[3,0]", "Out", "dim=1", "[3]", "nan", NULL, true},
    {"reduce_mean", "X=f[2,0,3]", "Out", "dim=1", "[2,3]", "nan", NULL, true},
    {"reduce_mean", "X=f[0,3]", "Out", "reduce_all=true", "[1]", "nan", NULL, true},
    {"mean", "X=d[0]", "Out", "", "[1]", "nan", NULL, true},
    {"sum", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"softmax_with_cross_entropy", "Logits=f[2,0] Label=f[2,0]", "Loss Softmax", "soft_label=true", NULL, NULL,
     "has no classes", false},
    {"softmax_with_cross_entropy", "Logits=f[0,5,2] Label=l[0,1,2]", "Loss Softmax", "axis=1", "[0,1,2]", NULL, NULL,
     true},
    {"cross_entropy", "X=f[0,5] Label=f[0,5]", "Y", "soft_label=true", "[0,1]", NULL, NULL, true},
    {"layer_norm", "X=f[0,2,3] Scale=f[6] Bias=f[6]", "Y Mean Variance", "", "[0,2,3]", NULL, NULL, true},
    {"layer_norm", "X=f[2,0]", "Y Mean Variance", "", "[2,0]", NULL, NULL, true},
    {"top_k", "X=f[2,0]", "Out Indices", "k=1", NULL, NULL, "k", false},
    {"arg_max", "X=f[0,3]", "Out", "flatten=true", NULL, NULL, "empty", false},
    {"arg_max", "X=f[0,3]", "Out", "axis=1 keepdims=true", "[0,1]", NULL, NULL, false},
    {"accuracy", "Out=f[0,3] Indices=l[0,3] Label=l[0,1]", "Accuracy Correct Total", "", "[1]", "0", NULL, false},
    {"concat", "X=f[2,0] X=f[2,3] X=f[2,0]", "Out", "axis=1", "[2,3]", NULL, NULL, true},
    {"split", "X=f[2,0]", "Out Out", "num=2 axis=1", "[2,0]", NULL, NULL, true},
    {"slice", "Input=f[4,3]", "Out", "axes=0,1 starts=3,1 ends=1,3 decrease_axis=", "[0,2]", NULL, NULL, true},
    {"transpose2", "X=f[0,3,2]", "Out XShape", "axis=2,0,1", "[2,0,3]", NULL, NULL, true},
    {"squeeze2", "X=f[0,1,3]", "Out XShape", "", "[0,3]", NULL, NULL, true},
    {"lookup_table_v2", "W=f[0,3] Ids=l[0]", "Out", "", "[0,3]", NULL, NULL, true},
    {"mul", "X=f[2,0,3] Y=f[3,4]", "Out", "x_num_col_dims=2", "[2,0,4]", NULL, NULL, true},
    {"matmul_v2", "X=f[2,3,0] Y=f[2,0,4]", "Out", "", "[2,3,4]", "0", NULL, true},
    {"matmul", "X=f[0,3] Y=f[4,3]", "Out", "transpose_Y=true", "[0,4]", NULL, NULL, true},
    {"elementwise_add", "X=l[0,3] Y=l[3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"elementwise_mul", "X=f[2,0,3] Y=f[0]", "Out", "axis=1", "[2,0,3]", NULL, NULL, true},
    {"cast", "X=l[0,3]", "Out", "in_dtype=3 out_dtype=0", "[0,3]", NULL, NULL, false},
    /* broadcast gradients summed over an empty dim are 0 */
    {"elementwise_add", "X=f[2,0,3] Y=f[2,1,3]", "Out", "", "[2,0,3]", NULL, NULL, true},
    {"elementwise_mul", "X=f[0,3] Y=f[1,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"elementwise_sub", "X=f[2,1,3] Y=f[2,0,1]", "Out", "", "[2,0,3]", NULL, NULL, true},
    {"elementwise_div", "X=f[3,0,2] Y=f[0,1]", "Out", "axis=1", "[3,0,2]", NULL, NULL, true},
    {"fused_elemwise_activation_grad", "X=f[2,0,3] Y=f[2,1,3] Out=f[2,0,3] Out@GRAD=f[2,0,3]", "Y@GRAD X@GRAD",
     "functor_list=relu,elementwise_add", "[2,1,3]", "0", NULL, false},
    {"scale", "X=f[0]", "Out", "bias=1", "[0]", NULL, NULL, true},
    {"dropout", "X=f[0,3]", "Out Mask", "is_test=true", "[0,3]", NULL, NULL, true},
    {"dropout", "X=f[0,3]", "Out Mask", "dropout_implementation=upscale_in_train", "[0,3]", NULL, NULL, true},
    {"conv2d", "Input=f[0,4,5,5] Filter=f[4,2,3,3]", "Output", "groups=2 paddings=1,1 strides=2,2", "[0,4,3,3]", NULL,
     NULL, true},
    {"pool2d", "X=f[0,2,4,4]", "Out", "ksize=1,1 global_pooling=true pooling_type=avg", "[0,2,1,1]", NULL, NULL, true},
    {"pool2d", "X=f[0,2,4,4]", "Out", "ksize=1,1 adaptive=true", "[0,2,1,1]", NULL, NULL, true},
    {"batch_norm", "X=f[0,3] Scale=f[3] Bias=f[3] Mean=f[3] Variance=f[3]",
     "Y MeanOut VarianceOut SavedMean SavedVariance", "", "[0,3]", NULL, NULL, true},
    {"fill_any_like", "X=f[0,3] ValueTensor=d[1]", "Out", "", "[0,3]", NULL, NULL, false},
    {"fill_constant", "", "Out", "shape=0 dtype=3", "[0]", NULL, NULL, false},
    {"clip_by_global_norm", "X=f[0] X=f[0,2]", "Out Out", "max_global_norm=1", "[0]", NULL, NULL, false},
    /* fused ops (made by the fusion passes; their grads have no grad maker) */
    {"fc", "Input=f[0,3] W=f[3,4] Bias=f[4]", "Out", "activation_type=relu", "[0,4]", NULL, NULL, false},
    {"fc", "Input=f[2,0] W=f[0,4] Bias=f[4]", "Out", "", "[2,4]", "0.5", NULL, false},
    {"fc_grad", "Input=f[0,3] W=f[3,4] Bias=f[4] Out=f[0,4] Out@GRAD=f[0,4]",
     "W@GRAD Input@GRAD Bias@GRAD PreAct@GRAD", "activation_type=relu", "[3,4]", "0", NULL, false},
    {"fc_grad", "Input=f[2,0] W=f[0,4] Out@GRAD=f[2,4]", "Input@GRAD W@GRAD", "", "[2,0]", NULL, NULL, false},
    {"fused_elemwise_activation", "X=f[0,3] Y=f[3]", "Out IntermediateOut",
     "functor_list=relu,elementwise_add save_intermediate_out=true", "[0,3]", NULL, NULL, false},
    {"fused_elemwise_activation_grad", "X=f[0,3] Y=f[3] Out=f[0,3] Out@GRAD=f[0,3]", "Y@GRAD X@GRAD",
     "functor_list=relu,elementwise_add", "[3]", "0", NULL, false},
    /* collectives over a world of one rank (the Executor): Out = X; c_identity's and
     * c_allreduce_sum's backward are each other */
    {"c_allreduce_sum", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"c_allreduce_max", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"c_allreduce_min", "X=l[2,0]", "Out", "", "[2,0]", NULL, NULL, false},
    {"c_allreduce_prod", "X=d[0]", "Out", "", "[0]", NULL, NULL, false},
    {"c_broadcast", "X=f[0,3]", "Out", "root=0", "[0,3]", NULL, NULL, false},
    {"c_reduce_sum", "X=f[0,3]", "Out", "root_id=0", "[0,3]", NULL, NULL, false},
    {"c_reduce_max", "X=i[0,3]", "Out", "", "[0,3]", NULL, NULL, false},
    {"c_reduce_min", "X=d[2,0]", "Out", "", "[2,0]", NULL, NULL, false},
    {"c_reduce_prod", "X=f[0]", "Out", "root_id=0", "[0]", NULL, NULL, false},
    {"c_allgather", "X=f[0,3]", "Out", "nranks=1", "[0,3]", NULL, NULL, false},
    {"c_scatter", "X=f[0,3]", "Out", "nranks=1 root=0", "[0,3]", NULL, NULL, false},
    {"c_identity", "X=f[0,3]", "Out", "", "[0,3]", NULL, NULL, true},
    {"c_sync_calc_stream", "X=f[0,3] X=f[2,0]", "Out Out", "", "[0,3]", NULL, NULL, false},
    {"c_sync_comm_stream", "X=f[0,3]", "Out", "ring_id=0", "[0,3]", NULL, NULL, false},
    {"merged_sgd", "Param=f[0] Param=f[2] Grad=f[0] Grad=f[2] LearningRate=f[1]", "ParamOut ParamOut", "", "[0]", NULL,
     NULL, false},
    {"merged_momentum",
     "Param=f[0] Param=f[2] Grad=f[0] Grad=f[2] Velocity=f[0] Velocity=f[2] LearningRate=f[1]",
     "ParamOut ParamOut VelocityOut VelocityOut", "", "[0]", NULL, NULL, false},
    {"merged_adam",
     "Param=f[0] Param=f[2] Grad=f[0] Grad=f[2] LearningRate=f[1] Moment1=f[0] Moment1=f[2] Moment2=f[0] "
     "Moment2=f[2] Beta1Pow=f[1] Beta1Pow=f[1] Beta2Pow=f[1] Beta2Pow=f[1]",
     "ParamOut ParamOut Moment1Out Moment1Out Moment2Out Moment2Out", "", "[0]", NULL, NULL, false},
    {"merged_adagrad", "Param=f[0] Param=f[2] Grad=f[0] Grad=f[2] Moment=f[0] Moment=f[2] LearningRate=f[1]",
     "ParamOut ParamOut MomentOut MomentOut", "", "[0]", NULL, NULL, false},
    {"merged_rmsprop",
     "Param=f[0] Param=f[2] MeanSquare=f[0] MeanSquare=f[2] Grad=f[0] Grad=f[2] Moment=f[0] Moment=f[2] "
     "LearningRate=f[1]",
     "ParamOut ParamOut MomentOut MomentOut MeanSquareOut MeanSquareOut", "", "[0]", NULL, NULL, false},
    {"merged_adamax",
     "Param=f[0] Param=f[2] Grad=f[0] Grad=f[2] LearningRate=f[1] Moment=f[0] Moment=f[2] InfNorm=f[0] "
     "InfNorm=f[2] Beta1Pow=f[1] Beta1Pow=f[1]",
     "ParamOut ParamOut MomentOut MomentOut InfNormOut InfNormOut", "", "[0]", NULL, NULL, false},
    /* sequences (LoD): no sequences, empty sequences (pad_value, no gradient), no repeats, no lengths */
    {"sequence_pool", "X=f[0,3]{0}", "Out MaxIndex", "pooltype=SUM", "[0,3]", NULL, NULL, true},
    {"sequence_pool", "X=f[0,3]{0,0,0}", "Out MaxIndex", "pooltype=AVERAGE", "[2,3]", "0", NULL, true},
    {"sequence_pool", "X=f[0,3]{0,0}", "Out MaxIndex", "pooltype=MAX pad_value=1.5", "[1,3]", "1.5", NULL, true},
    {"sequence_pool", "X=f[2,3]{0,0,2}", "Out MaxIndex", "pooltype=SQRT", "[2,3]", NULL, NULL, true},
    {"sequence_pool", "X=f[0,3]", "Out MaxIndex", "pooltype=LAST", NULL, NULL, "has no LoD", false},
    {"sequence_softmax", "X=f[0]{0,0}", "Out", "", "[0]", NULL, NULL, true},
    {"sequence_softmax", "X=d[0,1]{0}", "Out", "", "[0,1]", NULL, NULL, true},
    /* recurrent: no rows (no sequences, empty ones, with H0 / C0: their gradient is zeros), H = 0 */
    {"lstm", "Input=f[0,8]{0} Weight=f[2,8] Bias=f[1,14]", "Hidden Cell BatchGate BatchCellPreAct", "", "[0,2]", NULL, NULL, true},
    {"lstm", "Input=f[0,8]{0,0,0} Weight=f[2,8] Bias=f[1,8] H0=f[2,2] C0=f[2,2]", "Hidden Cell BatchGate BatchCellPreAct", "use_peepholes=false", "[0,2]", NULL, NULL, true},
    {"lstm", "Input=d[3,0]{0,3} Weight=d[0,0] Bias=d[1,0]", "Hidden Cell BatchGate BatchCellPreAct", "", "[3,0]", NULL, NULL, true},
    {"lstm", "Input=f[2,8] Weight=f[2,8] Bias=f[1,14]", "Hidden Cell BatchGate BatchCellPreAct", "", NULL, NULL, "has no LoD", false},
    {"gru", "Input=f[0,6]{0,0} Weight=f[2,6] Bias=f[1,6] H0=f[1,2]", "Hidden BatchGate BatchResetHiddenPrev BatchHidden", "", "[0,2]", NULL, NULL, true},
    {"gru", "Input=d[0,6]{0} Weight=d[2,6]", "Hidden BatchGate BatchResetHiddenPrev BatchHidden", "origin_mode=true", "[0,2]", NULL, NULL, true},
    {"sequence_expand", "X=f[2,3] Y=l[0,1]{0,0,0}", "Out", "", "[0,3]", NULL, NULL, true},
    {"sequence_expand", "X=f[0,3]{0,0,0} Y=l[4,1]{0,3,4}", "Out", "", "[0,3]", NULL, NULL, true},
    {"sequence_expand", "Y=l[0,1] X=f[2,3]", "Out", "", NULL, NULL, "Y 'in0' has no LoD", false},
    {"sequence_conv", "X=f[0,3]{0} Filter=f[9,4]", "Out", "contextLength=3 contextStart=-1", "[0,4]", NULL, NULL,
     true},
    {"sequence_conv", "X=d[0,2]{0,0,0} Filter=d[4,3]", "Out", "contextLength=2", "[0,3]", NULL, NULL, true},
    {"sequence_conv", "X=f[3,0]{0,1,3} Filter=f[0,5]", "Out", "contextLength=4 contextStart=-2", "[3,5]", "0", NULL,
     true},
    {"sequence_conv", "X=f[2,3]{0,2} Filter=f[6,0]", "Out", "contextLength=2", "[2,0]", NULL, NULL, true},
    {"sequence_conv", "X=f[0,3] Filter=f[9,4]", "Out", "contextLength=3", NULL, NULL, "has no LoD", false},
    {"sequence_conv", "X=f[0,3]{0} Filter=f[9,4]", "Out", "contextLength=3 contextStride=2", NULL, NULL,
     "contextStride = 2", false},
    {"sequence_conv", "X=f[0,3]{0} Filter=f[9,4]", "Out", "contextLength=3 paddingTrainable=true", NULL, NULL,
     "paddingTrainable = true", false},
    {"sequence_conv", "X=f[0,3]{0} Filter=f[8,4]", "Out", "contextLength=3", NULL, NULL, "[contextLength * D, N]",
     false},
    {"sequence_mask", "X=l[0]", "Y", "maxlen=4", "[0,4]", NULL, NULL, false},
    {"sequence_mask", "X=i[0,2]", "Y", "", "[0,2,0]", NULL, NULL, false},
    {"sequence_mask", "X=l[3]", "Y", "maxlen=0", "[3,0]", NULL, NULL, false},
    {"merged_adamw",
     "Param=f[0] Param=f[2] Grad=f[0] Grad=f[2] LearningRate=f[1] Moment1=f[0] Moment1=f[2] Moment2=f[0] "
     "Moment2=f[2] Beta1Pow=f[1] Beta1Pow=f[1] Beta2Pow=f[1] Beta2Pow=f[1]",
     "ParamOut ParamOut Moment1Out Moment1Out Moment2Out Moment2Out", "", "[0]", NULL, NULL, false},
    {"merged_lamb",
     "Param=f[0] Param=f[2] Grad=f[0] Grad=f[2] LearningRate=f[1] Moment1=f[0] Moment1=f[2] Moment2=f[0] "
     "Moment2=f[2] Beta1Pow=f[1] Beta1Pow=f[1] Beta2Pow=f[1] Beta2Pow=f[1]",
     "ParamOut ParamOut Moment1Out Moment1Out Moment2Out Moment2Out", "weight_decay=0.01", "[0]", NULL, NULL, false},
};

/* Op types no row runs, and why. Keep it short: an op belongs in k_rows. */
static const char *const k_excluded[] = {
    /* the parameter-server ops talk to a pserver over ZeroMQ (no tensor math
     * to run on an empty input): tests/python/test_pserver.py runs them,
     * empty gradient blocks included */
    "send", "recv", "send_barrier", "fetch_barrier", "listen_and_serv",
    NULL,
};

static bool g_covered[512];

static bool is_float(pe_dtype dt) { return dt == PE_DTYPE_FP32 || dt == PE_DTYPE_FP64; }

static pe_dtype dtype_of(char c) {
    switch (c) {
    case 'd': return PE_DTYPE_FP64;
    case 'i': return PE_DTYPE_INT32;
    case 'l': return PE_DTYPE_INT64;
    case 'b': return PE_DTYPE_BOOL;
    default: return PE_DTYPE_FP32;
    }
}

/* "[0,3]" -> dims; returns the rank. */
static int parse_dims(const char *s, int64_t *dims) {
    int n = 0;
    if (*s == '[') s++;
    while (*s && *s != ']') {
        char *end;
        dims[n++] = strtoll(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Next space-separated token of *s into buf; false at the end. */
static bool next_token(const char **s, char *buf, size_t n) {
    while (**s == ' ') (*s)++;
    if (!**s) return false;
    size_t k = 0;
    while (**s && **s != ' ') {
        if (k + 1 < n) buf[k++] = **s;
        (*s)++;
    }
    buf[k] = 0;
    return true;
}

/* Sets "name=value" on op with the type the registry gives the attr. */
static void set_attr(pe_op *op, const char *tok) {
    char name[64];
    const char *eq = strchr(tok, '=');
    assert_non_null(eq);
    snprintf(name, sizeof name, "%.*s", (int)(eq - tok), tok);
    const char *v = eq + 1;
    pe_op_attr_desc a;
    if (!pe_op_type_find_attr(pe_op_type_find(op->type), name, &a)) fail_msg("%s has no attr %s", op->type, name);
    int64_t li[16];
    double lf[16];
    const char *ls[16];
    char sbuf[16][32];
    int n = 0;
    for (const char *p = v; *p && n < 16; n++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        snprintf(sbuf[n], sizeof sbuf[n], "%.*s", (int)len, p);
        li[n] = strtoll(sbuf[n], NULL, 10);
        lf[n] = strtod(sbuf[n], NULL);
        ls[n] = sbuf[n];
        p = c ? c + 1 : p + len;
    }
    pe_status st = PE_OK;
    switch (a.type) {
    case PE_ATTR_INT: st = pe_op_set_int(op, name, li[0]); break;
    case PE_ATTR_LONG: st = pe_op_set_long(op, name, li[0]); break;
    case PE_ATTR_FLOAT: st = pe_op_set_float(op, name, lf[0]); break;
    case PE_ATTR_BOOL: st = pe_op_set_bool(op, name, strcmp(v, "true") == 0); break;
    case PE_ATTR_STRING: st = pe_op_set_string(op, name, v); break;
    case PE_ATTR_INTS: st = pe_op_set_ints(op, name, li, n); break;
    case PE_ATTR_LONGS: st = pe_op_set_longs(op, name, li, n); break;
    case PE_ATTR_FLOATS: st = pe_op_set_floats(op, name, lf, n); break;
    case PE_ATTR_STRINGS: st = pe_op_set_strings(op, name, ls, n); break;
    default: fail_msg("attr %s: type not handled here", name);
    }
    assert_int_equal(st, PE_OK);
}

static void mark_covered(const pe_program *p) {
    for (int i = 0; i < p->blocks[0].n_ops; i++) {
        int id = pe_op_type_find(p->blocks[0].ops[i].type);
        if (id >= 0 && id < (int)(sizeof g_covered / sizeof g_covered[0])) g_covered[id] = true;
    }
}

typedef struct row_prog {
    pe_program *p;
    pe_feed feeds[16];
    pe_tensor *vals[16];
    char in_names[16][32], out_names[8][32];
    const char *fetch[8];
    int n_in, n_out;
} row_prog;

static void row_build(const empty_row *r, row_prog *rp) {
    memset(rp, 0, sizeof *rp);
    rp->p = pe_program_new();
    pe_block *b = &rp->p->blocks[0];
    pe_op *op = pe_block_add_op(b, r->op);
    assert_non_null(op);
    char tok[128];
    for (const char *s = r->ins; next_token(&s, tok, sizeof tok);) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = 0;
        int64_t dims[PE_MAX_DIMS];
        int nd = parse_dims(eq + 2, dims);
        pe_dtype dt = dtype_of(eq[1]);
        int k = rp->n_in++;
        pe_tensor *t = tu_tensor(dt, nd, dims, NULL);
        const char *lod = strchr(eq + 2, '{');
        if (lod) { /* "{0,0,2}" or "{0,1/0,2}": offsets per level */
            int64_t off[4][16], n[4] = {0};
            const int64_t *lv[4] = {off[0], off[1], off[2], off[3]};
            int levels = 1;
            for (const char *c = lod + 1; *c && *c != '}';) {
                char *end;
                off[levels - 1][n[levels - 1]++] = strtoll(c, &end, 10);
                c = end;
                if (*c == '/') levels++;
                if (*c == ',' || *c == '/') c++;
            }
            if (pe_tensor_set_lod(t, levels, lv, n) != PE_OK) fail_msg("%s: LoD %s: %s", r->op, lod, pe_last_error());
        }
        if (is_float(dt))
            for (int64_t e = 0; e < pe_tensor_numel(t); e++) {
                if (dt == PE_DTYPE_FP32) ((float *)pe_tensor_data(t))[e] = 0.5f;
                else ((double *)pe_tensor_data(t))[e] = 0.5;
            }
        snprintf(rp->in_names[k], sizeof rp->in_names[k], "in%d", k);
        tu_declare(rp->p, rp->in_names[k], t);
        assert_int_equal(pe_op_add_input(op, tok, rp->in_names[k]), PE_OK);
        rp->vals[k] = t;
        rp->feeds[k] = (pe_feed){rp->in_names[k], t};
    }
    for (const char *s = r->outs; next_token(&s, tok, sizeof tok);) {
        int k = rp->n_out++;
        snprintf(rp->out_names[k], sizeof rp->out_names[k], "out%d", k);
        assert_non_null(pe_block_add_var(b, rp->out_names[k], PE_DTYPE_FP32, 0, NULL));
        assert_int_equal(pe_op_add_output(op, tok, rp->out_names[k]), PE_OK);
        rp->fetch[k] = rp->out_names[k];
    }
    for (const char *s = r->attrs; next_token(&s, tok, sizeof tok);) set_attr(op, tok);
}

static void row_free(row_prog *rp) {
    for (int i = 0; i < rp->n_in; i++) pe_tensor_free(rp->vals[i]);
    pe_program_free(rp->p);
}

static void check_value(const empty_row *r, const pe_tensor *t) {
    if (!r->value) return;
    double want = strcmp(r->value, "nan") == 0 ? NAN : strtod(r->value, NULL);
    for (int64_t i = 0; i < pe_tensor_numel(t); i++) {
        double g = tu_get(t, i);
        if (isnan(want) ? !isnan(g) : g != want)
            fail_msg("%s: element %lld of the first output is %g, want %s", r->op, (long long)i, g, r->value);
    }
}

/* rp's program with the backward of its first output (of dtype dt) appended:
 * grads[j] is the gradient var of input idx[j] (NULL when none), j < *n_diff. */
static pe_program *backward_prog(const empty_row *r, const row_prog *rp, pe_dtype dt, char **grads, int *idx,
                                 int *n_diff) {
    pe_program *p = pe_program_clone(rp->p);
    pe_var *ov = pe_block_find_var(&p->blocks[0], rp->out_names[0]);
    assert_non_null(ov);
    ov->dtype = dt;
    const char *inputs[16];
    *n_diff = 0;
    for (int i = 0; i < rp->n_in; i++)
        if (is_float(rp->vals[i]->dtype)) { inputs[*n_diff] = rp->in_names[i]; idx[(*n_diff)++] = i; }
    if (pe_gradients(p, (const char *[]){rp->out_names[0]}, 1, inputs, *n_diff, grads) != PE_OK)
        fail_msg("%s: gradients: %s", r->op, pe_last_error());
    return p;
}

/* Backward of the first output: every input gradient has its input's dims. */
static void run_backward(const empty_row *r, row_prog *rp, const pe_tensor *out0) {
    char *grads[16] = {0};
    int n_diff, idx[16];
    pe_program *p = backward_prog(r, rp, out0->dtype, grads, idx, &n_diff);
    const char *gf[16];
    pe_tensor *g[16];
    int ng = 0, gi[16];
    for (int j = 0; j < n_diff; j++)
        if (grads[j]) { gf[ng] = grads[j]; gi[ng] = idx[j]; g[ng++] = pe_tensor_new(); }
    assert_true(ng > 0);
    pe_status st = tu_run(p, rp->feeds, rp->n_in, gf, ng, g);
    if (st != PE_OK) fail_msg("%s: backward: %s", r->op, pe_last_error());
    for (int j = 0; j < ng; j++) {
        tu_assert_dims(g[j], rp->vals[gi[j]]->ndim, rp->vals[gi[j]]->dims);
        pe_tensor_free(g[j]);
    }
    for (int j = 0; j < n_diff; j++) free(grads[j]);
    pe_program_free(p);
}

/* One row (the test's state is its index in k_rows). */
static void test_row(void **state) {
    size_t i = *(size_t *)*state;
    const empty_row *r = &k_rows[i];
    row_prog rp;
    row_build(r, &rp);
    pe_tensor *outs[8];
    for (int k = 0; k < rp.n_out; k++) outs[k] = pe_tensor_new();
    pe_status st = tu_run(rp.p, rp.feeds, rp.n_in, rp.fetch, rp.n_out, outs);
    if (r->err) {
        if (st == PE_OK) fail_msg("%s (row %zu): ran, want an error with '%s'", r->op, i, r->err);
        tu_assert_error_has(r->op, r->err, "in0");
    } else {
        if (st != PE_OK) fail_msg("%s (row %zu): %s", r->op, i, pe_last_error());
        int64_t want[PE_MAX_DIMS];
        int nd = parse_dims(r->want, want);
        tu_assert_dims(outs[0], nd, want);
        check_value(r, outs[0]);
        if (r->grad) run_backward(r, &rp, outs[0]);
    }
    for (int k = 0; k < rp.n_out; k++) pe_tensor_free(outs[k]);
    row_free(&rp);
}

/* Every op type of ops.def is a row's op or a grad op of a row's backward, or
 * is excluded with a reason (the rows' programs are built again here, so the
 * check does not depend on which rows ran). */
static void test_every_op_is_covered(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++) {
        row_prog rp;
        row_build(&k_rows[i], &rp);
        mark_covered(rp.p);
        if (k_rows[i].grad) {
            char *grads[16] = {0};
            int n_diff, idx[16];
            pe_program *p = backward_prog(&k_rows[i], &rp, PE_DTYPE_FP32, grads, idx, &n_diff);
            mark_covered(p);
            for (int j = 0; j < n_diff; j++) free(grads[j]);
            pe_program_free(p);
        }
        row_free(&rp);
    }
    int missing = 0;
    for (int id = 0; id < pe_op_type_count(); id++) {
        pe_op_desc d;
        assert_true(pe_op_type_get(id, &d));
        bool excluded = false;
        for (size_t e = 0; e < sizeof k_excluded / sizeof k_excluded[0]; e++)
            excluded = excluded || (k_excluded[e] && strcmp(k_excluded[e], d.name) == 0);
        if (!g_covered[id] && !excluded) {
            print_message("op %s: no row of tests/unit/test_ops_empty.c runs it on an empty tensor; add one "
                          "(or an entry of k_excluded with the reason)\n", d.name);
            missing++;
        }
    }
    assert_int_equal(missing, 0);
}

/* A ParallelExecutor training m (loss "loss") over `places` CPU places of scope. */
static pe_parallel_executor *make_pe(const tm_model *m, pe_scope *scope, int places) {
    pe_place pl[2] = {pe_place_cpu(0), pe_place_cpu(1)};
    pe_pe_options o;
    pe_pe_options_default(&o);
    o.loss_name = "loss";
    pe_parallel_executor *pe = NULL;
    if (pe_parallel_executor_new(pl, places, m->main, scope, &o, &pe) != PE_OK) fail_msg("%s", pe_last_error());
    return pe;
}

/* One training step of m on `rows` rows with the Executor (places == 0) or a
 * ParallelExecutor over `places` CPU places; returns the first fetched loss
 * (NaN for an empty batch). Parameters before and after: *before, *after. */
static double train_step(const tm_model *m, int places, int64_t rows, pe_tensor **before, pe_tensor **after) {
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m->startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    for (int i = 0; i < m->n_params; i++) {
        before[i] = pe_tensor_new();
        assert_int_equal(pe_tensor_copy(before[i], pe_scope_find_var(scope, m->params[i]), pe_place_cpu(0)), PE_OK);
    }
    pe_tensor *x, *y, *loss = pe_tensor_new();
    tm_batch(m, 0, rows, &x, &y);
    pe_feed feeds[] = {{m->input, x}, {"label", y}};
    const char *fetch[] = {"loss"};
    pe_parallel_executor *pe = NULL;
    if (places == 0) {
        if (pe_executor_run(ex, m->main, 0, scope, feeds, 2, fetch, 1, &loss) != PE_OK) fail_msg("%s", pe_last_error());
    } else {
        pe = make_pe(m, scope, places);
        pe_status st = pe_run(pe, feeds, 2, fetch, 1, true, &loss);
        if (st != PE_OK) {
            /* the caller's rows do not cover the places: the error, then a batch that does */
            assert_int_equal(st, PE_ERR_INVALID);
            tu_assert_error_has("0 rows", "2 places", m->input);
            pe_tensor_free(x);
            pe_tensor_free(y);
            tm_batch(m, 0, 2, &x, &y);
            feeds[0].tensor = x;
            feeds[1].tensor = y;
            if (pe_run(pe, feeds, 2, fetch, 1, true, &loss) != PE_OK) fail_msg("%s", pe_last_error());
        }
    }
    pe_scope *ps = pe ? pe_place_scope(pe, 0) : scope;
    for (int i = 0; i < m->n_params; i++) {
        after[i] = pe_tensor_new();
        assert_int_equal(pe_tensor_copy(after[i], pe_scope_find_var(ps, m->params[i]), pe_place_cpu(0)), PE_OK);
    }
    double l = tu_get(loss, 0);
    pe_tensor_free(loss);
    pe_tensor_free(x);
    pe_tensor_free(y);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    return l;
}

static void test_train_empty_batch(void **state) {
    (void)state;
    for (int cnn = 0; cnn < 2; cnn++) {
        tm_model m = tm_model_new(PE_DTYPE_FP32, 0.1, false);
        if (cnn) tm_cnn(&m, "img", 16);
        else tm_mlp(&m, 16, "relu", 8, "tanh");
        tm_minimize(&m, PE_OPT_SGD, 0.1, NULL, 0);
        for (int places = 0; places <= 2; places++) {
            pe_tensor *before[16], *after[16];
            double loss = train_step(&m, places, 0, before, after);
            if (places < 2) {
                /* the mean of 0 rows is NaN; the gradients are 0, so SGD changes nothing */
                if (!isnan(loss)) fail_msg("%s, %d places: an empty batch gave loss %g, want NaN", cnn ? "cnn" : "mlp",
                                           places, loss);
                for (int i = 0; i < m.n_params; i++)
                    if (memcmp(pe_tensor_data(before[i]), pe_tensor_data(after[i]), pe_tensor_nbytes(before[i])) != 0)
                        fail_msg("%s, %d places: an empty batch changed %s", cnn ? "cnn" : "mlp", places, m.params[i]);
            } else {
                assert_true(isfinite(loss));
            }
            tm_free_params(&m, before);
            tm_free_params(&m, after);
        }
        tm_model_free(&m);
    }
}

/* A list feed may leave a place empty: its share of the loss scale is 0, its
 * gradients are 0, so 2 rows on place 0 and 0 rows on place 1 train like the
 * Executor on the 2 rows; the merged loss holds NaN for the empty place. */
static void test_list_feed_with_an_empty_place(void **state) {
    (void)state;
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.1, false);
    tm_mlp(&m, 16, "relu", 8, "tanh");
    tm_minimize(&m, PE_OPT_SGD, 0.1, NULL, 0);
    pe_tensor *x2, *y2, *x0, *y0, *want[16], *got[16], *before[16];
    tm_batch(&m, 0, 2, &x2, &y2); /* train_step's batch */
    tm_batch(&m, 0, 0, &x0, &y0);
    pe_tensor *loss = pe_tensor_new();
    const char *fetch[] = {"loss"};
    train_step(&m, 0, 2, before, want);
    tm_free_params(&m, before);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m.startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_parallel_executor *pe = make_pe(&m, scope, 2);
    pe_feed f0[] = {{m.input, x2}, {"label", y2}}, f1[] = {{m.input, x0}, {"label", y0}};
    const pe_feed *lists[] = {f0, f1};
    if (pe_run_list(pe, lists, (const int[]){2, 2}, 2, fetch, 1, true, &loss) != PE_OK) fail_msg("%s", pe_last_error());
    tu_assert_dims(loss, 1, (int64_t[]){2});
    assert_true(isfinite(tu_get(loss, 0)) && isnan(tu_get(loss, 1)));
    tm_fetch_params(&m, pe, got);
    for (int i = 0; i < m.n_params; i++)
        for (int64_t e = 0; e < pe_tensor_numel(want[i]); e++) {
            double w = tu_get(want[i], e), g = tu_get(got[i], e);
            if (fabs(g - w) > 1e-6 * (1 + fabs(w)))
                fail_msg("%s[%lld]: %g on 2 places (one empty), %g with the Executor", m.params[i], (long long)e, g, w);
        }
    tm_free_params(&m, want);
    tm_free_params(&m, got);
    pe_tensor_free(loss);
    pe_tensor_free(x2); pe_tensor_free(y2); pe_tensor_free(x0); pe_tensor_free(y0);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    tm_model_free(&m);
}

/* A 0-element parameter next to a normal one, trained by `kind` on 2 places
 * (shard_optimizer and fused optimizer ops on, the CPU defaults) and with the
 * Executor: loss = mean(x w) + reduce_sum(e), e: [0]. Nothing fails, e stays
 * empty, w moves. */
static void check_empty_param(pe_optimizer_kind kind, int places) {
    tm_model m = tm_model_new(PE_DTYPE_FP32, 0.5, false);
    tm_var(m.main, "x", PE_DTYPE_FP32, 2, (int64_t[]){-1, 3});
    tm_param(&m, "w", 2, (int64_t[]){3, 2}, PE_INIT_CONSTANT);
    tm_param(&m, "e", 1, (int64_t[]){0}, PE_INIT_CONSTANT);
    tm_var(m.main, "xw", PE_DTYPE_FP32, 2, (int64_t[]){-1, 2});
    tm_var(m.main, "m", PE_DTYPE_FP32, 1, (int64_t[]){1});
    tm_var(m.main, "es", PE_DTYPE_FP32, 1, (int64_t[]){1});
    tm_var(m.main, "loss", PE_DTYPE_FP32, 1, (int64_t[]){1});
    tm_op2(m.main, "mul", "x", "w", "xw");
    tm_op1(m.main, "mean", "xw", "m");
    pe_op_set_bool(tm_op1(m.main, "reduce_sum", "e", "es"), "reduce_all", true);
    tm_op2(m.main, "elementwise_add", "m", "es", "loss");
    tm_minimize(&m, kind, 0.1, NULL, 0);
    pe_scope *scope = pe_scope_new(NULL);
    pe_executor *ex = pe_executor_new(pe_place_cpu(0));
    assert_int_equal(pe_executor_run(ex, m.startup, 0, scope, NULL, 0, NULL, 0, NULL), PE_OK);
    pe_tensor *x = tu_tensor(PE_DTYPE_FP32, 2, (int64_t[]){4, 3}, (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3});
    pe_feed feed = {"x", x};
    const char *fetch[] = {"loss"};
    pe_tensor *loss = pe_tensor_new();
    pe_parallel_executor *pe = places ? make_pe(&m, scope, places) : NULL;
    for (int step = 0; step < 2; step++) {
        pe_status st = pe ? pe_run(pe, &feed, 1, fetch, 1, true, &loss)
                          : pe_executor_run(ex, m.main, 0, scope, &feed, 1, fetch, 1, &loss);
        if (st != PE_OK) fail_msg("optimizer %d, %d places: %s", (int)kind, places, pe_last_error());
    }
    pe_scope *ps = pe ? pe_place_scope(pe, 0) : scope;
    assert_int_equal(pe_tensor_numel(pe_scope_find_var(ps, "e")), 0);
    assert_true(tu_get(pe_scope_find_var(ps, "w"), 0) != 0.5);
    pe_tensor_free(loss);
    pe_tensor_free(x);
    pe_parallel_executor_free(pe);
    pe_executor_free(ex);
    pe_scope_free(scope);
    tm_model_free(&m);
}

static void test_empty_parameter(void **state) {
    (void)state;
    const pe_optimizer_kind kinds[] = {PE_OPT_SGD, PE_OPT_MOMENTUM, PE_OPT_ADAM};
    for (int k = 0; k < 3; k++)
        for (int places = 0; places <= 2; places++) check_empty_param(kinds[k], places);
}

#define N_ROWS (sizeof k_rows / sizeof k_rows[0])

int main(void) {
    assert_true(pe_op_type_count() <= (int)(sizeof g_covered / sizeof g_covered[0]));
    static struct CMUnitTest tests[N_ROWS + 4];
    static size_t idx[N_ROWS];
    static char names[N_ROWS][96];
    for (size_t i = 0; i < N_ROWS; i++) {
        idx[i] = i;
        snprintf(names[i], sizeof names[i], "row %zu: %s %s", i, k_rows[i].op, k_rows[i].ins);
        tests[i] = (struct CMUnitTest){names[i], test_row, NULL, NULL, &idx[i]};
    }
    tests[N_ROWS] = (struct CMUnitTest)cmocka_unit_test(test_every_op_is_covered);
    tests[N_ROWS + 1] = (struct CMUnitTest)cmocka_unit_test(test_train_empty_batch);
    tests[N_ROWS + 2] = (struct CMUnitTest)cmocka_unit_test(test_list_feed_with_an_empty_place);
    tests[N_ROWS + 3] = (struct CMUnitTest)cmocka_unit_test(test_empty_parameter);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
