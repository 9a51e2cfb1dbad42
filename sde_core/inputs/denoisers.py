"""EDM denoisers (Karras et al. 2022) and how SDE probes them at fixed noise levels.

A denoiser is a model ``D(x; σ)`` that maps a noisy image ``x = y + σ·ε`` (clean image ``y``,
``ε ~ N(0, I)``) to an estimate of ``y``. :class:`EDMDenoiser` wraps a small U-Net ``F_θ`` in
the preconditioning of Karras et al. (2022, "Elucidating the design space of diffusion-based
generative models", Table 1, column "EDM")::

    D(x; σ) = c_skip(σ)·x + c_out(σ)·F_θ(c_in(σ)·x; c_noise(σ))
    c_skip = σ_d² / (σ² + σ_d²)     c_out = σ·σ_d / √(σ² + σ_d²)
    c_in   = 1 / √(σ² + σ_d²)       c_noise = ln(σ) / 4

with ``σ_d`` (``sigma_data``) the standard deviation of the data (0.5 for images in [−1, 1]).

**SDE's representation of a denoiser** (method §14). A layer of a denoiser is named
``<layer>@<σ_t>``: the activation of ``<layer>`` (``denoised``, the aliases ``block1``…
``block4`` or a module name) when the model denoises ``y + σ_t·ε(y)``, where ``ε(y)`` is ONE
fixed Gaussian draw per sample, seeded from the sample's own pixels and :data:`PROBE_NOISE_SEED`
(:func:`probe_noise`). The noise therefore does not depend on the model, the batch, the row order
or σ_t: every model sees exactly the same noisy inputs, and only its denoising differs.
"""

from __future__ import annotations

import hashlib
import math
import re

import torch
from torch import nn

from sde_core.errors import ActivationError, CheckpointError

__all__ = [
    "DENOISED",
    "PROBE_NOISE_SEED",
    "EDMDenoiser",
    "noise_layer_name",
    "parse_noise_layer",
    "probe_noise",
]

#: Seed mixed into every sample's probe-noise seed (method §14); part of the method, so two
#: evaluations of the same model and layer always see the same noisy inputs.
PROBE_NOISE_SEED = 0

#: The alias of a denoiser's output, the denoised image (flattened, never pooled).
DENOISED = "denoised"

_LEVEL = re.compile(r"^(?P<base>.+)@(?P<level>[^@]*)$")


def parse_noise_layer(name: str) -> tuple[str, float | None]:
    """Split ``"denoised@0.5"`` into ``("denoised", 0.5)``; a name without ``@`` gives
    ``(name, None)``.

    Raises:
        ActivationError: the part after ``@`` is not a positive finite number.
    """
    match = _LEVEL.match(name)
    if match is None:
        return name, None
    text = match.group("level")
    try:
        level = float(text)
    except ValueError:
        level = math.nan
    if not (math.isfinite(level) and level > 0):
        raise ActivationError(
            f"layer {name!r} names the noise level {text!r}; write a positive number after '@', "
            "e.g. 'denoised@0.5'"
        )
    return match.group("base"), level


def noise_layer_name(base: str, level: float) -> str:
    """``noise_layer_name("denoised", 0.5) == "denoised@0.5"`` (``:g`` format: 1.0 gives ``@1``)."""
    return f"{base}@{float(level):g}"


def probe_noise(x: torch.Tensor, seed: int = PROBE_NOISE_SEED) -> torch.Tensor:
    """The fixed standard-normal noise ``ε(y)`` of each sample of a batch ``x`` ``(N, ...)``.

    Sample i's noise is drawn from a CPU generator seeded with the first 8 bytes of
    BLAKE2b(``seed`` ‖ the sample's float32 bytes), so it depends only on the sample's pixels and
    ``seed``. Returns a float32 tensor of ``x``'s shape on ``x``'s device.
    """
    flat = x.detach().to("cpu", torch.float32).contiguous()
    out = torch.empty(flat.shape, dtype=torch.float32)
    salt = int(seed).to_bytes(8, "little", signed=False)
    for i in range(flat.shape[0]):
        digest = hashlib.blake2b(salt + flat[i].numpy().tobytes(), digest_size=8).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))
        out[i] = torch.randn(flat.shape[1:], generator=gen)
    return out.to(x.device)


class _NoiseEmbedding(nn.Module):
    """Fourier features of ``c_noise`` (fixed frequencies), then a two-layer MLP.

    ``(N,)`` noise conditionings -> ``(N, E)`` embeddings.
    """

    freqs: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        half = dim // 2
        self.register_buffer(
            "freqs", torch.exp(-math.log(1e4) * torch.arange(half) / max(half, 1)), persistent=False
        )
        self.mlp = nn.Sequential(nn.Linear(2 * half, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, c_noise: torch.Tensor) -> torch.Tensor:
        """Embeddings ``(N, E)`` of ``c_noise`` ``(N,)``: cos/sin of 100·c_noise at fixed
        log-spaced frequencies, through the MLP."""
        angles = c_noise[:, None] * self.freqs[None, :] * 100.0
        return self.mlp(torch.cat([angles.cos(), angles.sin()], dim=1))


def _groups(channels: int) -> int:
    return math.gcd(channels, 8)


class _ResBlock(nn.Module):
    """GroupNorm-SiLU-conv twice, the noise embedding added as a per-channel bias in between,
    and a (1×1 when the widths differ) skip connection. ``(N, c_in, H, W) -> (N, c_out, H, W)``."""

    def __init__(self, c_in: int, c_out: int, emb: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(_groups(c_in), c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.emb = nn.Linear(emb, c_out)
        self.norm2 = nn.GroupNorm(_groups(c_out), c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip: nn.Module = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(self.act(self.norm1(x)))
        h = h + self.emb(emb)[:, :, None, None]
        h = self.conv2(self.act(self.norm2(h)))
        return h + self.skip(x)


class EDMDenoiser(nn.Module):
    """A small EDM-preconditioned U-Net denoiser for ``(N, C, H, W)`` images (H, W divisible by 4).

    ``F_θ``: ``stem`` conv → ``enc1`` (H×W, c1) → ``down1`` → ``enc2`` (H/2, c2) → ``down2`` →
    ``mid`` (H/4, c2) → ``up2`` → ``dec2`` (H/2, on [up, enc2]) → ``up1`` → ``dec1`` (H, on
    [up, enc1]) → ``head`` (GroupNorm, SiLU, conv to C). Each block is a residual block that
    receives the noise embedding.

    Args:
        in_channels: image channels C.
        channels: widths ``(c1, c2)``.
        emb_dim: width of the noise embedding.
        sigma_data: σ_d of the preconditioning (0.5 for data in [−1, 1]).
        image_size: H = W of the images (for the layer listing's dry pass).
    """

    def __init__(
        self,
        in_channels: int = 1,
        channels: tuple[int, int] = (32, 64),
        emb_dim: int = 64,
        sigma_data: float = 0.5,
        image_size: int = 28,
    ) -> None:
        super().__init__()
        c1, c2 = (int(c) for c in channels)
        if c1 < 1 or c2 < 1 or emb_dim < 2:
            raise CheckpointError(
                f"EDMDenoiser needs positive channels and emb_dim >= 2; got {channels}, {emb_dim}"
            )
        if not (math.isfinite(sigma_data) and sigma_data > 0):
            raise CheckpointError(f"sigma_data must be a positive number; got {sigma_data}")
        if image_size % 4:
            raise CheckpointError(f"image_size must be divisible by 4; got {image_size}")
        self.sigma_data = float(sigma_data)
        self.image_size = int(image_size)
        self.embed = _NoiseEmbedding(emb_dim)
        self.stem = nn.Conv2d(in_channels, c1, 3, padding=1)
        self.enc1 = _ResBlock(c1, c1, emb_dim)
        self.down1 = nn.Conv2d(c1, c2, 3, stride=2, padding=1)
        self.enc2 = _ResBlock(c2, c2, emb_dim)
        self.down2 = nn.Conv2d(c2, c2, 3, stride=2, padding=1)
        self.mid = _ResBlock(c2, c2, emb_dim)
        self.up2 = nn.ConvTranspose2d(c2, c2, 4, stride=2, padding=1)
        self.dec2 = _ResBlock(2 * c2, c2, emb_dim)
        self.up1 = nn.ConvTranspose2d(c2, c1, 4, stride=2, padding=1)
        self.dec1 = _ResBlock(2 * c1, c1, emb_dim)
        self.head = nn.Sequential(
            nn.GroupNorm(_groups(c1), c1), nn.SiLU(), nn.Conv2d(c1, in_channels, 3, padding=1)
        )

    def preconditioning(
        self, sigma: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(c_skip, c_out, c_in, c_noise)`` of Karras et al. (2022), each of ``sigma``'s shape."""
        sd2 = self.sigma_data**2
        total = sigma**2 + sd2
        return (
            sd2 / total,
            sigma * self.sigma_data / total.sqrt(),
            1.0 / total.sqrt(),
            sigma.log() / 4,
        )

    def forward(self, x: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
        """The denoised estimate ``D(x; σ)`` ``(N, C, H, W)`` of noisy images ``x``.

        Args:
            x: noisy images ``(N, C, H, W)``.
            sigma: noise level(s): a positive number, or a tensor ``(N,)`` (one per image).
        """
        s = torch.as_tensor(sigma, dtype=x.dtype, device=x.device).reshape(-1)
        if s.numel() == 1:
            s = s.expand(x.shape[0])
        c_skip, c_out, c_in, c_noise = (c.view(-1, 1, 1, 1) for c in self.preconditioning(s))
        emb = self.embed(c_noise.view(-1))
        h1 = self.enc1(self.stem(c_in * x), emb)
        h2 = self.enc2(self.down1(h1), emb)
        h3 = self.mid(self.down2(h2), emb)
        d2 = self.dec2(torch.cat([self.up2(h3), h2], dim=1), emb)
        d1 = self.dec1(torch.cat([self.up1(d2), h1], dim=1), emb)
        return c_skip * x + c_out * self.head(d1)

    def probe(self, y: torch.Tensor, level: float) -> torch.Tensor:
        """SDE's probe (method §14): ``D(y + σ_t·ε(y); σ_t)`` for clean images ``y``
        ``(N, C, H, W)`` and the fixed per-sample noise ε of :func:`probe_noise`."""
        return self(y + float(level) * probe_noise(y), float(level))
