"""The memorisation tables of the diffusion demos, generated from their shipped files.

For every diffusion demo (``sde_core.pipeline.demo_diffusion.DIFFUSION_DEMOS``) whose folder
holds ``denoising_loss.json``, writes ``reproduction/results/diffusion/<folder>.md``: the
denoising-loss gaps with bootstrap intervals, the copy test and the Figure 6 sweep
(:func:`sde_core.pipeline.diffusion_memorisation.memorisation_markdown`). REPRODUCTION.md
includes these files between ``quoted:file`` markers (reproduction/quoted_numbers.py), and
tests/pipeline/test_diffusion_mem_demo.py checks that they are current.

Usage::

    python reproduction/diffusion_tables.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from sde_core.pipeline.demo_diffusion import DIFFUSION_DEMOS, default_diffusion_folder
from sde_core.pipeline.diffusion_memorisation import LOSS_FILE, memorisation_markdown

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reproduction" / "results" / "diffusion"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, spec in DIFFUSION_DEMOS.items():
        folder = default_diffusion_folder(name)
        if (folder / LOSS_FILE).is_file():
            target = OUT / f"{spec.folder}.md"
            target.write_text(memorisation_markdown(folder), encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
