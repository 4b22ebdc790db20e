"""Test fixtures: small deterministic datasets in the real on-disk formats, for tests, demos and benchmarks.

Not a dataset (the readers are in :mod:`mmsgg_eval.datasets`): these modules WRITE files that the readers read.
``sample_data`` is the entry point (``make_sample_data``, ``tools/make_sample_data.py``); ``vg150``, ``gqa200``,
``oiv6``, ``psg``, ``rsvgd`` write one dataset each; ``graphs`` draws the random image graphs and saves the files;
``vocabularies`` holds the class / predicate names; ``random_samples`` draws random scene-graph data samples in
memory (the tests' differential checks and the benchmark workloads; imported by its full name). The format
facts (the VG150 box scale and corrupted image ids, the DIOR image size, the VG150 predicates) are imported from
where the readers and metrics define them.
"""
from .gqa200 import gqa200_vocabulary, write_gqa200_sample
from .oiv6 import OIV6_SAMPLE_SIZES, oiv6_vocabulary, write_oiv6_sample
from .psg import write_psg_sample
from .rsvgd import rsvgd_xml, write_rsvgd_sample
from .sample_data import WRITERS, make_sample_data
from .vg150 import (VG150_SAMPLE_NUM_VAL, encode_boxes_1024, image_record, synthetic_vg150_arrays, vg150_dict_json,
                    write_synthetic_vg150, write_vg150_h5, write_vg150_sample)
from .vocabularies import (COCO_STUFF_CLASSES, COCO_THING_CLASSES, DIOR_SAMPLE_CLASSES, OIV6_PREDICATES,
                           PSG_PREDICATES, VG150_CLASSES, VG150_PREDICATES, VG150_PREDICATES_BY_FREQUENCY)

__all__ = ['make_sample_data', 'WRITERS', 'write_vg150_sample', 'write_gqa200_sample', 'write_psg_sample',
           'write_rsvgd_sample', 'write_oiv6_sample', 'oiv6_vocabulary', 'OIV6_SAMPLE_SIZES', 'OIV6_PREDICATES',
           'write_vg150_h5', 'write_synthetic_vg150', 'synthetic_vg150_arrays',
           'encode_boxes_1024', 'vg150_dict_json', 'image_record', 'rsvgd_xml', 'gqa200_vocabulary',
           'VG150_SAMPLE_NUM_VAL', 'VG150_CLASSES', 'VG150_PREDICATES', 'VG150_PREDICATES_BY_FREQUENCY',
           'COCO_THING_CLASSES', 'COCO_STUFF_CLASSES', 'PSG_PREDICATES', 'DIOR_SAMPLE_CLASSES']
