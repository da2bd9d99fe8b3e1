"""Layers both test modeling files use (shipped into each model folder beside them, as real checkpoints ship
their modeling code)."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate(x, theta):
    """Rotary position embedding of x (B, H, T, D), positions 0..T-1."""
    T, D = x.shape[-2:]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D)  # (D/2,)
    ang = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv  # (T, D/2)
    cos, sin = torch.cat([ang, ang], -1).cos().to(x.dtype), torch.cat([ang, ang], -1).sin().to(x.dtype)
    half = torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1)
    return x * cos + half * sin
