"""The seeds' image pipeline: JPEGs decoded, cropped, flipped and scaled to float, batch 64, 2 workers.

3,000 JPEGs of 320 x 320 (smooth random scenes with grain, about the size of photos of that size), ten
classes. Every reader yields ``(image, label)`` through the same torchvision v2 transform:
``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``, ``ToImage()``, ``ToDtype(float32, scale=True)``;
batch 64, 2 workers, shuffled, torch's default collate. Images/s is measured over the second epoch (the
first warms the page cache and each library's own caches), from the loader's ``iter`` to its last
batch; each measurement runs in a fresh process, rounds interleaved.

The readers:

- ``ImageFolder``: torchvision's, on the JPEG files on local disk (torch's ``DataLoader``, shuffle);
- ``stream_plugin``: an MDS ``jpeg`` column (our ``MDSWriter``; the files' own bytes), decoded to PIL;
- ``stream_plugin decode=tensor``: the same shards, decoded to a uint8 tensor (``decode="tensor"``);
- ``mosaicml-streaming``: the same shards, PIL (a subclass's ``get_item`` applies the transform);
- ``litdata``: its own chunks (``optimize`` of the opened JPEG files: their bytes), which it decodes
  with ``torchvision.io.decode_jpeg`` to a tensor;
- ``PIL ceiling``: no reader at all. The files' bytes are in memory, and two forked processes (one per
  worker, torch on one thread and our workers' heap policy) each open half of them with Pillow and run
  the transform, with no collate and no hand-over.
  No reader that hands out PIL images (the default, MosaicML's) can be faster than this on the same
  cores, so it bounds what our default can reach.

``--smoke`` (CI, without torchvision) measures ours and the PIL ceiling only, on 48 small images with a
plain-torch stand-in for the transform.
"""

from __future__ import annotations

import gc
import json
import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import median_of, ratio, run_child, spread_of
from benchmarks.options import Options
from benchmarks.workloads import LITDATA, MOSAICML, OURS, SHARD_BYTES, warm_page_cache

FIGURE = "images"
TITLE = "Image pipeline (the seeds' benchmark: JPEG, RandomResizedCrop, flip, float; batch 64, 2 workers)"
IMAGE_FOLDER = "torchvision ImageFolder (local disk)"
OURS_TENSOR = f"{OURS} decode=tensor"
PIL_CEILING = "PIL ceiling (Pillow + transform, no reader)"
READERS = (IMAGE_FOLDER, OURS, OURS_TENSOR, MOSAICML, LITDATA, PIL_CEILING)
FULL_IMAGES = 3000
SMOKE_IMAGES = 48
SIDE = 320
SMOKE_SIDE = 64
CROP = 224
SMOKE_CROP = 32
CLASSES = 10
BATCH = 64
SMOKE_BATCH = 16
WORKERS = 2
_MARKER = ".benchmark-complete"


# --------------------------------------------------------------------------------------------------
# The images, written once in each reader's layout.


def image_array(index: int, side: int) -> np.ndarray:
    """Image ``index``: a smooth random scene (bicubic from 8 x 8) with grain, uint8 (side, side, 3)."""
    from PIL import Image

    rng = np.random.default_rng([11, index])
    coarse = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), "RGB")
    smooth = np.asarray(coarse.resize((side, side), Image.Resampling.BICUBIC), dtype=np.int16)
    grain = rng.normal(0, 6, smooth.shape).astype(np.int16)
    return np.clip(smooth + grain, 0, 255).astype(np.uint8)


def _write_files(folder: Path, count: int, side: int) -> list[tuple[str, int]]:
    """The JPEG files, ``folder/class_k/image_i.jpg`` (ImageFolder's layout); returns (path, label)s."""
    from PIL import Image

    files = []
    for index in range(count):
        label = index % CLASSES
        path = folder / f"class_{label}" / f"image_{index:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image_array(index, side), "RGB").save(path, format="JPEG", quality=90)
        files.append((str(path), label))
    return files


def _write_ours(folder: Path, files: list[tuple[str, int]]) -> None:
    from PIL import Image

    from stream_plugin import MDSWriter

    with MDSWriter(out=str(folder), columns={"image": "jpeg", "label": "int"}, size_limit=SHARD_BYTES) as writer:
        for path, label in files:
            with Image.open(path) as image:  # an opened JPEG: the writer keeps the file's bytes
                writer.write({"image": image, "label": label})


def litdata_sample(item: tuple[str, int]) -> dict[str, Any]:
    """litdata's ``optimize`` function (module level, for its workers): the opened JPEG and its label."""
    from PIL import Image

    path, label = item
    return {"image": Image.open(path), "label": label}


def _write_litdata(folder: Path, files: list[tuple[str, int]]) -> None:
    from litdata import optimize

    optimize(
        fn=litdata_sample,
        inputs=files,
        output_dir=str(folder),
        chunk_bytes=SHARD_BYTES,
        num_workers=1,
        reorder_files=False,
    )


def prepare(root: Path, count: int, side: int, *, with_litdata: bool) -> dict[str, Path]:
    """Write the files, our shards and (full runs) litdata's chunks, unless a finished copy exists."""
    base = root / f"images-{count}x{side}"
    marker = base / _MARKER
    expected = json.dumps({"images": count, "side": side, "litdata": with_litdata, "shard_bytes": SHARD_BYTES})
    folders = {"files": base / "files", "ours": base / "mds-ours", "litdata": base / "litdata"}
    if not (marker.exists() and marker.read_text() == expected):
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        files = _write_files(folders["files"], count, side)
        _write_ours(folders["ours"], files)
        if with_litdata:
            _write_litdata(folders["litdata"], files)
        marker.write_text(expected)
    return folders


# --------------------------------------------------------------------------------------------------
# The transform and each reader's loader (module-level classes: DataLoader workers may pickle them).


def pipeline(crop: int) -> Callable[[Any], Any]:
    """The seeds' transform (torchvision v2); without torchvision (the CI smoke) a plain-torch stand-in."""
    try:
        import torch
        from torchvision.transforms import v2
    except Exception:  # noqa: BLE001 - absent, or built for another torch
        return TorchStandIn(crop)
    return v2.Compose(
        [
            v2.RandomResizedCrop(crop, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
        ]
    )


class TorchStandIn:
    """A corner crop, a flip and scaling to float in plain torch: the smoke's transform."""

    def __init__(self, crop: int) -> None:
        self.crop = crop

    def __call__(self, image: Any) -> Any:
        import torch

        if not isinstance(image, torch.Tensor):
            image = torch.from_numpy(np.asarray(image, np.uint8).copy()).permute(2, 0, 1)
        return image[:, : self.crop, : self.crop].flip(-1).float() / 255


class SampleTransform:
    """``{"image", "label"}`` -> ``(transformed image, label)``: the transform every reader applies."""

    def __init__(self, crop: int) -> None:
        self.transform = pipeline(crop)

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        return self.transform(sample["image"]), int(sample["label"])


def _mosaicml_class(base: type) -> type:
    class Transformed(base):
        """MosaicML's way to transform: a subclass's ``get_item``."""

        def __init__(self, *, sample_transform: SampleTransform, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.sample_transform = sample_transform

        def get_item(self, index: int) -> Any:
            return self.sample_transform(super().get_item(index))

    return Transformed


def _litdata_class(base: type) -> type:
    class Transformed(base):
        """litdata's way to transform: a subclass's ``__getitem__``."""

        def __init__(self, *, sample_transform: SampleTransform, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.sample_transform = sample_transform

        def __getitem__(self, index: Any) -> Any:
            return self.sample_transform(super().__getitem__(index))

    return Transformed


def make_loader(reader: str, folders: dict[str, str], crop: int, batch: int) -> Any:
    transform = SampleTransform(crop)
    if reader == IMAGE_FOLDER:
        from torch.utils.data import DataLoader
        from torchvision.datasets import ImageFolder

        folder = ImageFolder(folders["files"], transform=transform.transform)
        return DataLoader(folder, batch_size=batch, shuffle=True, num_workers=WORKERS)
    if reader in (OURS, OURS_TENSOR):
        from stream_plugin import StreamingDataLoader, StreamingDataset

        ours = StreamingDataset(
            local=folders["ours"],
            batch_size=batch,
            shuffle=True,
            num_canonical_nodes=1,
            transform=transform,
            decode="tensor" if reader == OURS_TENSOR else "pil",
        )
        return StreamingDataLoader(ours, batch_size=batch, num_workers=WORKERS)
    if reader == MOSAICML:
        from streaming import StreamingDataLoader as MosaicLoader
        from streaming import StreamingDataset as MosaicDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        theirs = _mosaicml_class(MosaicDataset)(
            sample_transform=transform, local=folders["ours"], batch_size=batch, shuffle=True, num_canonical_nodes=1
        )
        return MosaicLoader(theirs, batch_size=batch, num_workers=WORKERS)
    from litdata import StreamingDataLoader as LitLoader
    from litdata import StreamingDataset as LitDataset

    lit = _litdata_class(LitDataset)(sample_transform=transform, input_dir=folders["litdata"], shuffle=True)
    return LitLoader(lit, batch_size=batch, num_workers=WORKERS)


def _transform_share(jpegs: list[bytes], share: int, transform: Callable[[Any], Any]) -> None:
    """One process of the PIL ceiling: open its share of ``jpegs`` with Pillow and transform each."""
    import io

    import torch
    from PIL import Image

    from stream_plugin.reading.heap import keep_freed_heap

    torch.set_num_threads(1)  # as in a DataLoader worker
    keep_freed_heap()  # as in our workers: a freed image's memory is reused, not given back and faulted in again
    for data in jpegs[share::WORKERS]:
        transform(Image.open(io.BytesIO(data)))


def _pil_epoch(jpegs: list[bytes], transform: Callable[[Any], Any]) -> None:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    processes = [
        context.Process(target=_transform_share, args=(jpegs, share, transform)) for share in range(WORKERS)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a PIL ceiling process exited with {process.exitcode}")


def measure_pil_ceiling(folders: dict[str, str], crop: int) -> dict[str, Any]:
    """The PIL ceiling: two epochs of Pillow + transform over the files' bytes in memory; the second timed.

    The transform is built here, before the fork, as a loader's workers inherit the dataset's (so that
    no process imports torchvision while it is measured)."""
    import torch  # noqa: F401  (imported before any timer, as for the readers)
    from PIL import Image  # noqa: F401

    transform = pipeline(crop)
    paths = sorted(Path(folders["files"]).rglob("*.jpg"))
    order = np.random.default_rng(0).permutation(len(paths))
    jpegs = [paths[index].read_bytes() for index in order]
    _pil_epoch(jpegs, transform)
    cpu_before = _cpu_seconds()
    start = time.perf_counter()
    _pil_epoch(jpegs, transform)
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_before
    return {
        "images_per_s": len(jpegs) / seconds,
        "cpu_ms_per_image": 1000 * cpu / len(jpegs),
        "images": len(jpegs),
        "first_epoch": len(jpegs),
        "shape": None,
        "backend": None,
    }


def measure_once(reader: str, folders: dict[str, str], crop: int, batch: int) -> dict[str, Any]:
    """Two epochs in this (fresh) process; images/s over the second."""
    import torch  # noqa: F401  (imported before any timer, with each library's top level)

    if reader == PIL_CEILING:
        return measure_pil_ceiling(folders, crop)

    if reader in (OURS, OURS_TENSOR):
        import stream_plugin.reading.dataset  # noqa: F401
    loader = make_loader(reader, folders, crop, batch)
    first = sum(len(labels) for _, labels in loader)
    gc.collect()  # the first epoch's workers are joined: their CPU time is in the "before"
    cpu_before = _cpu_seconds()
    start = time.perf_counter()
    images = 0
    shape = None
    batches = iter(loader)
    for batch_images, labels in batches:
        images += len(labels)
        shape = tuple(batch_images.shape[1:])
    seconds = time.perf_counter() - start
    del batches  # joins the second epoch's workers, so that their CPU time is counted
    gc.collect()
    cpu = _cpu_seconds() - cpu_before
    if reader == OURS_TENSOR:
        from stream_plugin.format.image_decode import image_tensor_backend

        backend = image_tensor_backend()
    else:
        backend = None
    return {
        "images_per_s": images / seconds,
        "cpu_ms_per_image": 1000 * cpu / images,
        "images": images,
        "first_epoch": first,
        "shape": shape,
        "backend": backend,
    }


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (the loader's joined workers):
    what an image costs whatever else the machine runs, which images/s on a shared machine is not."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(options: Options) -> dict[str, Any]:
    count, side, crop, batch = (
        (SMOKE_IMAGES, SMOKE_SIDE, SMOKE_CROP, SMOKE_BATCH) if options.smoke else (FULL_IMAGES, SIDE, CROP, BATCH)
    )
    readers = (OURS, OURS_TENSOR, PIL_CEILING) if options.smoke else READERS
    folders = prepare(options.data_root, count, side, with_litdata=not options.smoke)
    for folder in folders.values():
        if folder.exists():
            warm_page_cache(folder)
    plain = {name: str(folder) for name, folder in folders.items()}
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(options.rounds):
        for reader in readers:
            result = run_child("benchmarks.bench_images:measure_once", reader=reader, folders=plain, crop=crop, batch=batch)
            runs.setdefault(reader, []).append(result)
    jpeg_bytes = sum(path.stat().st_size for path in folders["files"].rglob("*.jpg"))
    return {
        "rows": [{"reader": reader, "runs": results} for reader, results in runs.items()],
        "images": count,
        "side": side,
        "crop": crop,
        "batch": batch,
        "mean_jpeg_bytes": jpeg_bytes // count,
    }


def render(result: dict[str, Any]) -> str:
    speed = {row["reader"]: median_of([run["images_per_s"] for run in row["runs"]]) for row in result["rows"]}
    disk = speed.get(IMAGE_FOLDER)
    lit = speed.get(LITDATA)
    lines = [
        f"{result['images']:,} JPEGs of {result['side']} x {result['side']} (mean {result['mean_jpeg_bytes']:,} "
        f"bytes), RandomResizedCrop({result['crop']}), a flip, float; batch {result['batch']}, {WORKERS} "
        "workers, shuffled; images/s over the second epoch, each run in a fresh process; CPU ms per image: "
        "the measuring process and its workers over that epoch.",
        "",
        "| reader | images/s (median) | spread | vs ImageFolder | vs litdata | CPU ms per image (median) |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        values = [run["images_per_s"] for run in row["runs"]]
        middle = median_of(values)
        backend = row["runs"][0].get("backend")
        name = f"{row['reader']} ({backend})" if backend else row["reader"]
        cpu = median_of([run.get("cpu_ms_per_image", 0.0) for run in row["runs"]])
        lines.append(
            f"| {name} | {middle:,.0f} | {spread_of(values)} | "
            f"{ratio(middle, disk) if disk else '-'} | {ratio(middle, lit) if lit else '-'} | {cpu:.2f} |"
        )
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Issue 38's: ours, by default and with ``decode="tensor"``, at 1.2x litdata and at least ImageFolder."""
    speed = {row["reader"]: median_of([run["images_per_s"] for run in row["runs"]]) for row in result["rows"]}
    checks = []
    for reader in (OURS, OURS_TENSOR):
        ours, lit, disk = speed.get(reader), speed.get(LITDATA), speed.get(IMAGE_FOLDER)
        if ours is None:
            continue
        if lit:
            checks.append((f"images, {reader}: >= 1.2x litdata", f"{ours / lit:.2f}x", ours >= 1.2 * lit))
        if disk:
            checks.append((f"images, {reader}: >= ImageFolder on local disk", f"{ours / disk:.2f}x", ours >= disk))
    return checks


if __name__ == "__main__":
    import sys
    import tempfile

    smoke = "--smoke" in sys.argv
    options = Options(repeats=1, smoke=smoke, data_root=Path(tempfile.mkdtemp(prefix="bench-images-")))
    print(render(measure(options)))
