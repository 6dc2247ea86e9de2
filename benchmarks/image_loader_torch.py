"""The PyTorch side of ``benchmarks/image_loader.py``: ``torch.utils.data.DataLoader`` over an
image folder, decoding with ``torchvision.io.decode_image`` (or Pillow) and augmenting uint8
tensors with ``torchvision.transforms.v2``; prints one JSON line of images/s.  It imports no
neonlite (it runs in an interpreter that has torchvision, which may lack neonlite); the CPU
time per image of the last epoch (this process and its workers) comes with it.

    python benchmarks/image_loader_torch.py ROOT {png32,jpeg224} {decode_image,pillow}
        [--workers 2] [--batch 128] [--epochs 2]
"""
import argparse
import json
import sys
import time
from pathlib import Path

from process_cpu import tree_seconds

MEAN, STD = [0.49, 0.48, 0.45], [0.25, 0.24, 0.26]


def transforms(kind):
    import torch
    from torchvision.transforms import v2
    crop = v2.RandomCrop(32, padding=4) if kind == "png32" else \
        v2.RandomResizedCrop(224, antialias=True)
    return v2.Compose([crop, v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


class Folder:
    """``ROOT/train/<class>/*`` as (image, label) samples, decoded by ``decoder``."""

    def __init__(self, root, kind, decoder):
        classes = sorted(p.name for p in (Path(root) / "train").iterdir())
        self.files = [(str(f), i) for i, c in enumerate(classes)
                      for f in sorted((Path(root) / "train" / c).iterdir())]
        self.transform, self.decoder = transforms(kind), decoder

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import torch
        from torchvision.io import ImageReadMode, decode_image, read_file
        path, label = self.files[i]
        if self.decoder == "decode_image":
            image = decode_image(read_file(path), mode=ImageReadMode.RGB)
        else:
            from PIL import Image
            from torchvision.transforms.v2.functional import pil_to_tensor
            with Image.open(path) as picture:
                image = pil_to_tensor(picture.convert("RGB"))
        return self.transform(image), torch.tensor(label)


def worker_pids(loader):
    """The pids of the DataLoader's persistent workers (none before its first epoch)."""
    iterator = getattr(loader, "_iterator", None)
    return [w.pid for w in getattr(iterator, "_workers", [])]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("kind", choices=("png32", "jpeg224"))
    parser.add_argument("decoder", choices=("decode_image", "pillow"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    data = Folder(args.root, args.kind, args.decoder)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, persistent_workers=True,
                                         drop_last=False)
    rates, cpu = [], []
    for _ in range(args.epochs):
        pids = worker_pids(loader)
        start, used, count = time.perf_counter(), tree_seconds(pids), 0
        for x, _ in loader:
            count += x.shape[0]
        rates.append(count / (time.perf_counter() - start))
        cpu.append((tree_seconds(worker_pids(loader)) - used) * 1e3 / count)
    print(json.dumps({"images_per_s": rates[-1], "cpu_ms_per_image": cpu[-1], "epochs": rates}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
