"""Regenerate a demo's shipped curves (the Curves view's bundled curves): the mnist1d demo's
unlearning run and training run, the Fashion-MNIST demo's training run.

    OMP_NUM_THREADS=1 .venv/bin/python reproduction/demo_curves.py [--demo assets/demo-mnist1d]
    OMP_NUM_THREADS=1 .venv/bin/python reproduction/demo_curves.py --demo assets/demo --skip-rerun

1. Re-runs the demo's FT recipe (the ``ft`` entry's hyper-parameters, from the shipped
   half-precision original) through ``unlearn``'s job with ``save_every=2`` in a scratch copy,
   and checks that its last epoch reproduces the shipped ``models/ft.safetensors`` (the
   largest weight difference is printed; the run is refused above one float16 rounding step,
   1e-3).
2. Saves epochs 2, 4, 6 and 8 as float16 safetensors in ``models/ft-epochs/`` (tagged with
   ``ft.safetensors``' demo build key, so a resumed ``demo build`` keeps them) and records them
   as the ``ft`` entry's ``checkpoints`` (fractions 0.2–0.8; the workspace hash does not cover
   them, so the shipped ``results.sqlite`` stays valid).
3. Evaluates them (where the demo keeps them), and the original's training checkpoints (its
   initial weights and 10–80% of training), at the demo's ``[defaults]`` into a full
   checkpoint store in ``.sde-cache/`` (resumable: ``evaluate-checkpoints``' own function) and
   ships its ``models`` rows to ``checkpoints.sqlite``
   (:func:`~sde_core.pipeline.curves.ship_checkpoint_store`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from sde_core.inputs.models import load_checkpoint, save_checkpoint
from sde_core.pipeline.curves import (
    CHECKPOINT_STORE,
    evaluate_checkpoints,
    ship_checkpoint_store,
)
from sde_core.pipeline.jobs import unlearn_model_job
from sde_core.pipeline.store import ResultsStore
from sde_core.pipeline.workspace import CheckpointRef, cache_path
from sde_core.pipeline.workspace_load import load_workspace
from sde_core.pipeline.workspace_write import write_workspace

ROOT = Path(__file__).resolve().parents[1]
MODEL = "ft"
SAVE_EVERY = 2
BUILD_KEY = "sde_demo_build"  # sde_core.pipeline.demo's metadata key


def _build_key(path: Path) -> str:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return str((fh.metadata() or {}).get(BUILD_KEY, ""))


def rerun(demo: Path) -> list[CheckpointRef]:
    """Steps 1 and 2; the new checkpoint references."""
    ws = load_workspace(demo)
    entry = ws.model(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "ws"
        shutil.copytree(demo, scratch, ignore=shutil.ignore_patterns(".sde-cache", "*.sqlite*"))
        new = unlearn_model_job(str(scratch), entry.method or MODEL, f"{MODEL}_steps",
                                dict(entry.hyperparameters), save_every=SAVE_EVERY)  # fmt: skip
        final = load_checkpoint(scratch / new.checkpoint).state_dict()
        shipped = load_checkpoint(ws.path(entry.checkpoint)).state_dict()
        diff = max(float((final[k].half().float() - shipped[k].float()).abs().max())
                   for k in shipped)  # fmt: skip
        print(f"rerun's last epoch vs shipped {entry.checkpoint}: largest weight difference "
              f"{diff:.3g} (float16)")  # fmt: skip
        if diff > 1e-3:
            sys.exit(f"error: the rerun does not reproduce {entry.checkpoint}; nothing written")
        key = _build_key(ws.path(entry.checkpoint))
        folder = ws.path("models") / f"{MODEL}-epochs"
        folder.mkdir(parents=True, exist_ok=True)
        refs = []
        for ref in new.checkpoints:
            model = load_checkpoint(scratch / ref.path)
            out = folder / Path(ref.path).name
            save_checkpoint(model, out, model.sde_arch, half=True,  # type: ignore[arg-type]
                            metadata={BUILD_KEY: key})  # fmt: skip
            refs.append(CheckpointRef(ref.fraction, out.relative_to(demo).as_posix()))
    entry.checkpoints = refs
    write_workspace(ws)
    return refs


def evaluate(demo: Path) -> Path:
    """Step 3; the shipped file."""
    ws = load_workspace(demo)
    full = cache_path(demo, "checkpoints").with_name("checkpoints-full.sqlite")
    t0 = time.perf_counter()

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "checkpoints":
            print(f"  {done}/{total} checkpoints ({time.perf_counter() - t0:.0f} s)")

    # the original's training run and the FT run, where the demo keeps its checkpoints (the
    # Fashion-MNIST demo ships the training run only: its FT epochs would not fit the budget)
    names = [n for n in (ws.original().name, MODEL) if ws.model(n).checkpoints]
    with ResultsStore(full) as store:
        evaluate_checkpoints(ws, ws.defaults, names, store, progress=progress)
    target = demo / CHECKPOINT_STORE
    units = ship_checkpoint_store(full, target, ws.defaults)  # the runs a page reads
    print(f"shipped {units} checkpoint evaluations to {target} ({target.stat().st_size} bytes)")
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--demo", default=str(ROOT / "assets" / "demo-mnist1d"))
    ap.add_argument("--skip-rerun", action="store_true", help="keep the existing checkpoints")
    args = ap.parse_args()
    torch.set_num_threads(1)
    demo = Path(args.demo).resolve()
    if not args.skip_rerun:
        for ref in rerun(demo):
            print(f"kept {ref.path} at fraction {ref.fraction:g}")
    evaluate(demo)


if __name__ == "__main__":
    main()
