"""A small, deterministic sample of each dataset in the REAL on-disk formats (for demos and tests).

``make_sample_data(out_dir)`` writes::

    vg150/   VG-SGG-with-attri.h5, VG-SGG-dicts-with-attri.json, image_data.json, VG_100K/*.jpg
    gqa200/  GQA_200_ID_Info.json, GQA_200_Train.json, GQA_200_Test.json, images/*.jpg
    oiv6/    annotations/categories_dict.json, annotations/vrd-{train,val,test}-anno.json, images/*.jpg
    psg/     psg.json, coco/{train2017,val2017}/*.jpg, coco/panoptic_{train2017,val2017}/*.png
    rsvgd/   Annotations/*.xml, JPEGImages/*.jpg, train.txt, val.txt, test.txt

The VG150 sample uses the real VG150 vocabulary (150 classes, 50 predicates) with long-tailed predicates that
depend on the (subject, object) classes (so a frequency prior is learnable), ``VG150_SAMPLE_NUM_VAL`` val +
about 40 train + 13 test images, some duplicate test triplets, some images dropped by the loader (no boxes / no
relations) and the corrupted image id 1592 in ``image_data.json`` (absent from the h5). Because the sample has
far fewer than 5,000 split-0 images, use ``VG150Dataset(num_val_images=VG150_SAMPLE_NUM_VAL)`` with it.
GQA200/PSG/OIv6 class names outside the real public vocabularies are placeholders. The OIv6 sample (PySGG's
files) has 40 train / 8 val / 16 test kept images, images the reader drops in every split, duplicate GT
triplets and boxes on or past the image border (clamped by the reader).

Images are real JPEG/PNG files (coloured rectangles at the object boxes) so that mmdet's ``LoadImageFromFile``
works. Same seed, same bytes (h5 written without timestamps).
"""
from typing import Dict, Optional, Sequence

from .gqa200 import write_gqa200_sample
from .oiv6 import write_oiv6_sample
from .psg import write_psg_sample
from .rsvgd import write_rsvgd_sample
from .vg150 import write_vg150_sample

WRITERS = dict(vg150=write_vg150_sample, gqa200=write_gqa200_sample, psg=write_psg_sample, rsvgd=write_rsvgd_sample,
               oiv6=write_oiv6_sample)


def make_sample_data(out_dir: str, seed: int = 0, datasets: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Write the sample of each dataset (default all of ``WRITERS``) under ``out_dir/<name>/``.

    Returns {name: summary dict with 'root' and counts}. Deterministic for a given seed.
    """
    names = list(WRITERS) if datasets is None else list(datasets)
    unknown = [n for n in names if n not in WRITERS]
    if unknown:
        raise ValueError(f'unknown sample dataset(s) {unknown}; choose from {list(WRITERS)}')
    return {name: WRITERS[name](out_dir, seed=seed) for name in names}


__all__: Sequence[str] = ('WRITERS', 'make_sample_data')
