"""The models of the ONNX model zoo (tests/onnx_zoo/make_zoo.py's export
step) and how each is exported: small PyTorch models with fixed seeds, each by
the legacy TorchScript exporter at opset 13 and 17, by the dynamo exporter at
opset 18, and with the exporter's defaults.

The committed models in tests/onnx_zoo/models were exported from this file:
its sha256 is recorded in models/exports.txt, and tests/onnx_zoo/zoo.sh
refuses models exported from another version of it (`make zoo-models`
exports them again; it needs torch)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return F.softmax(self.fc3(x), dim=-1)


def randomize_bn(m):
    """Batch norm in eval mode with running statistics that are not 0 and 1,
    so the folded or unfolded normalisation is really exercised."""
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            c = mod.num_features
            mod.running_mean.copy_(torch.randn(c) * 0.3)
            mod.running_var.copy_(torch.rand(c) + 0.5)
            mod.weight.data.copy_(torch.rand(c) + 0.5)
            mod.bias.data.copy_(torch.randn(c) * 0.2)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        return self.fc(torch.flatten(x, 1))


class DepthwiseSeparable(nn.Module):
    """A MobileNet v2 style inverted residual block: 1x1 expand, 3x3
    depthwise (groups = channels), 1x1 project, ReLU6, residual add."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(8, 24, 1, bias=False)
        self.b1 = nn.BatchNorm2d(24)
        self.dw = nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False)
        self.b2 = nn.BatchNorm2d(24)
        self.project = nn.Conv2d(24, 8, 1, bias=False)
        self.b3 = nn.BatchNorm2d(8)

    def forward(self, x):
        y = F.relu6(self.b1(self.expand(x)))
        y = F.relu6(self.b2(self.dw(y)))
        y = self.b3(self.project(y))
        return F.adaptive_avg_pool2d(x + y, 1).flatten(1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                batch_first=True)

    def forward(self, x):
        return self.layer(x)


class PackedRNN(nn.Module):
    """An LSTM or GRU over a padded batch with per-sequence lengths, as
    torch exports pack_padded_sequence: the lengths become the ONNX op's
    sequence_lens input."""

    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(8, 16, num_layers=1)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=True)
        out, _ = self.rnn(packed)
        y, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
        return y


class PlainRNN(nn.Module):
    def __init__(self, cell, bidirectional=False):
        super().__init__()
        self.rnn = cell(8, 16, num_layers=1, bidirectional=bidirectional)

    def forward(self, x):
        y, h = self.rnn(x)
        return (y, *h) if isinstance(h, tuple) else (y, h)


class Decoder(nn.Module):
    """An upsampling decoder: transposed convolution, then nearest and
    bilinear upsampling (ONNX Resize)."""

    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1)
        self.near = nn.Upsample(scale_factor=2, mode="nearest")
        self.conv = nn.Conv2d(6, 4, 3, padding=1)
        self.bilin = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, x):
        x = F.relu(self.up(x))
        x = self.near(x)
        return self.bilin(torch.sigmoid(self.conv(x)))


def rnn_inputs():
    x = torch.randn(6, 3, 8)
    lengths = torch.tensor([6, 4, 2], dtype=torch.int64)
    return (x, lengths)


# name, constructor, inputs, input names
MODELS = [
    ("mlp", MLP, lambda: (torch.randn(4, 16),), ["x"]),
    ("cnn", SmallCNN, lambda: (torch.randn(2, 3, 16, 16),), ["image"]),
    ("dwsep", DepthwiseSeparable, lambda: (torch.randn(2, 8, 8, 8),), ["x"]),
    ("transformer", Encoder, lambda: (torch.randn(2, 5, 32),), ["tokens"]),
    ("lstm", lambda: PlainRNN(nn.LSTM), lambda: (torch.randn(6, 3, 8),), ["x"]),
    ("bilstm", lambda: PlainRNN(nn.LSTM, bidirectional=True), lambda: (torch.randn(6, 3, 8),), ["x"]),
    ("gru", lambda: PlainRNN(nn.GRU), lambda: (torch.randn(6, 3, 8),), ["x"]),
    ("lstm_packed", lambda: PackedRNN(nn.LSTM), rnn_inputs, ["x", "lengths"]),
    ("gru_packed", lambda: PackedRNN(nn.GRU), rnn_inputs, ["x", "lengths"]),
    ("decoder", Decoder, lambda: (torch.randn(1, 8, 4, 4),), ["z"]),
]

# exporter tag, opset, dynamo; "default" is torch.onnx.export with nothing but
# the input names: this torch's default opset (20 in 2.15) and the weights in
# an external model.onnx.data file beside the model.
EXPORTS = [("legacy", 13, False), ("legacy", 17, False), ("dynamo", 18, True), ("default", None, None)]


def export(model, inputs, names, path, opset, dynamo):
    if opset is None:
        with torch.no_grad():
            torch.onnx.export(model, inputs, path, input_names=names)
        return
    kw = dict(input_names=names, opset_version=opset, dynamo=dynamo)
    if dynamo:
        kw.update(external_data=False, optimize=True)
    else:
        kw.update(do_constant_folding=True)
    with torch.no_grad():
        torch.onnx.export(model, inputs, path, **kw)
