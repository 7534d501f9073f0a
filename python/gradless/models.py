"""The built-in forward models in PyTorch: the architectures Gradless builds with tch.

One definition for every Python side of Gradless: the PyTorch peer (`gradless.peer`), the
cards' Python side (`gradless.card_peer`) and the ahead-of-time compile
(`gradless.aoti_compile`), and the benchmarks under bench/.

Every module's `state_dict` names are Gradless's variable names (engine/src/models/: the
tiny MLP as an nn.Sequential's indices, the encoder as a Sequential of `EncoderLayer`s,
ResNet and MobileNetV2 as torchvision names them), so Gradless's weights, saved as
safetensors, load here by name with no renaming, and torchvision's load into the image
models strictly (`python python/gradless/peer.py --check-builtin` checks these against
torchvision, outputs and CPU memory peaks included).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ("tiny_mlp", "resnet18", "resnet50", "mobilenet_v2", "transformer")
WEIGHT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# Input sizes: (default, max), as protocol::ModelId::input says; ResNets and MobileNet need
# at least 32 pixels a side.
INPUT_SIZES = {
    "tiny_mlp": (512, 65_536),
    "resnet18": (224, 1024),
    "resnet50": (224, 1024),
    "mobilenet_v2": (224, 1024),
    "transformer": (128, 4096),
}
IMAGE_MODELS = ("resnet18", "resnet50", "mobilenet_v2")

# Transformer and MLP constants, as in engine/src/models/{encoder,mlp}.rs.
D_MODEL = 256
HEADS = 4
FF = 1024
LAYERS = 4
DROPOUT = 0.1
MLP_HIDDEN = 512
MLP_DROPOUT = 0.5
CLASSES = 1000


def tiny_mlp(features: int) -> nn.Module:
    """Linear -> BatchNorm -> ReLU -> Dropout, twice, then a linear head (engine/src/models/mlp.rs)."""
    return nn.Sequential(
        nn.Linear(features, MLP_HIDDEN),
        nn.BatchNorm1d(MLP_HIDDEN),
        nn.ReLU(),
        nn.Dropout(MLP_DROPOUT),
        nn.Linear(MLP_HIDDEN, MLP_HIDDEN),
        nn.BatchNorm1d(MLP_HIDDEN),
        nn.ReLU(),
        nn.Dropout(MLP_DROPOUT),
        nn.Linear(MLP_HIDDEN, 10),
    )


class EncoderLayer(nn.Module):
    """One post-norm encoder layer, written out op by op like engine/src/models/encoder.rs's EncoderLayer.

    Deliberately not nn.TransformerEncoderLayer: its fused inference fast path would run a
    different kernel sequence from Gradless's and make the comparison unfair.
    """

    def __init__(self) -> None:
        super().__init__()
        self.in_proj = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.out_proj = nn.Linear(D_MODEL, D_MODEL)
        self.linear1 = nn.Linear(D_MODEL, FF)
        self.linear2 = nn.Linear(FF, D_MODEL)
        self.norm1 = nn.LayerNorm(D_MODEL)
        self.norm2 = nn.LayerNorm(D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.in_proj(x).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        # Attention dropout, like nn.MultiheadAttention's, only in training.
        p = DROPOUT if self.training else 0.0
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        attn = self.out_proj(attn.transpose(1, 2).reshape(b, s, d))
        x = self.norm1(x + F.dropout(attn, DROPOUT, self.training))
        ff = self.linear2(F.dropout(F.relu(self.linear1(x)), DROPOUT, self.training))
        return self.norm2(x + F.dropout(ff, DROPOUT, self.training))


def transformer() -> nn.Module:
    """4 post-norm layers, d_model 256, 4 heads, ff 1024, dropout 0.1, batch first."""
    return nn.Sequential(*[EncoderLayer() for _ in range(LAYERS)])


# ---- torchvision's image models, without torchvision ------------------------------------------
#
# Line for line the architectures of torchvision 0.26's resnet.py and mobilenetv2.py (module
# names included, so torchvision's state_dict loads into them strictly), in-place ReLUs and
# additions included, and statement by statement in forward(): when a Python variable drops
# its tensor decides the peak memory. The peer uses torchvision's own when it can import it
# (unless --builtin-models); the card peer and the compile always use these.


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, layers: list[int], num_classes: int = CLASSES):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride), nn.BatchNorm2d(planes * block.expansion)
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)
        return x


def _conv_bn_relu6(cin: int, cout: int, kernel_size: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """torchvision's Conv2dNormActivation(norm_layer=BatchNorm2d, activation_layer=ReLU6)."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [_conv_bn_relu6(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [
            _conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    # t (expansion), c (channels), n (repeats), s (first stride); width 1.0 keeps every c.
    SETTINGS = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]

    def __init__(self, num_classes: int = CLASSES):
        super().__init__()
        cin, last = 32, 1280
        features = [_conv_bn_relu6(3, cin, stride=2)]
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, expand_ratio=t))
                cin = c
        features.append(_conv_bn_relu6(cin, last, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(last, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x


BUILTIN_IMAGE_MODELS = {
    "resnet18": lambda: ResNet(BasicBlock, [2, 2, 2, 2]),
    "resnet50": lambda: ResNet(Bottleneck, [3, 4, 6, 3]),
    "mobilenet_v2": lambda: MobileNetV2(),
}


def build(name: str, input_size: int) -> nn.Module:
    """The built-in model `name` with random weights (the current torch seed's), on the CPU,
    built from this file's architectures (torchvision is never imported); `input_size` is
    the tiny MLP's input width and is ignored by the others."""
    if name == "tiny_mlp":
        return tiny_mlp(input_size)
    if name == "transformer":
        return transformer()
    if name in BUILTIN_IMAGE_MODELS:
        return BUILTIN_IMAGE_MODELS[name]()
    raise KeyError(f"{name} is not a built-in model: {', '.join(MODELS)}")


def input_shape(name: str, batch: int, size: int) -> list[int]:
    """The shape of a built-in model's input batch, as Gradless makes it (engine/src/models/mod.rs)."""
    if name == "tiny_mlp":
        return [batch, size]
    if name in IMAGE_MODELS:
        return [batch, 3, size, size]
    return [batch, size, D_MODEL]
