"""Static catalog for the synthetic run generator: torch-op templates, NPU kernels, call stacks,
and the per-run "model plan" (which templates run in every step).

Everything here is plain data plus ``build_plan``; the simulation lives in ``_sim.py``.
Dims strings use ``;`` as the item separator here; the simulator turns it into torch_npu's ``;\\r\\n``.
"""
import random

# (batch, sequence, hidden) shape variants; kernel durations are scaled by the variant's size.
VARIANTS = [(4, 2048, 4096), (8, 1024, 2048), (16, 512, 1024), (2, 4096, 5120)]
_REF_SIZE = 8 * 1024 * 2048


def variant_vars(v):
    b, s, h = VARIANTS[v]
    return {"b": b, "s": s, "h": h, "h3": 3 * h, "h4": 4 * h, "bs": b * s, "n": h // 128, "d": 128}


def variant_scale(v):
    b, s, h = VARIANTS[v]
    return b * s * h / _REF_SIZE


# Task types whose intervals make up "Computing" in the Overlap Analysis lane (FORMATS.md 6.1: the tasks with a
# compute-task-info record, which the DSA tasks of kernel_details.csv have too).
COMPUTE_TASK_TYPES = frozenset({"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE"})
# Hardware task types that are not written to kernel_details.csv (as in the real sample).
NOT_IN_KERNEL_DETAILS = frozenset({"EVENT_WAIT_SQE", "PCIE_DMA_SQE"})

# key: (kernel name, op type, task type, min us, max us, block dim, on secondary stream,
#       input shapes, input dtypes, input formats, output shapes, output dtypes, output formats)
KERNELS = {
    "MEMCPY": ("MEMCPY_ASYNC", "MEMCPY_ASYNC", "PCIE_DMA_SQE", 20, 160, 0, False,
               "", "", "", "", "", ""),
    "MatMulV2": ("aclnnAddmm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", 20, 180, 24, False,
                 "{bs},{h};{h},{h4};{h4}", "FLOAT16;FLOAT16;FLOAT16", "ND;ND;ND", "{bs},{h4}", "FLOAT16", "ND"),
    "MatMulV2_bwd": ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", 20, 200, 24, False,
                     "{bs},{h4};{h4},{h}", "FLOAT16;FLOAT16", "ND;ND", "{bs},{h}", "FLOAT16", "ND"),
    "ReduceSum": ("aclnnReduceSum_ReduceSumOpAiCore_ReduceSum", "ReduceSum", "MIX_AIV", 4, 40, 48, False,
                  "{bs},{h4};1", "FLOAT;INT64", "ND;ND", "{h4}", "FLOAT", "ND"),
    "TransData": ("aclnnConvolution_TransData_TransData", "TransData", "AI_VECTOR_CORE", 5, 60, 32, False,
                  "{b},64,56,56", "FLOAT16", "NCHW", "{b},4,56,56,16", "FLOAT16", "NC1HWC0"),
    "Conv2D": ("aclnnConvolution_Conv2D_Conv2D", "Conv2D", "AI_CORE", 60, 300, 24, False,
               "{b},4,56,56,16;36,4,16,16;64", "FLOAT16;FLOAT16;FLOAT16", "NC1HWC0;FRACTAL_Z;ND",
               "{b},4,56,56,16", "FLOAT16", "NC1HWC0"),
    "Conv2DBackpropInput": ("aclnnConvolutionBackward_Conv2DBackpropInput_Conv2DBackpropInput",
                            "Conv2DBackpropInput", "AI_CORE", 70, 320, 24, False,
                            "4;36,4,16,16;{b},4,56,56,16", "INT32;FLOAT16;FLOAT16", "ND;FRACTAL_Z;NC1HWC0",
                            "{b},4,56,56,16", "FLOAT16", "NC1HWC0"),
    "Conv2DBackpropFilter": ("aclnnConvolutionBackward_Conv2DBackpropFilter_Conv2DBackpropFilter",
                             "Conv2DBackpropFilter", "AI_CORE", 60, 310, 24, False,
                             "{b},4,56,56,16;4;{b},4,56,56,16", "FLOAT16;INT32;FLOAT16", "NC1HWC0;ND;NC1HWC0",
                             "36,4,16,16", "FLOAT", "FRACTAL_Z"),
    "Relu": ("aclnnInplaceRelu_Relu_Relu", "Relu", "AI_VECTOR_CORE", 3, 16, 40, False,
             "{b},{s},{h4}", "FLOAT16", "ND", "{b},{s},{h4}", "FLOAT16", "ND"),
    "ReluGrad": ("aclnnThresholdBackward_ReluGrad_ReluGrad", "ReluGrad", "AI_VECTOR_CORE", 8, 26, 40, False,
                 "{b},{s},{h4};{b},{s},{h4}", "FLOAT16;FLOAT16", "ND;ND", "{b},{s},{h4}", "FLOAT16", "ND"),
    "LayerNormV4": ("aclnnLayerNorm_LayerNormV4_LayerNormV4", "LayerNormV4", "MIX_AIV", 10, 60, 48, False,
                    "{b},{s},{h};{h};{h}", "FLOAT16;FLOAT16;FLOAT16", "ND;ND;ND", "{b},{s},{h};{b},{s},1;{b},{s},1",
                    "FLOAT16;FLOAT;FLOAT", "ND;ND;ND"),
    "LayerNormGrad": ("aclnnLayerNormBackward_LayerNormGradV3_LayerNormGradV3", "LayerNormGradV3", "MIX_AIV",
                      15, 90, 48, False, "{b},{s},{h};{b},{s},{h};{b},{s},1;{b},{s},1;{h}",
                      "FLOAT16;FLOAT16;FLOAT;FLOAT;FLOAT16", "ND;ND;ND;ND;ND", "{b},{s},{h};{h};{h}",
                      "FLOAT16;FLOAT;FLOAT", "ND;ND;ND"),
    "FlashAttentionScore": ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
                            "FlashAttentionScore", "MIX_AIC", 80, 600, 24, False,
                            "{b},{s},{h};{b},{s},{h};{b},{s},{h}", "FLOAT16;FLOAT16;FLOAT16", "ND;ND;ND",
                            "{b},{n},{s},8;{b},{n},{s},8;{b},{s},{h}", "FLOAT;FLOAT;FLOAT16", "ND;ND;ND"),
    "FlashAttentionScoreGrad": ("aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
                                "FlashAttentionScoreGrad", "MIX_AIC", 150, 1200, 24, False,
                                "{b},{s},{h};{b},{s},{h};{b},{s},{h};{b},{s},{h}",
                                "FLOAT16;FLOAT16;FLOAT16;FLOAT16", "ND;ND;ND;ND",
                                "{b},{s},{h};{b},{s},{h};{b},{s},{h}", "FLOAT16;FLOAT16;FLOAT16", "ND;ND;ND"),
    "Gelu": ("aclnnGelu_GeluAiCore_Gelu", "Gelu", "AI_VECTOR_CORE", 6, 45, 40, False,
             "{b},{s},{h4}", "FLOAT16", "ND", "{b},{s},{h4}", "FLOAT16", "ND"),
    "GeluGrad": ("aclnnGeluBackward_GeluGrad_GeluGrad", "GeluGrad", "AI_VECTOR_CORE", 8, 60, 40, False,
                 "{b},{s},{h4};{b},{s},{h4};{b},{s},{h4}", "FLOAT16;FLOAT16;FLOAT16", "ND;ND;ND",
                 "{b},{s},{h4}", "FLOAT16", "ND"),
    "Add": ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", 1.5, 30, 40, False,
            "{b},{s},{h};{b},{s},{h}", "FLOAT16;FLOAT16", "ND;ND", "{b},{s},{h}", "FLOAT16", "ND"),
    "DSAGenBitMask": ("aclnnDropoutGenMaskV2_DSAGenBitMask_DSAGenBitMask", "DSAGenBitMask", "DSA_SQE",
                      2, 6, 0, True, "", "", "", "", "", ""),
    "DropOutDoMask": ("aclnnDropoutDoMask_DropOutDoMask_DropOutDoMask", "DropOutDoMask", "AI_VECTOR_CORE",
                      8, 40, 40, False, "{b},{s},{h};{bs};", "FLOAT16;UINT8;FLOAT16", "ND;ND;ND",
                      "{b},{s},{h}", "FLOAT16", "ND"),
    "NonZero": ("aclnnNonzero_NonZero_NonZero", "NonZero", "AI_CPU", 40, 250, 1, False,
                "{b},{s}", "INT64", "ND", "2,{bs}", "INT64", "ND"),
    "SoftmaxV2": ("aclnnSoftmax_SoftmaxV2AiCore_SoftmaxV2", "SoftmaxV2", "AI_VECTOR_CORE", 10, 90, 40, False,
                  "{b},{n},{s},{s}", "FLOAT16", "ND", "{b},{n},{s},{s}", "FLOAT16", "ND"),
    "SoftmaxGrad": ("aclnnSoftmaxBackward_SoftmaxGrad_SoftmaxGrad", "SoftmaxGrad", "AI_VECTOR_CORE",
                    12, 110, 40, False, "{b},{n},{s},{s};{b},{n},{s},{s}", "FLOAT16;FLOAT16", "ND;ND",
                    "{b},{n},{s},{s}", "FLOAT16", "ND"),
    "Cast": ("aclnnCast_CastAiCore_Cast", "Cast", "AI_VECTOR_CORE", 1.2, 20, 40, False,
             "{b},{s},{h}", "FLOAT", "ND", "{b},{s},{h}", "FLOAT16", "ND"),
    "TensorMove": ("aclnnInplaceCopy_TensorMove_TensorMove", "TensorMove", "AI_VECTOR_CORE", 5, 80, 40, True,
                   "{b},{s},{h}", "FLOAT16", "ND", "{b},{s},{h}", "FLOAT16", "ND"),
    "ForeachMulScalar": ("aclnnForeachMulScalarV2_ForeachMulScalar_ForeachMulScalar", "ForeachMulScalar",
                         "AI_VECTOR_CORE", 100, 400, 48, False, "{h4},{h};1", "FLOAT;FLOAT", "ND;ND",
                         "{h4},{h}", "FLOAT", "ND"),
    "ForeachAddList": ("aclnnForeachAddListV2_ForeachAddList_ForeachAddList", "ForeachAddList",
                       "AI_VECTOR_CORE", 120, 700, 48, False, "{h4},{h};{h4},{h};1", "FLOAT;FLOAT;FLOAT",
                       "ND;ND;ND", "{h4},{h}", "FLOAT", "ND"),
    "ForeachAddcdivScalar": ("aclnnForeachAddcdivScalarV2_ForeachAddcdivScalar_ForeachAddcdivScalar",
                             "ForeachAddcdivScalar", "AI_VECTOR_CORE", 150, 800, 48, False,
                             "{h4},{h};{h4},{h};{h4},{h};1", "FLOAT;FLOAT;FLOAT;FLOAT", "ND;ND;ND;ND",
                             "{h4},{h}", "FLOAT", "ND"),
}


class Tpl:
    """A torch-op template node. ``kernels`` (list of KERNELS keys) or ``hccl`` makes it a launching
    leaf (it records an Enqueue); ``sync`` makes it wait for the device (host-side synchronize)."""
    __slots__ = ("name", "dims", "seq", "kids", "kernels", "hccl", "sync", "pre", "post")

    def __init__(self, name, dims=None, seq=False, kids=(), kernels=None, hccl=None, sync=False,
                 pre=(3, 12), post=(1, 5)):
        self.name, self.dims, self.seq, self.kids = name, dims, seq, tuple(kids)
        self.kernels, self.hccl, self.sync, self.pre, self.post = kernels, hccl, sync, pre, post

    def count(self):
        return 1 + sum(k.count() for k in self.kids)


T = Tpl
# Forward templates: key -> (weight, module file for the call stack, forward tree, backward node or None).
FORWARD = {
    "to_device": (1, "functional.py", T("aten::to", "{b},{s};;;;;;", seq=True, pre=(20, 60), kids=[
        T("aten::_to_copy", "{b},{s};;;;;", seq=True, kids=[
            T("aten::empty_strided", ";;;;;", kids=[T("empty_tensor")]),
            T("aten::copy_", "{b},{s};{b},{s};", kids=[
                T("acl_memcpy_host_to_device", kernels=["MEMCPY"])])])]), None),
    "linear": (10, "linear.py", T("aten::linear", "{b},{s},{h};{h4},{h};{h4}", seq=True, pre=(8, 30), kids=[
        T("aten::t", "{h4},{h}", kids=[T("aten::transpose", "{h4},{h};;", kids=[
            T("aten::as_strided", "{h4},{h};;;")])]),
        T("aten::addmm", "{h4};{bs},{h};{h},{h4};;", kids=[T("aclnnAddmm", kernels=["MatMulV2"])])]),
        T("AddmmBackward0", "{bs},{h4}", kids=[
            T("aten::mm", "{bs},{h4};{h4},{h}", kids=[T("aclnnMm", kernels=["MatMulV2_bwd"])]),
            T("aten::mm", "{h4},{bs};{bs},{h}", kids=[T("aclnnMm", kernels=["MatMulV2_bwd"])]),
            T("aten::sum", "{bs},{h4};;;", kids=[T("aclnnReduceSum", kernels=["ReduceSum"])])])),
    "conv": (2, "conv.py", T("aten::conv2d", "{b},64,56,56;64,64,3,3;64;;;;", seq=True, pre=(8, 30), kids=[
        T("aten::convolution", "{b},64,56,56;64,64,3,3;64;;;;;", seq=True, kids=[
            T("aten::_convolution", "{b},64,56,56;64,64,3,3;64;;;;;;;;;", kids=[
                T("empty_tensor"), T("Conv2D", kernels=["TransData", "Conv2D"])])])]),
        T("ConvolutionBackward0", "{b},64,56,56", kids=[
            T("aten::convolution_backward", "{b},64,56,56;{b},64,56,56;64,64,3,3;;;;;;;", kids=[
                T("Conv2DBackpropInput", kernels=["Conv2DBackpropInput"]),
                T("Conv2DBackpropFilter", kernels=["Conv2DBackpropFilter"])])])),
    "relu": (4, "activation.py", T("aten::relu_", "{b},{s},{h4}", seq=True, kids=[
        T("aclnnInplaceRelu", kernels=["Relu"])]),
        T("ReluBackward0", "{b},{s},{h4}", kids=[
            T("aten::threshold_backward", "{b},{s},{h4};{b},{s},{h4};", kids=[
                T("aclnnThresholdBackward", kernels=["ReluGrad"])])])),
    "layer_norm": (6, "normalization.py", T("aten::layer_norm", "{b},{s},{h};;{h};{h};;", seq=True, kids=[
        T("aten::native_layer_norm", "{b},{s},{h};;{h};{h};", kids=[
            T("aclnnLayerNorm", kernels=["LayerNormV4"])])]),
        T("NativeLayerNormBackward0", "{b},{s},{h}", kids=[
            T("aten::native_layer_norm_backward", "{b},{s},{h};{b},{s},{h};;{b},{s},1;{b},{s},1;{h};{h};", kids=[
                T("aclnnLayerNormBackward", kernels=["LayerNormGrad"])])])),
    "attention": (4, "attention.py", T("npu::npu_fusion_attention", "{b},{s},{h};{b},{s},{h};{b},{s},{h};;;;;",
                                       seq=True, pre=(15, 40), kids=[
        T("aclnnFlashAttentionScore", kernels=["FlashAttentionScore"])]),
        T("NpuFusionAttentionBackward0", "{b},{s},{h}", kids=[
            T("npu::npu_fusion_attention_grad", "{b},{s},{h};{b},{s},{h};{b},{s},{h};{b},{s},{h};;;", kids=[
                T("aclnnFlashAttentionScoreGrad", kernels=["FlashAttentionScoreGrad"])])])),
    "gelu": (4, "activation.py", T("aten::gelu", "{b},{s},{h4};", seq=True, kids=[
        T("aclnnGelu", kernels=["Gelu"])]),
        T("GeluBackward0", "{b},{s},{h4}", kids=[
            T("aten::gelu_backward", "{b},{s},{h4};{b},{s},{h4};", kids=[
                T("aclnnGeluBackward", kernels=["GeluGrad"])])])),
    "add": (6, "transformer.py", T("aten::add", "{b},{s},{h};{b},{s},{h};", seq=True, kids=[
        T("aclnnAdd", kernels=["Add"])]), T("AddBackward0", "{b},{s},{h}")),
    "dropout": (3, "dropout.py", T("aten::dropout", "{b},{s},{h};;", seq=True, kids=[
        T("aten::native_dropout", "{b},{s},{h};;", kids=[
            T("aclnnDropoutGenMaskV2", kernels=["DSAGenBitMask"]),
            T("aclnnDropoutDoMask", kernels=["DropOutDoMask"])])]),
        T("NativeDropoutBackward0", "{b},{s},{h}", kids=[
            T("aten::native_dropout_backward", "{b},{s},{h};{b},{s},{h};", kids=[
                T("aclnnDropoutDoMask", kernels=["DropOutDoMask"])])])),
    "nonzero": (1, "transformer.py", T("aten::nonzero", "{b},{s}", kids=[
        T("aclnnNonzero", kernels=["NonZero"])]), None),
    "softmax": (3, "functional.py", T("aten::softmax", "{b},{n},{s},{s};;", seq=True, kids=[
        T("aten::_softmax", "{b},{n},{s},{s};;", kids=[T("aclnnSoftmax", kernels=["SoftmaxV2"])])]),
        T("SoftmaxBackward0", "{b},{n},{s},{s}", kids=[
            T("aten::_softmax_backward_data", "{b},{n},{s},{s};{b},{n},{s},{s};;", kids=[
                T("aclnnSoftmaxBackward", kernels=["SoftmaxGrad"])])])),
    "cast": (3, "transformer.py", T("npu::npu_dtype_cast", "{b},{s},{h};", seq=True, kids=[
        T("aten::clone", "{b},{s},{h};", kids=[T("empty_tensor"), T("aten::copy_", "{b},{s},{h};{b},{s},{h};", kids=[
            T("aclnnInplaceCopy", kernels=["TensorMove"])])]),
        T("aclnnCast", kernels=["Cast"])]),
        T("NpuDtypeCastBackward0", "{b},{s},{h}", kids=[
            T("aten::_to_copy", "{b},{s},{h};;;;;;", kids=[T("aclnnCast", kernels=["Cast"])])])),
}
del T

DATALOADER = Tpl("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", pre=(300, 1500), post=(20, 80),
                 kids=[Tpl("aten::empty", ";;;;;"), Tpl("aten::to", "{b},{s};;;;;"),
                       Tpl("aten::lift_fresh", "{b},{s}"),
                       Tpl("aten::detach_", "{b},{s}", kids=[Tpl("detach_", "{b},{s}")])])
OPTIMIZER = Tpl("Optimizer.step#AdamW.step", pre=(20, 60), kids=[
    Tpl("aten::_foreach_mul_", ";", kids=[Tpl("aclnnForeachMulScalarV2", kernels=["ForeachMulScalar"])]),
    Tpl("aten::_foreach_add_", ";;", kids=[Tpl("aclnnForeachAddListV2", kernels=["ForeachAddList"])]),
    Tpl("aten::_foreach_addcdiv_", ";;;", kids=[
        Tpl("aclnnForeachAddcdivScalarV2", kernels=["ForeachAddcdivScalar"])])])
STEP_END = Tpl("aten::item", "", pre=(5, 15), kids=[Tpl("aten::_local_scalar_dense", "", sync=True)])
COMM = {
    "allReduce": Tpl("c10d::allreduce_", "{h4}", pre=(5, 15), kids=[Tpl("HcclAllreduce", hccl="allReduce")]),
    "allGather": Tpl("c10d::_allgather_base_", "{h4};{h}", pre=(5, 15), kids=[Tpl("HcclAllgather", hccl="allGather")]),
}

_SITE = "/home/ma-user/anaconda3/envs/torch/lib/python3.9/site-packages"
_MODEL = "/home/ma-user/work/llm/model.py"
_TRAIN = "/home/ma-user/work/llm/train.py"


def call_stack(module_file, variant):
    """A Python call stack (outermost frame last) for a forward op; list of frames."""
    line = 100 + 17 * len(module_file) + variant
    return [f"{_SITE}/torch/nn/modules/{module_file}({line}): forward",
            f"{_SITE}/torch/nn/modules/module.py(1527): _call_impl",
            f"{_SITE}/torch/nn/modules/module.py(1518): _wrapped_call_impl",
            f"{_MODEL}({210 + 3 * variant}): forward",
            f"{_SITE}/torch/nn/modules/module.py(1527): _call_impl",
            f"{_SITE}/torch/nn/modules/module.py(1518): _wrapped_call_impl",
            f"{_TRAIN}(388): train_step",
            f"{_TRAIN}(455): main",
            "<string>(1): <module>"]


# with_stack's python_function frames around each step on the main thread (the real samples' spawn chain), outermost
# first; inside the step each forward op, the dataloader and the optimizer get their call stack's inner frames
PY_OUTER_FRAMES = ["<string>(1): <module>", "multiprocessing/spawn.py(116): spawn_main",
                   "multiprocessing/spawn.py(129): _main", "multiprocessing/process.py(315): _bootstrap",
                   "multiprocessing/process.py(108): run", "torch/multiprocessing/spawn.py(74): _wrap",
                   f"{_TRAIN}(455): main"]


def py_frames(stack):
    """The python_function frames of a call stack inside a step (outermost first, without the two outermost
    frames, which :data:`PY_OUTER_FRAMES` covers)."""
    return list(reversed(stack[:-2])) if stack else []


DATALOADER_STACK = [f"{_SITE}/torch/utils/data/dataloader.py(630): __next__", f"{_TRAIN}(381): train_step",
                    f"{_TRAIN}(455): main", "<string>(1): <module>"]
OPTIMIZER_STACK = [f"{_SITE}/torch/optim/adamw.py(184): step",
                   f"{_SITE}/torch/optim/optimizer.py(385): wrapper",
                   f"{_TRAIN}(397): train_step", f"{_TRAIN}(455): main", "<string>(1): <module>"]


class Plan:
    """The op sequence of one training step; identical for every step and every rank (same model),
    so that collective op names and counts match across ranks. Timings differ per rank."""

    def __init__(self, fwd, bwd, comm_after, n_opt, approx_ops):
        self.fwd = fwd                # [(template key, variant)]
        self.bwd = bwd                # [index into fwd], in backward execution order
        self.comm_after = comm_after  # {position in bwd: [(comm kind, element count)]}
        self.n_opt = n_opt            # optimizer.step() groups at the end of the step
        self.approx_ops = approx_ops  # cpu_op slices per step (ProfilerStep excluded)


def build_plan(srng: random.Random, ops_per_step: int, hccl: bool) -> Plan:
    keys = [k for k in FORWARD if k != "to_device"]
    weights = [FORWARD[k][0] for k in keys]
    n_opt = 1 + ops_per_step // 600
    count = DATALOADER.count() + STEP_END.count() + n_opt * OPTIMIZER.count()
    fwd = [("to_device", srng.randrange(len(VARIANTS)))]
    count += FORWARD["to_device"][2].count()
    while count < ops_per_step:
        key = srng.choices(keys, weights)[0]
        _, _, ftree, btree = FORWARD[key]
        fwd.append((key, srng.randrange(len(VARIANTS))))
        count += ftree.count() + (btree.count() + 1 if btree is not None else 0)
    bwd = [i for i in range(len(fwd) - 1, -1, -1) if FORWARD[fwd[i][0]][3] is not None]
    comm_after = {}
    if hccl:
        n_comm = 1 if len(bwd) < 8 else max(2, len(bwd) // 30)
        every = max(1, len(bwd) // n_comm)
        for c in range(n_comm):
            # DDP-like buckets: reduced while the rest of backward runs; with several buckets the last one ends
            # backward (its communication is then not overlapped)
            last = c == n_comm - 1 and n_comm > 1
            pos = min(len(bwd) - 1, (c + 1) * every - 1 if last else c * every + every // 2) if bwd else -1
            kind = "allGather" if srng.random() < 0.15 else "allReduce"
            comm_after.setdefault(pos, []).append((kind, srng.choice([1 << 20, 1 << 22, 1 << 23, 1 << 24])))
            count += COMM[kind].count()
    return Plan(fwd, bwd, comm_after, n_opt, count)
