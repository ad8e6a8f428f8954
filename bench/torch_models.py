"""PyTorch twins of Ember's built-in models, shared by the benchmarks' torch sides
(train_torch.py, fast_torch.py), so both measure the same network."""


def resnet20(torch, in_ch):
    """ResNet-20 as em_model_resnet20 builds it: He et al. 2016 section 4.2 (3 stages of 3
    basic blocks, 16/32/64 channels), option A shortcuts (subsample, zero channels), bias-free
    convolutions, batch norm, a global average pool and a linear layer to 10 classes."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.stride, self.extra = stride, cout - cin

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            s = x
            if self.stride != 1 or self.extra:  # option A: subsample, zero channels
                s = x[:, :, ::self.stride, ::self.stride]
                s = nn.functional.pad(s, (0, 0, 0, 0, 0, self.extra))
            return torch.relu(y + s)

    layers = [nn.Conv2d(in_ch, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    cin = 16
    for stage, cout in enumerate((16, 32, 64)):
        for b in range(3):
            layers.append(Block(cin, cout, 2 if stage > 0 and b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)
