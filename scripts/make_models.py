#!/usr/bin/env python3
"""Writes the graph models of resources/models/ that are too long to keep by hand: the CIFAR
ResNets of He et al. 2016 (section 4.2) and a small VGG with batch norm.

    python3 scripts/make_models.py          # rewrites resources/models/{resnet20,resnet56,resnet20_mnist,vgg_bn}.json

ResNet-(6n+2): a 3x3 convolution of 16 filters, then three stages of n residual blocks on 16, 32
and 64 filters (the first block of the second and third stages halving height and width with
stride 2), global average pooling and a 10-way dense layer. A block is conv3x3 - batch norm - ReLU
- conv3x3 - batch norm, plus the block's input, then ReLU. Shortcuts: option B of the paper
(identity where the shapes agree, a 1x1 convolution of stride 2 with batch norm where a stage
widens); the paper's CIFAR nets use option A (zero-padded identity), which has no parameters, so
resnet20 has 272,474, 2,752 more than option A's 269,722 (the paper's 0.27M): the projections'
2,560 weights and 192 batch-norm parameters. Convolutions before batch norm have no bias; He initialisation (normal, 2 / fan_in); weight decay 1e-4 on every weight, batch norm's
gamma and beta included (as fb.resnet.torch and PyTorch's SGD weight_decay apply it).
"""
import json
import os

WD = 0.0001
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "resources", "models")


class Graph:
    def __init__(self):
        self.layers = []

    def add(self, layer, inputs=None):
        if inputs is not None:
            layer["inputs"] = inputs
        self.layers.append(layer)
        return layer["name"]

    def conv_bn(self, name, filters, kernel, stride, relu, inputs=None):
        self.add({"type": "conv2d", "name": name, "filters": filters, "kernel": kernel, "stride": stride,
                  "padding": "same", "init": {"type": "he_normal"}, "bias": False, "weight_decay": WD}, inputs)
        out = self.add({"type": "batch_norm", "name": name + "_bn", "weight_decay": WD})
        if relu:
            out = self.add({"type": "relu", "name": name + "_relu"})
        return out

    def head(self, classes, inputs=None):
        self.add({"type": "global_avgpool", "name": "pool"}, inputs)
        self.add({"type": "flatten", "name": "flatten"})
        self.add({"type": "dense", "name": "logits", "units": classes, "init": {"type": "glorot"}, "bias": 0.0,
                  "weight_decay": WD})


def resnet(depth, input_shape):
    assert (depth - 2) % 6 == 0
    n = (depth - 2) // 6
    g = Graph()
    x = g.conv_bn("stem", 16, 3, 1, True)
    channels = 16
    for stage, filters in enumerate([16, 32, 64], start=1):
        for block in range(1, n + 1):
            name = "s%db%d" % (stage, block)
            stride = 2 if stage > 1 and block == 1 else 1
            g.conv_bn(name + "_conv1", filters, 3, stride, True, inputs=[x])
            branch = g.conv_bn(name + "_conv2", filters, 3, 1, False)
            shortcut = x
            if stride != 1 or filters != channels:
                shortcut = g.conv_bn(name + "_shortcut", filters, 1, stride, False, inputs=[x])
            g.add({"type": "add", "name": name + "_add", "inputs": [branch, shortcut]})
            x = g.add({"type": "relu", "name": name + "_out"})
            channels = filters
    g.head(10, inputs=[x])
    return g.layers


def vgg_bn():
    # Three stages of two 3x3 convolutions (16, 32, 64 filters) with batch norm and ReLU, a 2x2
    # max-pool between stages, global average pooling and a 10-way dense layer.
    g = Graph()
    for stage, filters in enumerate([16, 32, 64], start=1):
        if stage > 1:
            g.add({"type": "maxpool", "name": "pool%d" % (stage - 1), "size": 2, "stride": 2, "padding": "same"})
        for k in (1, 2):
            g.conv_bn("conv%d_%d" % (stage, k), filters, 3, 1, True)
    g.head(10)
    return g.layers


def count(input_shape, layers):
    """Parameters and forward FLOPs per example (conv and dense, a multiply-add counted as 2), by a
    shape walk of the layer list of its own (tests/tst_model.cpp compares the C++ count)."""
    shapes = {}
    params = flops = 0
    prev = "input"
    shapes["input"] = tuple(input_shape)
    for l in layers:
        ins = [shapes[i] for i in l.get("inputs", [prev])]
        c, h, w = ins[0]
        t = l["type"]
        if t == "conv2d":
            s = l["stride"]
            h, w = -(-h // s), -(-w // s)  # SAME
            k = l["kernel"]
            params += l["filters"] * c * k * k + (0 if l.get("bias") is False else l["filters"])
            flops += 2 * h * w * l["filters"] * c * k * k
            c = l["filters"]
        elif t == "batch_norm":
            params += 2 * c
        elif t == "maxpool":
            h, w = -(-h // l["stride"]), -(-w // l["stride"])
        elif t == "global_avgpool":
            h = w = 1
        elif t == "flatten":
            c, h, w = c * h * w, 1, 1
        elif t == "dense":
            params += l["units"] * c + l["units"]
            flops += 2 * l["units"] * c
            c = l["units"]
        shapes[l["name"]] = (c, h, w)
        prev = l["name"]
    return params, flops


def write(name, description, input_shape, layers):
    params, flops = count(input_shape, layers)
    description = description.replace("PARAMS", "{:,}".format(params)).replace("FLOPS", "{:.1f}".format(flops / 1e6))
    model = {"name": name, "description": description, "input": input_shape, "layers": layers}
    lines = ['{',
             '  "name": %s,' % json.dumps(name),
             '  "description": %s,' % json.dumps(description),
             '  "input": %s,' % json.dumps(input_shape),
             '  "layers": [']
    lines += ['    %s%s' % (json.dumps(l), "," if i + 1 < len(layers) else "") for i, l in enumerate(layers)]
    lines += ['  ]', '}', '']
    path = os.path.join(MODELS, name + ".json")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    json.loads(open(path).read())  # well formed
    print("wrote", path, len(layers), "layers,", params, "parameters,", flops, "forward FLOPs per example")
    return model


SHORTCUTS = ("option B shortcuts (identity, or a 1x1 stride-2 convolution with batch norm where a stage widens; "
             "the paper's option A has none)")
write("resnet20", "The CIFAR ResNet-20 of He et al. 2016 (3 stages of 3 residual blocks on 16, 32, 64 filters), "
      "batch norm, " + SHORTCUTS + ", on 3x32x32 images: PARAMS parameters, FLOPS MFLOPs forward per example.", [3, 32, 32], resnet(20, [3, 32, 32]))
write("resnet56", "The CIFAR ResNet-56 of He et al. 2016 (3 stages of 9 residual blocks on 16, 32, 64 filters), "
      "batch norm, " + SHORTCUTS + ", on 3x32x32 images: PARAMS parameters, FLOPS MFLOPs forward per example.", [3, 32, 32], resnet(56, [3, 32, 32]))
write("resnet20_mnist", "ResNet-20 (He et al. 2016, " + SHORTCUTS + ") adapted to 1x28x28 images (MNIST, "
      "Fashion-MNIST): the same layers on 28 -> 14 -> 7 pixels; PARAMS parameters, FLOPS MFLOPs forward per example.", [1, 28, 28],
      resnet(20, [1, 28, 28]))
write("vgg_bn", "A small VGG with batch norm for 1x28x28 images: three stages of two 3x3 convolutions (16, 32, 64 "
      "filters) with batch norm and ReLU, 2x2 max-pools between them, global average pooling, 10 classes; "
      "PARAMS parameters, FLOPS MFLOPs forward per example.", [1, 28, 28], vgg_bn())
